package lakehouse;

import static lakehouse.ReadOnlySqlCheckTest.column;
import static lakehouse.ReadOnlySqlCheckTest.rows;
import static lakehouse.ReadOnlySqlCheckTest.select;
import static lakehouse.ReadOnlySqlCheckTest.seq;
import static lakehouse.ReadOnlySqlCheckTest.text;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.spark.sql.catalyst.AliasIdentifier;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.CurrentDate;
import org.apache.spark.sql.catalyst.expressions.CurrentTimestamp;
import org.apache.spark.sql.catalyst.expressions.CurrentUser;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Exists;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.LocalTimestamp;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Now;
import org.apache.spark.sql.catalyst.expressions.Rand;
import org.apache.spark.sql.catalyst.expressions.Upper;
import org.apache.spark.sql.catalyst.expressions.Uuid;
import org.apache.spark.sql.catalyst.plans.logical.DescribeRelation;
import org.apache.spark.sql.catalyst.plans.logical.DescribeRelation$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.OneRowRelation;
import org.apache.spark.sql.catalyst.plans.logical.Range;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.execution.command.ResetCommand;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.junit.jupiter.api.Test;

import scala.Option;

/**
 * Which analysed plans the result cache may keep the result of (ResultCache.pure): only queries of literal rows
 * and Iceberg tables whose expressions depend on nothing but them. Plans built from catalyst's classes without a
 * SparkSession. An Iceberg table (Iceberg's SparkTable,
 * not on this class path) is not built here: that it is kept is not tested.
 */
class ResultCachePureTest {

    static LogicalPlan range() {
        AttributeReference id = new AttributeReference("id", DataTypes.LongType, false,
            org.apache.spark.sql.types.Metadata.empty(), NamedExpression$.MODULE$.newExprId(), seq());
        return new Range(0, 10, 1, Option.empty(), seq(id), false);
    }

    static LogicalPlan exists(LogicalPlan inner) {
        return new Filter(new Exists(inner, seq(), NamedExpression$.MODULE$.newExprId(), seq(), Option.empty()),
            new OneRowRelation());
    }

    @Test
    void aQueryOfLiteralRowsARangeOrOneRowIsKept() {
        AttributeReference name = column("name");
        assertTrue(ResultCache.pure(rows(name)));
        assertTrue(ResultCache.pure(new OneRowRelation()));
        assertTrue(ResultCache.pure(range()));
        assertTrue(ResultCache.pure(select(new Upper(name), new Filter(new Not(new IsNull(name)), rows(name)))));
        assertTrue(ResultCache.pure(exists(select(text("x"), range()))));
    }

    @Test
    void aQueryOfATableOtherThanIcebergsOrOfAnUnresolvedOneIsNot() {
        LogicalPlan other = new DataSourceV2Relation(new ResultCacheKeyTest.Other(), seq(), Option.empty(), Option.empty(),
            CaseInsensitiveStringMap.empty(), Option.empty());
        assertFalse(ResultCache.pure(other));
        assertFalse(ResultCache.pure(select(text("x"), new Filter(new EqualTo(text("a"), text("a")), other))));
        assertFalse(ResultCache.pure(select(text("x"), new UnresolvedRelation(seq("t"),
            CaseInsensitiveStringMap.empty(), false))));
    }

    @Test
    void aQueryOfChanceIsNot() {
        for (Expression chance : new Expression[] {new Rand(), new Uuid()}) {
            assertFalse(ResultCache.pure(select(chance, new OneRowRelation())), chance.toString());
            assertFalse(ResultCache.pure(select(text("x"), new Filter(new IsNull(chance), range()))),
                chance.toString());
        }
    }

    @Test
    void aQueryOfTheMomentOrTheUserIsNot() {
        for (Expression moment : new Expression[] {new CurrentDate(), new CurrentTimestamp(), new Now(),
                new LocalTimestamp(), new CurrentUser()}) {
            assertTrue(moment.deterministic(), moment.prettyName());  // known by name, not by determinism
            assertFalse(ResultCache.pure(select(new Not(new IsNull(moment)), new OneRowRelation())),
                moment.prettyName());
        }
    }

    @Test
    void aSubqueryIsHeldToTheSameRules() {
        assertFalse(ResultCache.pure(exists(select(new Rand(), new OneRowRelation()))));
        assertFalse(ResultCache.pure(exists(select(new CurrentDate(), range()))));
    }

    @Test
    void aQueryThroughAViewIsNotKept() {
        LogicalPlan rows = rows(column("name"));
        assertTrue(ResultCache.keepable(select(text("x"), new SubqueryAlias(new AliasIdentifier("x", seq()), rows))));
        // a view of a catalog: its query under the view's qualified name; redefined, it changes no table's metadata
        assertFalse(ResultCache.keepable(select(text("x"), new SubqueryAlias(new AliasIdentifier("v",
            seq("lake", "ns")), select(text("y"), rows)))));
        assertFalse(ResultCache.keepable(select(text("x"), new SubqueryAlias(new AliasIdentifier("v",
            seq("lake", "ns")), select(new Rand(), rows)))));
    }

    @Test
    void aCommandIsNotEvenOverLiteralRows() {
        assertFalse(ResultCache.pure(new ResetCommand(Option.empty())));
        assertFalse(ResultCache.pure(new DescribeRelation(rows(column("name")),
            scala.collection.immutable.Map$.MODULE$.empty(), false,
            DescribeRelation$.MODULE$.getOutputAttrs())));
    }
}
