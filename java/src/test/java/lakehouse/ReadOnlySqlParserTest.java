package lakehouse;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.SparkSqlParser;
import org.junit.jupiter.api.Test;

/**
 * What Spark carries out before a statement's analysed plan reaches the check, refused as the statement is parsed
 * (ReadOnlySql.Parser over Spark's own parser, without a SparkSession): a procedure's CALL, however it is written
 * or wherever it is held, EXECUTE IMMEDIATE, a SQL script, a subquery in a time travel's TIMESTAMP AS OF. Reading
 * statements parse as Spark parses them.
 */
class ReadOnlySqlParserTest {
    private final ReadOnlySql.Parser parser = new ReadOnlySql.Parser(new SparkSqlParser());

    private String refused(String statement) {
        String message = assertThrows(SecurityException.class, () -> parser.parsePlan(statement), statement)
            .getMessage();
        assertTrue(message.startsWith("refused: "), message);
        return message;
    }

    @Test
    void aProcedureIsRefusedBeforeItReachesTheCatalogHoweverItIsCalled() {
        for (String call : List.of(
                "CALL lakehouse.system.rollback_to_snapshot('t.events', 1)",
                "CALL lakehouse.system.expire_snapshots(table => 't.events')",
                "call system.remove_orphan_files('t.events')",
                "CALL IDENTIFIER('lakehouse.system.rollback_to_snapshot')('t.events', 1)",
                "EXPLAIN CALL lakehouse.system.rollback_to_snapshot('t.events', 1)",
                "EXPLAIN EXTENDED CALL lakehouse.system.rollback_to_snapshot('t.events', 1)")) {
            String message = refused(call);
            assertTrue(message.startsWith("refused: Call: calls a procedure"), message);
            assertTrue(message.endsWith("; this endpoint only reads"), message);
        }
    }

    @Test
    void executeImmediateAndScriptsAreRefusedAsTheyAreParsed() {
        assertTrue(refused("EXECUTE IMMEDIATE 'SELECT 1'").startsWith("refused: UnresolvedExecuteImmediate: "));
        assertTrue(refused("EXPLAIN EXECUTE IMMEDIATE 'CALL lakehouse.system.expire_snapshots(\\'t.e\\')'")
            .startsWith("refused: UnresolvedExecuteImmediate: "));
        for (String script : List.of("BEGIN SELECT 1; END",
                "BEGIN DECLARE x INT DEFAULT 0; WHILE x < 3 DO SET x = x + 1; END WHILE; SELECT x; END",
                "BEGIN CALL lakehouse.system.expire_snapshots('t.events'); END")) {
            assertTrue(refused(script).startsWith("refused: CompoundBody: SQL scripting"), script);
        }
    }

    @Test
    void aSubqueryInATimeTravelIsRefusedTheTimeItselfIsNot() {
        for (String statement : List.of(
                "SELECT * FROM t.events TIMESTAMP AS OF (SELECT max(ts) FROM t.bronze_events)",
                "SELECT * FROM t.users JOIN t.events FOR SYSTEM_TIME AS OF (SELECT current_timestamp()) USING (id)",
                "WITH e AS (SELECT * FROM t.events TIMESTAMP AS OF (SELECT max(ts) FROM t.x)) SELECT * FROM e",
                "SELECT (SELECT count(*) FROM t.events TIMESTAMP AS OF date_add((SELECT max(d) FROM t.x), 1))")) {
            assertTrue(refused(statement).contains("a subquery in TIMESTAMP AS OF"), statement);
        }
        assertDoesNotThrow(() -> parser.parsePlan("SELECT * FROM t.events TIMESTAMP AS OF '2025-01-02 00:00:00'"));
        assertDoesNotThrow(() -> parser.parsePlan("SELECT * FROM t.events TIMESTAMP AS OF current_date() - 1"));
        assertDoesNotThrow(() -> parser.parsePlan("SELECT * FROM t.events VERSION AS OF 123"));
    }

    /** Spark's parser, keeping the plan it gave last. */
    static final class Recording extends SparkSqlParser {
        LogicalPlan last;

        @Override
        public LogicalPlan parsePlan(String sqlText) {
            last = super.parsePlan(sqlText);
            return last;
        }
    }

    @Test
    void readingParsesAsSparkParsesIt() throws Exception {
        Recording spark = new Recording();
        ReadOnlySql.Parser parser = new ReadOnlySql.Parser(spark);
        for (String statement : List.of("SELECT 1", "SELECT * FROM t.events WHERE id IN (SELECT id FROM t.users)",
                "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
                "FROM t.events |> WHERE id > 0 |> AGGREGATE count(*)", "SHOW NAMESPACES", "SHOW PROCEDURES",
                "DESCRIBE TABLE t.events", "EXPLAIN SELECT * FROM t.events", "SHOW TABLES IN t",
                "INSERT INTO t.events SELECT * FROM t.events")) {  // a write is the check's to refuse, after analysis
            LogicalPlan plan = assertDoesNotThrow(() -> parser.parsePlan(statement), statement);
            assertSame(spark.last, plan, statement);
        }
        assertEquals("Project", parser.parseQuery("SELECT 1").getClass().getSimpleName());
        assertEquals("('a + 1)", parser.parseExpression("a + 1").toString());
        assertEquals(List.of("a", "b"), scala.jdk.javaapi.CollectionConverters.asJava(
            parser.parseMultipartIdentifier("a.b")));
    }

    @Test
    void whatIsRefusedAsItIsParsedIsRefusedOnTheList() {
        ReadPolicy policy = ReadPolicy.get();
        for (String kind : ReadOnlySql.RUN_BEFORE_THE_CHECK) {
            assertTrue(policy.refusedWhy.containsKey("plan\t" + kind) || policy.refusedWhy.containsKey("command\t"
                + kind), kind);
        }
    }
}
