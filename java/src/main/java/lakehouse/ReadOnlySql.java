package lakehouse;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Set;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.analysis.RelationTimeTravel;
import org.apache.spark.sql.catalyst.analysis.ResolvedPersistentView;
import org.apache.spark.sql.catalyst.analysis.ResolvedTable;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.EndsWith;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.InheritAnalysisRules;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.Lower;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.expressions.StartsWith;
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression;
import org.apache.spark.sql.catalyst.parser.ParameterContext;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.DescribeRelation;
import org.apache.spark.sql.catalyst.plans.logical.DeserializeToObject;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.ShowTables;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.trees.TreeNode;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.IdentityTransform;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.Option;
import scala.Product;
import scala.Tuple2;
import scala.collection.IterableOnce;
import scala.collection.Iterator;
import scala.collection.JavaConverters;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * The SQL endpoint's session extension: a check every statement passes after analysis and before it runs, that
 * allows what reading is made of, by name (ReadPolicy's list): plan nodes of queries over the lakehouse's
 * catalog, the commands that show or describe, built-in functions but those that reach out of the query (Java
 * methods, XML documents), and a few session settings within bounds. Anything else, a kind the list has never
 * heard of included, is refused before it runs, named in the error. Raw tables are refused to every reader, in
 * a query, a DESCRIBE or a SHOW alike. Which tables are raw is not decided here: the rule is serving/read_rule.py's
 * (the one `lakehouse sql` applies), received in the server's Spark settings (RAW, RAW_PREFIXES, RAW_SUFFIXES,
 * EXPOSED: read_rule.endpoint_rule writes them), never a client's session; rawName turns it into one expression.
 *
 * <p>SHOW TABLES answers as HiveServer2 does, one column of table names, and without the raw tables a reader
 * may not read: clients of the protocol (PyHive's SQLAlchemy dialect, and through it Superset) take a table's
 * name from the first column, which in Spark's own answer is the namespace. DESCRIBE of a table partitioned by
 * transforms (days(ts), bucket(8, id)) answers as HiveServer2 does too: its partition section is headed
 * "# Partition Information" and names each transform's source column and type (the transform in the comment);
 * Spark's own "# Partitioning" rows, with no type, stop those clients' column reflection.
 *
 * <p>What Spark carries out before the check can see it is refused as the statement is parsed (Parser): a
 * procedure's CALL and EXECUTE IMMEDIATE, which Spark runs while it analyses the statement, a SQL script (BEGIN ...
 * END), which runs its statements itself, and a subquery in a time travel's TIMESTAMP AS OF, which Spark evaluates
 * while it analyses the statement.
 */
