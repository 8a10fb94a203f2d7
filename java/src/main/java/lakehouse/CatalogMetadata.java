package lakehouse;

import java.lang.reflect.Field;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.Predicate;

import org.apache.hive.service.Service;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.cli.OperationState;
import org.apache.hive.service.cli.operation.ExecuteStatementOperation;
import org.apache.hive.service.cli.operation.GetColumnsOperation;
import org.apache.hive.service.cli.operation.GetSchemasOperation;
import org.apache.hive.service.cli.operation.GetTablesOperation;
import org.apache.hive.service.cli.operation.MetadataOperation;
import org.apache.hive.service.cli.operation.Operation;
import org.apache.hive.service.cli.operation.OperationManager;
import org.apache.hive.service.cli.session.HiveSession;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2;
import org.apache.spark.sql.hive.thriftserver.SparkSQLSessionManager;
import org.apache.spark.sql.hive.thriftserver.server.SparkSQLOperationManager;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.StructField;

/**
 * The SQL endpoint's answers to a JDBC or ODBC driver's metadata calls (getSchemas, getTables, getColumns: the
 * table tree of DBeaver, Tableau or beeline's !tables), from the lakehouse's catalog. Spark's Thrift server answers
 * them from Spark's built-in session catalog only, which holds none of the lakehouse's tables. The namespaces and
 * tables come from SHOW NAMESPACES and SHOW TABLES in the client's own session, so the read-only extension's rules
 * apply: raw tables a reader may not read are not listed. Each statement is a CachedStatement (the result cache
 * and the row limit, Spark's own statement operation otherwise). Everything else is Spark's operation manager's.
 */
public final class CatalogMetadata extends SparkSQLOperationManager {

    private final ResultCache cache;  // null: results are not kept
    private final long rowLimit;

    private CatalogMetadata(int cacheRows, long cacheBytes, long rowLimit, long refreshSeconds, long idleSeconds,
                            long holdRows) {
        this.cache = cacheRows > 0 && cacheBytes > 0 ? new ResultCache(cacheRows, cacheBytes) : null;
        if (cache != null && refreshSeconds > 0) {
            cache.refreshEvery(refreshSeconds, idleSeconds, holdRows);
        }
        this.rowLimit = rowLimit;
    }

    /**
     * Put this in place of the started Thrift server's operation manager (before any client has connected):
     * query results of at most cacheRows rows are kept, at most cacheBytes in all (ResultCache; none when either
     * is 0), and a client may fetch at most rowLimit rows of a result (0: no limit). A kept query asked again
     * within idleSeconds has its new answer computed when a table it reads takes a commit, its tables looked up
     * every refreshSeconds (Refresher; 0: never), and the small tables they read held in memory up to holdRows
     * rows in all (HeldTables; 0: none).
     */
    public static void install(HiveThriftServer2 server, int cacheRows, long cacheBytes, long rowLimit,
                               long refreshSeconds, long idleSeconds, long holdRows)
            throws ReflectiveOperationException {
        SessionManager sessions = cliService(server).getSessionManager();
        CatalogMetadata manager = new CatalogMetadata(cacheRows, cacheBytes, rowLimit, refreshSeconds, idleSeconds,
            holdRows);
        // Spark's manager reads Hive's map of operations from its superclass's field when it is made, which for a
        // subclass is its own (still empty) field: hand it Hive's map.
        Field operations = OperationManager.class.getDeclaredField("handleToOperation");
        operations.setAccessible(true);
        replace(SparkSQLOperationManager.class, manager, "handleToOperation", operations.get(manager));
        manager.init(sessions.getHiveConf());
        manager.start();
        replace(SessionManager.class, sessions, "operationManager", manager);
        replace(SparkSQLSessionManager.class, sessions, "sparkSqlOperationManager", manager);
    }

    /** The started Thrift server's CLI service (its sessions and operations). */
    static CLIService cliService(HiveThriftServer2 server) {
        for (Service service : server.getServices()) {
            if (service instanceof CLIService) {
                return (CLIService) service;
            }
        }
        throw new IllegalStateException("the Thrift server has no CLI service");
    }

    private static void replace(Class<?> owner, Object target, String name, Object value)
            throws ReflectiveOperationException {
        Field field = owner.getDeclaredField(name);
        field.setAccessible(true);
        field.set(target, value);
    }

    /** The client's Spark session: Spark 4's operation manager keeps the API's SparkSession, the classic one here. */
    private SparkSession spark(HiveSession session) {
        org.apache.spark.sql.SparkSession spark = sessionToContexts().get(session.getSessionHandle());
        if (spark == null) {
            throw new IllegalStateException("no Spark session for " + session.getSessionHandle());
        }
        if (!(spark instanceof SparkSession)) {
            throw new IllegalStateException("not a classic Spark session for " + session.getSessionHandle() + ": "
                + spark.getClass().getName());
        }
        return (SparkSession) spark;
    }

