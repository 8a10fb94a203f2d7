package lakehouse;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.OneRowRelation;
import org.apache.spark.sql.catalyst.plans.logical.Range;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.collection.JavaConverters;

/**
 * The SQL endpoint's cache of query results, keyed by what a result depends on: the statement, the client's
 * current catalog and namespace and its session settings, and the metadata file of every Iceberg table the query
 * reads (its current snapshot, or the one it travels to, under that table's current metadata). A table's
 * metadata file is written anew by every commit and never changes, so a cached result is exactly the result the
 * query would compute now, and the next commit to any table read (a run, the stream, a forget, a rollback)
 * leaves it unreachable. Only queries are cached, and only when nothing in them depends on anything else:
 * every table an Iceberg table (or literal rows), no nondeterministic function, no current time, date or user.
 * A result of more rows than the limit, or larger than an eighth of the bytes the cache may hold, is not kept.
 * Clients asking the same uncached query at once share one computation. Entries are dropped least recently used
 * first beyond the bounds (rows and bytes).
 */
public final class ResultCache {
    static final Logger LOG = LoggerFactory.getLogger("lakehouse.ResultCache");
    static final String SPARK_TABLE = "org.apache.iceberg.spark.source.SparkTable";

    /** A kept result: its columns and rows. */
    static final class Entry {
        final StructType schema;
        final List<Row> rows;
        final long bytes;  // about what the rows take in memory

        Entry(StructType schema, List<Row> rows) {
            this.schema = schema;
            this.rows = rows;
            long bytes = 64;
            for (Row row : rows) {
                bytes += 16 + size(row);
            }
            this.bytes = bytes;
        }
    }

    /** About the bytes a value takes in memory: what bounds the cache, however wide or long the rows. */
    static long size(Object value) {
        if (value == null) {
            return 8;
        }
        if (value instanceof String) {
            return 40 + 2L * ((String) value).length();
        }
        if (value instanceof byte[]) {
            return 16 + ((byte[]) value).length;
        }
        if (value instanceof Row) {
            long bytes = 16;
            Row row = (Row) value;
            for (int i = 0; i < row.length(); i++) {
                bytes += size(row.get(i));
            }
            return bytes;
        }
        if (value instanceof scala.collection.Iterable) {
            long bytes = 16;
            scala.collection.Iterator<?> items = ((scala.collection.Iterable<?>) value).iterator();
            while (items.hasNext()) {
                Object item = items.next();
                bytes += item instanceof scala.Tuple2
                    ? size(((scala.Tuple2<?, ?>) item)._1()) + size(((scala.Tuple2<?, ?>) item)._2()) : size(item);
            }
            return bytes;
        }
        return 24;
    }

    final int maxRows;  // the most rows a kept result has
    final long maxTotalRows;  // the most rows kept in all
    final long maxBytes;  // the most bytes kept in all (a kept result takes at most an eighth of it)
    private long totalRows;
    private long totalBytes;
    private final LinkedHashMap<String, Entry> entries = new LinkedHashMap<>(64, 0.75f, true);
    final Map<String, CompletableFuture<Entry>> computing = new ConcurrentHashMap<>();
    Refresher refresher;  // computes the new answers of queries asked again when a commit lands (null: none)
    HeldTables held;  // the small tables those queries read, in memory (null: none)

    public ResultCache(int maxRows, long maxBytes) {
        this.maxRows = maxRows;
        this.maxTotalRows = Math.max(20L * maxRows, 200_000L);
        this.maxBytes = maxBytes;
    }

    /**
     * Queries asked again within idleSeconds are watched: their tables' metadata read again from the catalog
     * every refreshSeconds, their new answers computed and kept when one took a commit (Refresher); the small
     * tables they read held in memory, up to holdRows rows in all (HeldTables; 0: none).
     */
    void refreshEvery(long refreshSeconds, long idleSeconds, long holdRows) {
        held = holdRows > 0 ? new HeldTables(holdRows) : null;
        refresher = new Refresher(this, refreshSeconds * 1000L, idleSeconds * 1000L);
    }

    /** The query as it is computed: the held tables it reads from memory (HeldTables.over). */
    Dataset<Row> computed(Dataset<Row> query) {
        return held == null ? query : held.over(query);
    }

    boolean keeps(Entry entry) {
        return entry.bytes <= maxBytes / 8;
    }

    synchronized Entry get(String key) {
        return entries.get(key);
    }

    synchronized void put(String key, Entry entry) {
        Entry old = entries.put(key, entry);
        totalRows += entry.rows.size() - (old == null ? 0 : old.rows.size());
        totalBytes += entry.bytes - (old == null ? 0 : old.bytes);
        Iterator<Map.Entry<String, Entry>> eldest = entries.entrySet().iterator();
        while ((totalRows > maxTotalRows || totalBytes > maxBytes || entries.size() > 4096) && eldest.hasNext()) {
            Entry dropped = eldest.next().getValue();
            totalRows -= dropped.rows.size();
            totalBytes -= dropped.bytes;
            eldest.remove();
        }
    }