public class ReadOnlySql extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    // The raw-table rule's settings (serving/read_rule.py: RAW_VISIBLE_KEY, RAW_PREFIXES_KEY, ...).
    public static final String RAW = "spark.lakehouse.serve.raw";
    public static final String RAW_PREFIXES = "spark.lakehouse.serve.rawPrefixes";
    public static final String RAW_SUFFIXES = "spark.lakehouse.serve.rawSuffixes";
    public static final String EXPOSED = "spark.lakehouse.serve.exposed";
    public static final String CATALOG = "spark.lakehouse.serve.catalog";

    /**
     * Plan nodes Spark carries out before a statement's analysed plan reaches the check, refused as the statement
     * is parsed: CALL (a procedure, invoked while the statement is analysed), EXECUTE IMMEDIATE (its statement run
     * while analysed) and a SQL script (its statements run one by one, the script never analysed as a whole).
     */
    static final Set<String> RUN_BEFORE_THE_CHECK = Set.of("Call", "UnresolvedProcedure",
        "UnresolvedExecuteImmediate", "CompoundBody");

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectParser(new AbstractFunction2<SparkSession, ParserInterface, ParserInterface>() {
            @Override
            public ParserInterface apply(SparkSession session, ParserInterface delegate) {
                return new Parser(delegate);
            }
        });
        extensions.injectCheckRule(new AbstractFunction1<SparkSession, scala.Function1<LogicalPlan, BoxedUnit>>() {
            @Override
            public scala.Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
                return new Check(session);
            }
        });
        extensions.injectPostHocResolutionRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new TableNames(session);
            }
        });
        extensions.injectPostHocResolutionRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new HiveDescribe();
            }
        });
        return BoxedUnit.UNIT;
    }

    /** The engineer's setting, the server's own: a client's session cannot change it. */
    static boolean rawVisible(SparkSession session) {
        return Boolean.parseBoolean(session.sparkContext().conf().get(RAW, "false"));
    }

    /** The lakehouse's catalog: the one catalog whose tables a statement may read. */
    static String catalogName(SparkSession session) {
        return session.sparkContext().conf().get(CATALOG, "");
    }

    /** A comma-separated setting of the rule, its names lower-cased; the endpoint always sets the rule. */
    static List<String> ruleNames(SparkSession session, String key) {
        Option<String> value = session.sparkContext().conf().getOption(key);
        if (value.isEmpty()) {
            throw new IllegalStateException("the endpoint was started without its raw-table rule (" + key + ")");
        }
        List<String> names = new ArrayList<>();
        for (String name : value.get().split(",")) {
            if (!name.trim().isEmpty()) {
                names.add(name.trim().toLowerCase(Locale.ROOT));
            }
        }
        return names;
    }

    /**
     * Whether the table named by `name` holds raw data a reader of this endpoint may not read, as an expression:
     * its lower-cased name starts with one of the rule's prefixes or ends with one of its suffixes, and is not one
     * of the exposed names. SHOW TABLES filters with it; raw() evaluates it on one name.
     */
    static Expression rawName(SparkSession session, Expression name) {
        if (rawVisible(session)) {
            return Literal$.MODULE$.apply(false);
        }
        Expression lower = new Lower(name);
        Expression raw = Literal$.MODULE$.apply(false);
        for (String prefix : ruleNames(session, RAW_PREFIXES)) {
            raw = new Or(raw, new StartsWith(lower, Literal$.MODULE$.apply(prefix)));
        }
        for (String suffix : ruleNames(session, RAW_SUFFIXES)) {
            raw = new Or(raw, new EndsWith(lower, Literal$.MODULE$.apply(suffix)));
        }
        for (String exposed : ruleNames(session, EXPOSED)) {
            raw = new And(raw, new Not(new EqualTo(lower, Literal$.MODULE$.apply(exposed))));
        }
        return raw;
    }

    /** Whether a table of this name holds raw data a reader of this endpoint may not read. */
    static boolean raw(SparkSession session, String name) {
        return Boolean.TRUE.equals(rawName(session, Literal$.MODULE$.apply(name)).eval(InternalRow.empty()));
    }

    /** SHOW TABLES as the table names alone, the raw ones a reader may not read left out. */
    static final class TableNames extends Rule<LogicalPlan> {
        private final SparkSession session;

        TableNames(SparkSession session) {
            this.session = session;
        }

        @Override
        public LogicalPlan apply(LogicalPlan plan) {
            if (!(plan instanceof ShowTables)) {
                return plan;  // only a statement that is SHOW TABLES itself (and so only once)
            }
            Attribute name = ((ShowTables) plan).output().apply(1);
            LogicalPlan listed = plan;
            if (!rawVisible(session)) {
                listed = new Filter(new Not(rawName(session, name)), plan);
            }
            java.util.List<NamedExpression> columns = Arrays.asList(name);
            return new Project(JavaConverters.asScalaBuffer(columns).toSeq(), listed);
        }
    }

    /** DESCRIBE of a table partitioned by transforms, with its partition section in HiveServer2's shape. */
    static final class HiveDescribe extends Rule<LogicalPlan> {
        @Override
        public LogicalPlan apply(LogicalPlan plan) {
            if (!(plan instanceof DescribeRelation)) {
                return plan;
            }
            DescribeRelation describe = (DescribeRelation) plan;
            if (describe.isExtended() || !describe.partitionSpec().isEmpty()
                    || !(describe.relation() instanceof ResolvedTable)) {
                return plan;
            }
            Table table = ((ResolvedTable) describe.relation()).table();
            Transform[] partitioning = table.partitioning();
            boolean identityOnly = true;
            for (Transform transform : partitioning) {
                identityOnly &= transform instanceof IdentityTransform;
            }
            if (identityOnly) {
                return plan;  // Spark's answer is already HiveServer2's
            }
            StructType schema = table.schema();
            java.util.List<InternalRow> rows = new ArrayList<>();
            for (StructField field : schema.fields()) {
                Option<String> comment = field.getComment();
                rows.add(row(field.name(), field.dataType().simpleString(), comment.isDefined() ? comment.get() : ""));
            }
            rows.add(row("", "", ""));
            rows.add(row("# Partition Information", "", ""));
            rows.add(row("# col_name", "data_type", "comment"));
            for (Transform transform : partitioning) {
                for (NamedReference source : transform.references()) {
                    DataType type = typeOf(schema, source.fieldNames());
                    rows.add(row(String.join(".", source.fieldNames()), type == null ? "" : type.simpleString(),
                        transform.describe()));
                }
            }
            return new LocalRelation(plan.output(), JavaConverters.asScalaBuffer(rows).toSeq(), false,
                Option.empty());  // not streaming: no stream
        }

        private static DataType typeOf(StructType schema, String[] path) {
            DataType type = schema;
            for (String name : path) {
                if (!(type instanceof StructType)) {
                    return null;
                }
                Option<Object> index = ((StructType) type).getFieldIndex(name);
                if (index.isEmpty()) {
                    return null;
                }
                type = ((StructType) type).fields()[(Integer) index.get()].dataType();
            }
            return type;
        }

        private static InternalRow row(String name, String type, String comment) {
            return new GenericInternalRow(new Object[] {
                UTF8String.fromString(name), UTF8String.fromString(type), UTF8String.fromString(comment)});
        }
    }

    /**
     * The check every statement passes after analysis: each node of its plan (subqueries' too) a plan node or
     * command the list allows, each expression an allowed function's or an analyser's own, each table one of the
     * lakehouse's catalog that the reader may read, each setting one the list lets a client set, in its bounds.
     */
    static final class Check extends AbstractFunction1<LogicalPlan, BoxedUnit> {
        private final SparkSession session;
        private final ReadPolicy policy = ReadPolicy.get();

        Check(SparkSession session) {
            this.session = session;
        }

        @Override
        public BoxedUnit apply(LogicalPlan plan) {
            QueryTimeout.statementThread(session);
            visit(plan);
            return BoxedUnit.UNIT;
        }

        private void visit(LogicalPlan node) {
            String kind = node.getClass().getSimpleName();
            if (HeldTables.held(node)) {
                return;  // a table the endpoint itself holds in memory, read from the catalog when it was held
            }
            if (node instanceof SetCommand) {
                checkSetting((SetCommand) node);
            } else if (node instanceof Command) {
                if (!policy.commands.contains(kind)) {
                    throw refused(kind + ": " + policy.why("command", kind) + "; this endpoint only reads");
                }
            } else if (!policy.plans.contains(kind)) {
                throw refused(kind + ": " + policy.why("plan", kind) + "; this endpoint only reads tables of "
                    + "the lakehouse's catalog");
            }
            if (node instanceof DataSourceV2Relation) {
                DataSourceV2Relation relation = (DataSourceV2Relation) node;
                Option<Identifier> id = relation.identifier();
                if (id.isEmpty() || relation.catalog().isEmpty()
                        || !relation.catalog().get().name().equals(catalogName(session))) {
                    throw refused("a relation outside the lakehouse's catalog (" + relation.name() + ")");
                }
                checkTable(id.get());
            } else if (node instanceof ResolvedTable) {
                checkTable(((ResolvedTable) node).identifier());
            } else if (node instanceof ResolvedPersistentView) {
                checkName(((ResolvedPersistentView) node).identifier().name());
            }
            // A result read back as rows (collect, toLocalIterator) is analysed again under a DeserializeToObject that
            // Spark makes from its encoder: SQL cannot write one, and its expressions are the encoder's.
            Iterator<Expression> expressions = node.expressions().iterator();
            while (expressions.hasNext() && !(node instanceof DeserializeToObject)) {
                visitExpression(expressions.next());
            }
            Iterator<LogicalPlan> children = node.children().iterator();
            while (children.hasNext()) {
                visit(children.next());
            }
        }

        private void visitExpression(Expression expression) {
            String kind = expression.getClass().getSimpleName();
            if (!policy.expressionClasses.contains(kind)) {
                Set<String> functions = policy.expressionFunction.get(kind);
                throw refused(functions == null
                    ? "expression " + kind + " is not on the endpoint's list of what reading is made of"
                    : "function " + String.join(" or ", functions) + " "
                        + policy.why("function", functions.iterator().next()));
            }
            if (expression instanceof SubqueryExpression) {
                visit(((SubqueryExpression) expression).plan());
            }
            // A function written as another (nvl2 as if(isnotnull...)) is decided by its name: its arguments are
            // checked, the internal expressions it is carried out with are Spark's own.
            Iterator<Expression> children = expression instanceof InheritAnalysisRules
                ? ((InheritAnalysisRules) expression).parameters().iterator() : expression.children().iterator();
            while (children.hasNext()) {
                visitExpression(children.next());
            }
        }

        private void checkTable(Identifier id) {
            checkName(id.name());
            String[] namespace = id.namespace();
            if (namespace.length > 1) {
                checkName(namespace[namespace.length - 1]);  // the table of a metadata table (ns.table.files)
            }
        }

        private void checkName(String name) {
            if (raw(session, name)) {
                throw refused("table " + name + " holds raw data and is not exposed on this endpoint "
                    + "(an engineer's endpoint exposes it: LAKEHOUSE_SQL_RAW=1)");
            }
        }

        private void checkSetting(SetCommand command) {
            Option<Tuple2<String, Option<String>>> kv = command.kv();
            if (kv.isEmpty()) {
                throw refused("SET lists every setting of the server, its credentials too: ask for one setting "
                    + "by name");
            }
            String key = kv.get()._1();
            Option<String> value = kv.get()._2();
            if (value.isEmpty()) {  // reading one setting: only those a client may set, none of the server's
                if (!policy.settings.containsKey(key.toLowerCase(Locale.ROOT))) {
                    throw refused("setting " + key + " may not be read on this endpoint");
                }
                return;
            }
            String why = policy.settingRefused(key, value.get());
            if (why != null) {
                throw refused(why);
            }
        }
    }

    /**
     * Spark's parser (and Iceberg's, which it may wrap), whose plans are refused when they hold what Spark would
     * carry out before the check (RUN_BEFORE_THE_CHECK, a subquery in a time travel): the statement's own and an
     * EXECUTE IMMEDIATE's, a view's text, anything Spark parses as a plan.
     */
    static final class Parser implements ParserInterface {
        private final ParserInterface delegate;

        Parser(ParserInterface delegate) {
            this.delegate = delegate;
        }

        @Override
        public LogicalPlan parsePlan(String sqlText) throws ParseException {
            return refuseWhatRunsBeforeTheCheck(delegate.parsePlan(sqlText));
        }

        @Override
        public LogicalPlan parsePlanWithParameters(String sqlText, ParameterContext parameters) throws ParseException {
            return refuseWhatRunsBeforeTheCheck(delegate.parsePlanWithParameters(sqlText, parameters));
        }

        @Override
        public LogicalPlan parseQuery(String sqlText) throws ParseException {
            return refuseWhatRunsBeforeTheCheck(delegate.parseQuery(sqlText));
        }

        @Override
        public Expression parseExpression(String sqlText) throws ParseException {
            return delegate.parseExpression(sqlText);
        }

        @Override
        public TableIdentifier parseTableIdentifier(String sqlText) throws ParseException {
            return delegate.parseTableIdentifier(sqlText);
        }

        @Override
        public FunctionIdentifier parseFunctionIdentifier(String sqlText) throws ParseException {
            return delegate.parseFunctionIdentifier(sqlText);
        }

        @Override
        public Seq<String> parseMultipartIdentifier(String sqlText) throws ParseException {
            return delegate.parseMultipartIdentifier(sqlText);
        }

        @Override
        public StructType parseRoutineParam(String sqlText) throws ParseException {
            return delegate.parseRoutineParam(sqlText);
        }

        @Override
        public StructType parseTableSchema(String sqlText) throws ParseException {
            return delegate.parseTableSchema(sqlText);
        }

        @Override
        public DataType parseDataType(String sqlText) throws ParseException {
            return delegate.parseDataType(sqlText);
        }
    }

    /**
     * The parsed plan as it is, unless some node of it (a child, a plan an EXPLAIN or a CACHE ... AS holds, a
     * subquery's, a CTE's) is one Spark carries out before the check: then refused, named as the check names it.
     */
    static LogicalPlan refuseWhatRunsBeforeTheCheck(LogicalPlan plan) {
        walk(plan, Collections.newSetFromMap(new IdentityHashMap<>()));
        return plan;
    }

    private static void walk(Object value, Set<Object> seen) {
        if (value instanceof TreeNode) {
            if (!seen.add(value)) {
                return;
            }
            if (value instanceof LogicalPlan) {
                LogicalPlan node = (LogicalPlan) value;
                String kind = node.getClass().getSimpleName();
                if (RUN_BEFORE_THE_CHECK.contains(kind)) {
                    String listed = node instanceof Command ? "command" : "plan";
                    throw refused(kind + ": " + ReadPolicy.get().why(listed, kind) + "; this endpoint only reads");
                }
                if (node instanceof RelationTimeTravel) {
                    Option<Expression> timestamp = ((RelationTimeTravel) node).timestamp();
                    if (timestamp.isDefined() && holdsSubquery(timestamp.get())) {
                        throw refused("a subquery in TIMESTAMP AS OF, which Spark evaluates while it analyses the "
                            + "statement, before its check: give the time itself");
                    }
                }
                Iterator<LogicalPlan> children = node.children().iterator();
                while (children.hasNext()) {
                    walk(children.next(), seen);
                }
            }
            Iterator<Object> fields = ((TreeNode<?>) value).productIterator();
            while (fields.hasNext()) {
                walk(fields.next(), seen);
            }
        } else if (value instanceof IterableOnce) {  // a Seq, an Option of plans or expressions
            Iterator<?> items = ((IterableOnce<?>) value).iterator();
            while (items.hasNext()) {
                walk(items.next(), seen);
            }
        } else if (value instanceof Product && value.getClass().getName().startsWith("scala.Tuple")) {
            Iterator<Object> items = ((Product) value).productIterator();  // a CTE's (name, definition)
            while (items.hasNext()) {
                walk(items.next(), seen);
            }
        }
    }

    private static boolean holdsSubquery(Expression expression) {
        if (expression instanceof SubqueryExpression) {
            return true;
        }
        Iterator<Expression> children = expression.children().iterator();
        while (children.hasNext()) {
            if (holdsSubquery(children.next())) {
                return true;
            }
        }
        return false;
    }

    static SecurityException refused(String why) {
        return new SecurityException("refused: " + why);
    }
}
