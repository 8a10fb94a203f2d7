package lakehouse;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.Arrays;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Exists;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Nvl2;
import org.apache.spark.sql.catalyst.expressions.ScalarSubquery;
import org.apache.spark.sql.catalyst.expressions.Upper;
import org.apache.spark.sql.catalyst.expressions.xml.XPathBoolean;
import org.apache.spark.sql.catalyst.plans.logical.CollectMetrics;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.OneRowRelation;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.execution.command.ClearCacheCommand$;
import org.apache.spark.sql.execution.command.DropTableCommand;
import org.apache.spark.sql.execution.command.ResetCommand;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import scala.Option;
import scala.Tuple2;
import scala.collection.JavaConverters;
import scala.collection.immutable.Seq;

/**
 * The read-only check every statement's analysed plan passes (ReadOnlySql.Check), on plans built here from
 * catalyst's classes, without a SparkSession. Its entry point (apply) first looks for the statement's job group
 * in the session and its table checks read the raw-table rule from the session's Spark settings, so what is
 * tested is its walk of a plan (visit, private, called by reflection) over plans that read no table.
 */
class ReadOnlySqlCheckTest {
    static final String NOT_LISTED = "not on the endpoint's list of what reading is made of";
    private Method visit;
    private ReadOnlySql.Check check;

    @BeforeEach
    void checker() throws NoSuchMethodException {
        check = new ReadOnlySql.Check(null);  // no session: only table names and the job group need one
        visit = ReadOnlySql.Check.class.getDeclaredMethod("visit", LogicalPlan.class);
        visit.setAccessible(true);
    }