    /**
     * The statement as a query whose result may be kept (analysed, not run), or null: a command, a statement
     * that does not analyse (the caller runs it as Spark would, for Spark's own error), or a query that is not
     * keepable.
     */
    static Dataset<Row> cacheable(SparkSession spark, String statement) {
        try {
            LogicalPlan parsed = spark.sessionState().sqlParser().parsePlan(statement);
            if (!parsed.collectFirst(commands()).isEmpty()) {
                return null;  // parsing only: a command runs when it is analysed
            }
            Dataset<Row> query = spark.sql(statement);
            return keepable(query.queryExecution().analyzed()) ? query : null;
        } catch (Exception e) {
            return null;
        }
    }

    private static scala.PartialFunction<LogicalPlan, Boolean> commands() {
        return new scala.runtime.AbstractPartialFunction<LogicalPlan, Boolean>() {
            @Override
            public boolean isDefinedAt(LogicalPlan plan) {
                return plan instanceof Command || plan.getClass().getSimpleName().startsWith("InsertInto");
            }

            @Override
            public Boolean apply(LogicalPlan plan) {
                return Boolean.TRUE;
            }
        };
    }

    /**
     * Whether a result of the plan may be kept: it reads Iceberg tables (or literal rows) alone, depends on neither
     * the moment nor chance, and reads no view (a view's text may change with no commit to the tables the key names).
     */
    static boolean keepable(LogicalPlan plan) {
        return pure(plan) && viewless(plan);
    }

    static boolean pure(LogicalPlan plan) {
        if (plan instanceof Command) {
            return false;
        }
        if (plan.children().isEmpty() && !(plan instanceof LocalRelation || plan instanceof OneRowRelation
                || plan instanceof Range || (plan instanceof DataSourceV2Relation
                    && ((DataSourceV2Relation) plan).table().getClass().getName().equals(SPARK_TABLE)))) {
            return false;
        }
        for (Expression expression : JavaConverters.seqAsJavaList(plan.expressions())) {
            if (!pure(expression)) {
                return false;
            }
        }
        for (LogicalPlan child : JavaConverters.seqAsJavaList(plan.children())) {
            if (!pure(child)) {
                return false;
            }
        }
        return true;
    }

    static boolean pure(Expression expression) {
        String name = expression.getClass().getSimpleName();
        if (!expression.deterministic() || name.startsWith("Current") || name.equals("Now")
                || name.equals("LocalTimestamp") || name.contains("UDF") || name.contains("Udf")) {
            return false;
        }
        if (expression instanceof SubqueryExpression && !pure(((SubqueryExpression) expression).plan())) {
            return false;
        }
        for (Expression child : JavaConverters.seqAsJavaList(expression.children())) {
            if (!pure(child)) {
                return false;
            }
        }
        return true;
    }

    /**
     * What the query's result depends on, or null when a table's metadata cannot be named: its context (the
     * statement, the namespace, the settings: context()) and the tables it reads, which are also put in reads
     * (when given).
     */
    static String key(String context, Dataset<Row> query, List<Read> reads) {
        List<Read> read = new ArrayList<>();
        if (!tables(query.queryExecution().analyzed(), read)) {
            return null;
        }
        if (reads != null) {
            reads.addAll(read);
        }
        StringBuilder key = new StringBuilder(context);
        for (Read table : read) {
            key.append('\u0000').append(table.part);
        }
        return key.toString();
    }