    private <T extends Operation> T register(T operation) {
        handleToOperation().put(operation.getHandle(), operation);
        return operation;
    }

    @Override
    public synchronized ExecuteStatementOperation newExecuteStatementOperation(HiveSession session, String statement,
                                                                           Map<String, String> overlay,
                                                                           boolean async, long timeout) {
        SparkSession spark = spark(session);
        boolean background = async && Boolean.parseBoolean(
            spark.conf().get("spark.sql.hive.thriftServer.async", "true"));
        return register(new CachedStatement(spark, session, statement, overlay, background, timeout, cache,
            rowLimit));
    }

    @Override
    public synchronized GetSchemasOperation newGetSchemasOperation(HiveSession session, String catalog,
                                                                   String schema) {
        return register(new Schemas(session, spark(session), schema));
    }

    @Override
    public synchronized MetadataOperation newGetTablesOperation(HiveSession session, String catalog, String schema,
                                                                String table, List<String> types) {
        return register(new Tables(session, spark(session), schema, table, types));
    }

    @Override
    public synchronized GetColumnsOperation newGetColumnsOperation(HiveSession session, String catalog,
                                                                   String schema, String table, String column) {
        return register(new Columns(session, spark(session), schema, table, column));
    }

    /**
     * A JDBC search pattern (% or * any run, _ any one character, \\ escapes) as a test of a name, ignoring case;
     * null or empty: all. Matched in time proportional to the pattern's length times the name's (no regular
     * expression: a client's pattern of many runs cannot make it backtrack without end).
     */
    static Predicate<String> pattern(String jdbc) {
        if (jdbc == null || jdbc.isEmpty() || jdbc.equals("*")) {
            return name -> true;
        }
        StringBuilder tokens = new StringBuilder();  // '\u0001' any run, '\u0002' any one, else the character
        for (int i = 0; i < jdbc.length(); i++) {
            char c = jdbc.charAt(i);
            if (c == '\\' && i + 1 < jdbc.length()) {
                tokens.append(Character.toLowerCase(jdbc.charAt(++i)));
            } else if (c == '%' || c == '*') {
                tokens.append('\u0001');
            } else if (c == '_') {
                tokens.append('\u0002');
            } else {
                tokens.append(Character.toLowerCase(c));
            }
        }
        String wanted = tokens.toString();
        return name -> glob(wanted, name.toLowerCase(Locale.ROOT));
    }

    private static boolean glob(String pattern, String name) {
        int p = 0;
        int n = 0;
        int star = -1;  // the pattern's position after its last run, and where in the name that run now ends
        int resume = 0;
        while (n < name.length()) {
            if (p < pattern.length() && (pattern.charAt(p) == '\u0002'
                    || (pattern.charAt(p) != '\u0001' && pattern.charAt(p) == name.charAt(n)))) {
                p++;
                n++;
            } else if (p < pattern.length() && pattern.charAt(p) == '\u0001') {
                star = ++p;
                resume = n;
            } else if (star >= 0) {
                p = star;
                n = ++resume;
            } else {
                return false;
            }
        }
        while (p < pattern.length() && pattern.charAt(p) == '\u0001') {
            p++;
        }
        return p == pattern.length();
    }

    static String quoted(String name) {
        return "`" + name.replace("`", "``") + "`";
    }

    static List<String> namespaces(SparkSession spark, String schemaPattern) {
        Predicate<String> wanted = pattern(schemaPattern);
        List<String> out = new ArrayList<>();
        for (Row row : spark.sql("SHOW NAMESPACES").collectAsList()) {
            String name = row.getString(0);
            if (wanted.test(name)) {
                out.add(name);
            }
        }
        return out;
    }

    static List<String> tables(SparkSession spark, String namespace, String tablePattern) {
        Predicate<String> wanted = pattern(tablePattern);
        List<String> out = new ArrayList<>();
        // The endpoint's SHOW TABLES: the names alone, without the raw tables this reader may not read.
        for (Row row : spark.sql("SHOW TABLES IN " + quoted(namespace)).collectAsList()) {
            String name = row.getString(0);
            if (wanted.test(name)) {
                out.add(name);
            }
        }
        return out;
    }

    static HiveSQLException failure(Exception e) {
        return new HiveSQLException("listing the lakehouse's catalog failed: " + e.getMessage(), e);
    }

    static final class Schemas extends GetSchemasOperation {
        private final SparkSession spark;
        private final String schema;

        Schemas(HiveSession session, SparkSession spark, String schema) {
            super(session, null, schema);
            this.spark = spark;
            this.schema = schema;
        }