    private void visit(LogicalPlan plan) throws Throwable {
        try {
            visit.invoke(check, plan);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    private String refused(LogicalPlan plan) {
        return assertThrows(SecurityException.class, () -> visit(plan)).getMessage();
    }

    @SafeVarargs
    static <T> Seq<T> seq(T... items) {
        return JavaConverters.asScalaBuffer(Arrays.asList(items)).toList();
    }

    static AttributeReference column(String name) {
        return new AttributeReference(name, DataTypes.StringType, true, Metadata.empty(),
            NamedExpression$.MODULE$.newExprId(), seq());
    }

    static Expression text(String value) {
        return Literal$.MODULE$.apply(value);
    }

    static LogicalPlan select(Expression expression, LogicalPlan from) {
        NamedExpression alias = new Alias(expression, "x", NamedExpression$.MODULE$.newExprId(), seq(),
            Option.empty(), seq());
        return new Project(seq(alias), from);
    }

    static LogicalPlan rows(AttributeReference column) {
        return new LocalRelation(seq(column), seq(new InternalRow[0]), false, Option.empty());
    }

    @Test
    void aQueryOfListedNodesAndFunctionsPasses() {
        AttributeReference name = column("name");
        LogicalPlan query = select(new Upper(name), new Filter(new And(new EqualTo(name, text("a")),
            new Not(new IsNull(name))), rows(name)));
        assertDoesNotThrow(() -> visit(query));
        assertDoesNotThrow(() -> visit(select(text("x"), new OneRowRelation())));
    }

    @Test
    void aRefusedFunctionIsRefusedByItsNamesWithTheListsReason() {
        Expression reflect = new CallMethodViaReflection(seq(text("java.lang.System"), text("exit"), text("1")));
        assertEquals("refused: function java_method or reflect calls a Java method of the server",
            refused(select(reflect, new OneRowRelation())));
        assertEquals("refused: function xpath_boolean parses XML documents, which can name files and addresses "
            + "outside the query", refused(select(new XPathBoolean(text("<a/>"), text("a")), new OneRowRelation())));
    }

    @Test
    void aFunctionIsFoundWhereverItIsInThePlan() {
        AttributeReference name = column("name");
        Expression xpath = new XPathBoolean(name, text("a"));
        String why = "refused: function xpath_boolean parses XML documents, which can name files and addresses "
            + "outside the query";
        assertEquals(why, refused(select(name, new Filter(new And(new EqualTo(name, text("a")),
            new Not(new IsNull(xpath))), rows(name)))));
        LogicalPlan inner = select(xpath, rows(name));  // in a subquery's plan
        assertEquals(why, refused(new Filter(new Exists(inner, seq(), NamedExpression$.MODULE$.newExprId(),
            seq(), Option.empty()), new OneRowRelation())));
        assertEquals(why, refused(select(new ScalarSubquery(inner, seq(), NamedExpression$.MODULE$.newExprId(),
            seq(), Option.empty(), Option.empty(), Option.empty()), new OneRowRelation())));
    }

    @Test
    void anExpressionTheListDoesNotNameIsRefused() {
        assertEquals("refused: expression UnresolvedAttribute is " + NOT_LISTED,
            refused(select(new Upper(new UnresolvedAttribute(seq("name"))), new OneRowRelation())));
    }

    @Test
    void aPlanNodeTheListRefusesIsRefusedWithItsReasonWhereverItIs() {
        String why = "not a reading statement's (unresolved, streaming, a write or code run by the server); this "
            + "endpoint only reads tables of the lakehouse's catalog";
        assertEquals("refused: UnresolvedRelation: " + why, refused(new Filter(Literal$.MODULE$.apply(true),
            new UnresolvedRelation(seq("t"), CaseInsensitiveStringMap.empty(), false))));
        AttributeReference name = column("name");
        assertEquals("refused: CollectMetrics: " + why, refused(select(name, new Filter(new IsNull(name),
            new CollectMetrics("m", seq(), rows(name), 1L)))));
    }

    @Test
    void aCommandIsRefusedUnlessListedAKindNeverHeardOfIncluded() {
        assertEquals("refused: DropTableCommand: a write, a change or an action of the server; this endpoint only "
            + "reads", refused(new DropTableCommand(TableIdentifier.apply("t"), true, false, false)));
        assertEquals("refused: ClearCacheCommand$: " + NOT_LISTED + "; this endpoint only reads",
            refused(ClearCacheCommand$.MODULE$));  // a case object: its class is not on the list at all
        assertDoesNotThrow(() -> visit(new ResetCommand(Option.empty())));
    }

    @Test
    void aSetStatementIsCheckedByItsSettingAndValue() {
        assertEquals("refused: SET lists every setting of the server, its credentials too: ask for one setting by "
            + "name", refused(new SetCommand(Option.empty())));
        assertDoesNotThrow(() -> visit(set("spark.sql.shuffle.partitions", null)));  // read one listed setting
        assertDoesNotThrow(() -> visit(set("SPARK.SQL.ANSI.ENABLED", null)));
        assertEquals("refused: setting spark.hadoop.fs.s3a.secret.key may not be read on this endpoint",
            refused(set("spark.hadoop.fs.s3a.secret.key", null)));
        assertDoesNotThrow(() -> visit(set("spark.sql.shuffle.partitions", "8")));
        assertEquals("refused: setting spark.sql.shuffle.partitions takes a whole number from 1 64 on this "
            + "endpoint, not 100", refused(set("spark.sql.shuffle.partitions", "100")));
        assertEquals("refused: setting spark.sql.warehouse.dir may not be changed on this endpoint",
            refused(set("spark.sql.warehouse.dir", "/tmp")).replaceAll(" \\(settable: .*", ""));
    }

    @Test
    void aFunctionCarriedOutAsAnotherIsDecidedByItsArgumentsNotItsReplacement() {
        AttributeReference name = column("name");
        Expression internal = new UnresolvedAttribute(seq("internal"));  // refused, were it looked at
        assertDoesNotThrow(() -> visit(select(new Nvl2(name, text("a"), text("b"), internal), rows(name))));
        Expression reflect = new CallMethodViaReflection(seq(text("java.lang.System"), text("exit"), text("1")));
        assertEquals("refused: function java_method or reflect calls a Java method of the server",
            refused(select(new Nvl2(name, reflect, text("b"), text("b")), rows(name))));
    }

    private static SetCommand set(String key, String value) {
        return new SetCommand(Option.apply(new Tuple2<>(key, Option.apply(value))));
    }
}
