package lakehouse;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Locale;
import java.util.Set;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.ResolvedTable;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.EndsWith;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.Lower;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.expressions.StartsWith;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.DescribeRelation;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.ShowTables;
import org.apache.spark.sql.catalyst.rules.Rule;
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
import scala.Tuple2;
import scala.collection.Iterator;
import scala.collection.JavaConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * The SQL endpoint's session extension: a check every statement passes after analysis and before it runs, so
 * that nothing is written. Statements that only read (queries, SHOW, DESCRIBE, EXPLAIN, USE, reading a setting
 * or setting one of a few harmless ones) pass; every other command (INSERT, MERGE, UPDATE, DELETE, CREATE, DROP,
 * ALTER, CALL, CACHE, ADD JAR, writes to paths, ...) is refused, as is calling Java methods by reflection. Raw
 * tables (named bronze_* or *_quarantine, as the declaration names them) are refused to every reader, but for
 * those named in spark.lakehouse.serve.exposed (declared tables of other layers named so) and unless
 * spark.lakehouse.serve.raw is true (the engineer's setting).
 *
 * <p>SHOW TABLES answers as HiveServer2 does, one column of table names, and without the raw tables a reader
 * may not read: clients of the protocol (PyHive's SQLAlchemy dialect, and through it Superset) take a table's
 * name from the first column, which in Spark's own answer is the namespace. DESCRIBE of a table partitioned by
 * transforms (days(ts), bucket(8, id)) answers as HiveServer2 does too: its partition section is headed
 * "# Partition Information" and names each transform's source column and type (the transform in the comment);
 * Spark's own "# Partitioning" rows, with no type, stop those clients' column reflection.
 */
public class ReadOnlySql extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    public static final String RAW = "spark.lakehouse.serve.raw";
    public static final String EXPOSED = "spark.lakehouse.serve.exposed";

    static final Set<String> READING_COMMANDS = new HashSet<>(Arrays.asList(
        "ShowTables", "ShowTablesExtended", "ShowTablesCommand", "ShowNamespaces", "ShowViews", "ShowViewsCommand",
        "ShowColumns", "ShowColumnsCommand", "ShowTableProperties", "ShowTablePropertiesCommand",
        "ShowCreateTable", "ShowCreateTableCommand", "ShowPartitions", "ShowPartitionsCommand", "ShowFunctions",
        "ShowFunctionsCommand", "ShowCatalogsCommand", "ShowCurrentNamespace", "ShowCurrentNamespaceCommand",
        "DescribeRelation", "DescribeTableCommand", "DescribeColumn", "DescribeColumnCommand",
        "DescribeNamespace", "DescribeDatabaseCommand", "DescribeFunction", "DescribeFunctionCommand",
        "DescribeQueryCommand", "ExplainCommand", "SetCatalogAndNamespace", "SetCatalogCommand",
        "SetNamespaceCommand", "ResetCommand"));

    // Session settings a client may change: how results look and are computed, never where data is.
    static final String[] SETTABLE = {"spark.sql.session.timezone", "spark.sql.shuffle.partitions",
        "spark.sql.ansi.", "spark.sql.adaptive.", "spark.scheduler.pool", "spark.sql.thriftserver.scheduler.pool",
        "spark.sql.legacy.timeparserpolicy", "spark.sql.datetime.java8api.enabled"};

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
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

    static boolean rawVisible(SparkSession session) {
        return Boolean.parseBoolean(session.conf().get(RAW, "false"));
    }

    static Set<String> exposed(SparkSession session) {
        Set<String> names = new HashSet<>();
        for (String name : session.conf().get(EXPOSED, "").split(",")) {
            if (!name.trim().isEmpty()) {
                names.add(name.trim().toLowerCase(Locale.ROOT));
            }
        }
        return names;
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
                Expression lower = new Lower(name);
                Expression raw = new Or(new StartsWith(lower, Literal$.MODULE$.apply("bronze_")),
                    new EndsWith(lower, Literal$.MODULE$.apply("_quarantine")));
                for (String exposed : exposed(session)) {
                    raw = new And(raw, new Not(new EqualTo(lower, Literal$.MODULE$.apply(exposed))));
                }
                listed = new Filter(new Not(raw), plan);
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
            return new LocalRelation(plan.output(), JavaConverters.asScalaBuffer(rows).toSeq(), false);
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

    static final class Check extends AbstractFunction1<LogicalPlan, BoxedUnit> {
        private final SparkSession session;

        Check(SparkSession session) {
            this.session = session;
        }

        @Override
        public BoxedUnit apply(LogicalPlan plan) {
            visit(plan);
            return BoxedUnit.UNIT;
        }

        private void visit(LogicalPlan node) {
            String kind = node.getClass().getSimpleName();
            if (node instanceof SetCommand) {
                checkSetting((SetCommand) node);
            } else if (node instanceof Command && !READING_COMMANDS.contains(kind)) {
                throw refused(kind + " is a write or a change: this endpoint only reads");
            }
            if (node instanceof DataSourceV2Relation) {
                Option<Identifier> id = ((DataSourceV2Relation) node).identifier();
                if (id.isDefined()) {
                    checkTable(id.get());
                }
            }
            Iterator<Expression> expressions = node.expressions().iterator();
            while (expressions.hasNext()) {
                visitExpression(expressions.next());
            }
            Iterator<LogicalPlan> children = node.children().iterator();
            while (children.hasNext()) {
                visit(children.next());
            }
        }

        private void visitExpression(Expression expression) {
            String kind = expression.getClass().getSimpleName();
            if (kind.equals("CallMethodViaReflection")) {
                throw refused("calling Java methods (reflect, java_method) is not allowed on this endpoint");
            }
            if (expression instanceof org.apache.spark.sql.catalyst.expressions.SubqueryExpression) {
                visit(((org.apache.spark.sql.catalyst.expressions.SubqueryExpression) expression).plan());
            }
            Iterator<Expression> children = expression.children().iterator();
            while (children.hasNext()) {
                visitExpression(children.next());
            }
        }

        private void checkTable(Identifier id) {
            if (rawVisible(session)) {
                return;
            }
            Set<String> exposed = exposed(session);
            String[] namespace = id.namespace();
            java.util.List<String> names = new java.util.ArrayList<>();
            names.add(id.name());
            if (namespace.length > 1) {
                names.add(namespace[namespace.length - 1]);  // the table of a metadata table (ns.table.files)
            }
            for (String name : names) {
                String lower = name.toLowerCase(Locale.ROOT);
                boolean raw = lower.startsWith("bronze_") || lower.endsWith("_quarantine");
                if (raw && !exposed.contains(lower)) {
                    throw refused("table " + name + " holds raw data and is not exposed on this endpoint "
                        + "(an engineer's endpoint exposes it: LAKEHOUSE_SQL_RAW=1)");
                }
            }
        }

        private void checkSetting(SetCommand command) {
            Option<Tuple2<String, Option<String>>> kv = command.kv();
            if (kv.isEmpty() || kv.get()._2().isEmpty()) {
                return;  // SET, SET -v, SET key: reading settings
            }
            String key = kv.get()._1().toLowerCase(Locale.ROOT);
            for (String allowed : SETTABLE) {
                if (key.equals(allowed) || (allowed.endsWith(".") && key.startsWith(allowed))) {
                    return;
                }
            }
            throw refused("setting " + kv.get()._1() + " may not be changed on this endpoint");
        }
    }

    static SecurityException refused(String why) {
        return new SecurityException("refused: " + why);
    }
}