        @Override
        public void runInternal() throws HiveSQLException {
            setState(OperationState.RUNNING);
            try {
                for (String namespace : namespaces(spark, schema)) {
                    rowSet.addRow(new Object[] {namespace, ""});
                }
                setState(OperationState.FINISHED);
            } catch (Exception e) {
                setState(OperationState.ERROR);
                throw failure(e);
            }
        }
    }

    static final class Tables extends GetTablesOperation {
        private final SparkSession spark;
        private final String schema;
        private final String table;
        private final List<String> types;

        Tables(HiveSession session, SparkSession spark, String schema, String table, List<String> types) {
            super(session, null, schema, table, types);
            this.spark = spark;
            this.schema = schema;
            this.table = table;
            this.types = types;
        }

        @Override
        public void runInternal() throws HiveSQLException {
            setState(OperationState.RUNNING);
            try {
                boolean tablesWanted = types == null || types.isEmpty();
                for (String type : types == null ? List.<String>of() : types) {
                    tablesWanted |= type.toUpperCase(Locale.ROOT).equals("TABLE");
                }
                if (tablesWanted) {
                    for (String namespace : namespaces(spark, schema)) {
                        for (String name : tables(spark, namespace, table)) {
                            rowSet.addRow(new Object[] {"", namespace, name, "TABLE", "", null, null, null, null,
                                null});
                        }
                    }
                }
                setState(OperationState.FINISHED);
            } catch (Exception e) {
                setState(OperationState.ERROR);
                throw failure(e);
            }
        }
    }

    static final class Columns extends GetColumnsOperation {
        private final SparkSession spark;
        private final String schema;
        private final String table;
        private final String column;

        Columns(HiveSession session, SparkSession spark, String schema, String table, String column) {
            super(session, null, schema, table, column);
            this.spark = spark;
            this.schema = schema;
            this.table = table;
            this.column = column;
        }

        @Override
        public void runInternal() throws HiveSQLException {
            setState(OperationState.RUNNING);
            try {
                Predicate<String> wanted = pattern(column);
                for (String namespace : namespaces(spark, schema)) {
                    for (String name : tables(spark, namespace, table)) {
                        StructField[] fields = spark.table(quoted(namespace) + "." + quoted(name)).schema().fields();
                        for (int i = 0; i < fields.length; i++) {
                            if (wanted.test(fields[i].name())) {
                                rowSet.addRow(row(namespace, name, fields[i], i + 1));
                            }
                        }
                    }
                }
                setState(OperationState.FINISHED);
            } catch (Exception e) {
                setState(OperationState.ERROR);
                throw failure(e);
            }
        }

        private static Object[] row(String namespace, String table, StructField field, int position) {
            DataType type = field.dataType();
            String comment = field.getComment().isDefined() ? field.getComment().get() : "";
            return new Object[] {null, namespace, table, field.name(), sqlType(type), type.sql(), size(type), null,
                digits(type), radix(type), field.nullable() ? 1 : 0, comment, null, null, null, null, position,
                field.nullable() ? "YES" : "NO", null, null, null, null, "NO"};
        }

        static int sqlType(DataType type) {
            switch (type.typeName()) {
                case "boolean": return Types.BOOLEAN;
                case "byte": return Types.TINYINT;
                case "short": return Types.SMALLINT;
                case "integer": return Types.INTEGER;
                case "long": return Types.BIGINT;
                case "float": return Types.FLOAT;
                case "double": return Types.DOUBLE;
                case "string": return Types.VARCHAR;
                case "binary": return Types.BINARY;
                case "date": return Types.DATE;
                case "timestamp":
                case "timestamp_ntz": return Types.TIMESTAMP;
                case "array": return Types.ARRAY;
                case "map": return Types.JAVA_OBJECT;
                case "struct": return Types.STRUCT;
                default: return type instanceof DecimalType ? Types.DECIMAL : Types.OTHER;
            }
        }

        static Integer size(DataType type) {
            if (type instanceof DecimalType) {
                return ((DecimalType) type).precision();
            }
            switch (type.typeName()) {
                case "byte": return 3;
                case "short": return 5;
                case "integer": return 10;
                case "long": return 19;
                case "float": return 7;
                case "double": return 15;
                case "date": return 10;
                case "timestamp":
                case "timestamp_ntz": return 29;
                default: return null;
            }
        }

        static Integer digits(DataType type) {
            if (type instanceof DecimalType) {
                return ((DecimalType) type).scale();
            }
            switch (type.typeName()) {
                case "byte":
                case "short":
                case "integer":
                case "long": return 0;
                case "timestamp":
                case "timestamp_ntz": return 6;
                default: return null;
            }
        }

        static Integer radix(DataType type) {
            switch (type.typeName()) {
                case "byte":
                case "short":
                case "integer":
                case "long":
                case "float":
                case "double": return 10;
                default: return type instanceof DecimalType ? 10 : null;
            }
        }
    }
}