    /**
     * The key the query's analysis in this context would make now, from a look-up of each table's current
     * metadata in its catalog alone, or null: these reads are not all of the current snapshot with no option, or
     * a look-up failed. Made so only for a query whose tables are named in it (no view between: a view's text may
     * change without a commit).
     */
    static String keyNow(String context, List<Read> reads) {
        StringBuilder key = new StringBuilder(context);
        try {
            for (Read table : reads) {
                if (!table.current) {
                    return null;
                }
                key.append('\u0000').append(table.now());
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;  // dropped, or the catalog unreachable: the analysis says which
        }
        return key.toString();
    }

    /**
     * Whether the plan, its subqueries' included, reads no view: no view node of Spark's, and no catalog's name
     * over anything but a table's relation (Iceberg's views are put in a plan as their query under the view's name).
     */
    static boolean viewless(LogicalPlan plan) {
        return plan.collectWithSubqueries(new scala.runtime.AbstractPartialFunction<LogicalPlan, Boolean>() {
            @Override
            public boolean isDefinedAt(LogicalPlan node) {
                return node.getClass().getSimpleName().contains("View") || node instanceof SubqueryAlias
                    && !((SubqueryAlias) node).identifier().qualifier().isEmpty()
                    && !(((SubqueryAlias) node).child() instanceof DataSourceV2Relation);
            }

            @Override
            public Boolean apply(LogicalPlan node) {
                return Boolean.TRUE;
            }
        }).isEmpty();
    }

    /** What a query's result depends on besides its tables: the statement, the current namespace, the settings. */
    static String context(SparkSession spark, String statement) {
        return statement + '\u0000' + spark.sessionState().catalogManager().currentCatalog().name() + '.'
            + String.join(".", spark.sessionState().catalogManager().currentNamespace()) + '\u0000'
            + new TreeMap<>(JavaConverters.mapAsJavaMap(spark.sessionState().conf().getAllConfs()));
    }

    /** The query's rows, all of them, or null when there are more than maxRows. */
    static Entry collect(Dataset<Row> query, int maxRows) {
        Iterator<Row> all = query.toLocalIterator();
        List<Row> rows = new ArrayList<>();
        while (rows.size() <= maxRows && all.hasNext()) {
            rows.add(all.next());
        }
        return all.hasNext() || rows.size() > maxRows ? null : new Entry(query.schema(), List.copyOf(rows));
    }

    /**
     * A table a query reads, as its key names it: the table's name, the snapshot read, the metadata file it was
     * read at and the read's options.
     */
    static final class Read {
        final String name;
        final Object table;  // Iceberg's table (the session's classes, not on the class path this is compiled against)
        final String file;  // the metadata file it was read at
        final String part;  // its part of the key
        final boolean current;  // the current snapshot at that metadata file, read with no option

        Read(String name, Object table, Object snapshot, Map<String, String> options)
                throws ReflectiveOperationException {
            Object metadata = call(call(table, "operations"), "current");
            this.name = name;
            this.table = table;
            this.file = String.valueOf(call(metadata, "metadataFileLocation"));
            this.part = part(name, snapshot, file, options);
            this.current = options.isEmpty() && String.valueOf(snapshot).equals(String.valueOf(snapshotId(metadata)));
        }

        /**
         * Its part of the key as the query's analysis would make it now (a read of the current snapshot): the
         * table's current metadata looked up in its catalog.
         */
        String now() throws ReflectiveOperationException {
            Object metadata = lookUp(table);
            return part(name, snapshotId(metadata), call(metadata, "metadataFileLocation"), Map.of());
        }

        static String part(String name, Object snapshot, Object file, Map<String, String> options) {
            return name + "@" + snapshot + "@" + file + "@" + new TreeMap<>(options);
        }

        private static Object snapshotId(Object metadata) throws ReflectiveOperationException {
            Object snapshot = call(metadata, "currentSnapshot");
            return snapshot == null ? null : call(snapshot, "snapshotId");
        }
    }

    /** The current metadata file of an Iceberg table, read again from its catalog. */
    static String currentMetadataFile(Object table) throws ReflectiveOperationException {
        return String.valueOf(call(lookUp(table), "metadataFileLocation"));
    }

    /**
     * An Iceberg table's current metadata, read again from its catalog: one look-up of a table at a time, so that
     * none leaves it at older metadata than another's.
     */
    static Object lookUp(Object table) throws ReflectiveOperationException {
        synchronized (table) {
            call(table, "refresh");
            return call(call(table, "operations"), "current");
        }
    }

    private static boolean tables(LogicalPlan plan, List<Read> out) {
        if (plan instanceof DataSourceV2Relation) {
            DataSourceV2Relation relation = (DataSourceV2Relation) plan;
            try {  // Iceberg's classes are the session's, not on the class path this is compiled against
                Object sparkTable = relation.table();
                out.add(new Read(relation.table().name(), call(sparkTable, "table"), call(sparkTable, "snapshotId"),
                    relation.options().asCaseSensitiveMap()));
            } catch (ReflectiveOperationException | RuntimeException e) {
                return false;
            }
        }
        for (Expression expression : JavaConverters.seqAsJavaList(plan.expressions())) {
            if (!subqueryTables(expression, out)) {
                return false;
            }
        }
        for (LogicalPlan child : JavaConverters.seqAsJavaList(plan.children())) {
            if (!tables(child, out)) {
                return false;
            }
        }
        return true;
    }

    private static boolean subqueryTables(Expression expression, List<Read> out) {
        if (expression instanceof SubqueryExpression && !tables(((SubqueryExpression) expression).plan(), out)) {
            return false;
        }
        for (Expression child : JavaConverters.seqAsJavaList(expression.children())) {
            if (!subqueryTables(child, out)) {
                return false;
            }
        }
        return true;
    }

    static Object call(Object target, String method) throws ReflectiveOperationException {
        Method found = target.getClass().getMethod(method);
        found.setAccessible(true);
        return found.invoke(target);
    }
}
