package lakehouse;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Set;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The SQL endpoint's list (read-policy.tsv) as ReadPolicy loads it: what is allowed by name, the reason of what is
 * refused, and the session settings a client may change. Loading it resolves the functions' classes in Spark's
 * function registry.
 */
class ReadPolicyTest {
    static final String NOT_LISTED = "not on the endpoint's list of what reading is made of";
    private ReadPolicy policy;

    @BeforeEach
    void load() {
        policy = ReadPolicy.get();
    }

    @Test
    void aListedFunctionIsAllowedAndSoIsTheClassItIs() {
        for (String function : List.of("upper", "abs", "count", "nvl2", "if", "=", "xxhash64")) {
            assertTrue(policy.functions.contains(function), function);
        }
        for (String expression : List.of("Upper", "Abs", "Count", "Nvl2", "If", "EqualTo", "XxHash64",
                "Alias", "AttributeReference", "Literal")) {
            assertTrue(policy.expressionClasses.contains(expression), expression);
        }
        assertFalse(policy.functions.contains("UPPER"));  // the registry's names, as they are
    }

    @Test
    void aRefusedFunctionIsNotAllowedAndItsClassNamesIt() {
        for (String function : List.of("reflect", "java_method", "try_reflect", "xpath", "xpath_int", "from_xml",
                "from_protobuf", "python_worker_logs")) {
            assertFalse(policy.functions.contains(function), function);
        }
        for (String expression : List.of("CallMethodViaReflection", "XPathInt", "XPathList")) {
            assertFalse(policy.expressionClasses.contains(expression), expression);
        }
        assertEquals(List.of("java_method", "reflect"),
            List.copyOf(policy.expressionFunction.get("CallMethodViaReflection")));
        assertEquals(List.of("try_reflect"), List.copyOf(policy.expressionFunction.get("TryReflect")));
        assertEquals(List.of("xpath_int"), List.copyOf(policy.expressionFunction.get("XPathInt")));
        assertEquals(List.of("xpath"), List.copyOf(policy.expressionFunction.get("XPathList")));
        assertNull(policy.expressionFunction.get("Upper"));
    }

    @Test
    void plansAndCommandsAreNamedByTheirSimpleClassNameExactly() {
        assertTrue(policy.plans.containsAll(Set.of("Project", "Filter", "LocalRelation", "Aggregate", "Join")));
        assertFalse(policy.plans.contains("project"));
        assertFalse(policy.plans.contains("org.apache.spark.sql.catalyst.plans.logical.Project"));
        assertTrue(policy.commands.containsAll(Set.of("ShowTables", "DescribeRelation", "SetCommand")));
        for (String refused : List.of("InsertIntoStatement", "UnresolvedRelation", "HiveTableRelation")) {
            assertFalse(policy.plans.contains(refused), refused);
        }
        for (String refused : List.of("DropTableCommand", "CreateViewCommand", "CacheTable", "ShowTables")) {
            assertFalse(policy.plans.contains(refused), refused);  // a command is no plan node
        }
        assertFalse(policy.commands.contains("DropTableCommand"));
        assertFalse(policy.commands.contains("Project"));
    }

    @Test
    void aRefusalGivesTheListsReasonOrElseThatItIsNotListed() {
        assertEquals("writes a table", policy.why("plan", "InsertIntoStatement"));
        assertEquals("a write, a change or an action of the server", policy.why("command", "DropTableCommand"));
        assertEquals("calls a Java method of the server", policy.why("function", "reflect"));
        assertEquals("parses XML documents, which can name files and addresses outside the query",
            policy.why("function", "xpath_string"));
        assertEquals(NOT_LISTED, policy.why("plan", "SomeNodeOfANewerSpark"));
        assertEquals(NOT_LISTED, policy.why("command", "InsertIntoStatement"));  // the reason is the kind's
    }

    @Test
    void aWholeNumberSettingTakesItsBoundsAndNothingElse() {
        String key = "spark.sql.shuffle.partitions";
        for (String value : List.of("1", "64", " 8 ")) {
            assertNull(policy.settingRefused(key, value), value);
        }
        for (String value : List.of("0", "65", "-1", "8.0", "1e1", "", "99999999999999999999")) {
            assertEquals("setting spark.sql.shuffle.partitions takes a whole number from 1 64 on this endpoint, not "
                + value.trim(), policy.settingRefused(key, value), value);
        }
        assertNull(policy.settingRefused("hive.server2.thrift.resultset.default.fetch.size", "100000"));
        assertEquals("setting hive.server2.thrift.resultset.default.fetch.size takes a whole number from 1 100000 "
            + "on this endpoint, not 100001",
            policy.settingRefused("hive.server2.thrift.resultset.default.fetch.size", "100001"));
    }

    @Test
    void aBooleanAZoneAndAChoiceSettingTakeTheirValuesOnly() {
        for (String value : List.of("true", "FALSE", " True ")) {
            assertNull(policy.settingRefused("spark.sql.ansi.enabled", value), value);
        }
        assertEquals("setting spark.sql.ansi.enabled takes bool on this endpoint, not yes",
            policy.settingRefused("spark.sql.ansi.enabled", "yes"));
        assertEquals("setting spark.sql.ansi.enabled takes bool on this endpoint, not ",
            policy.settingRefused("spark.sql.ansi.enabled", null));
        for (String value : List.of("UTC", "Europe/Paris", "+01:00", "America/Argentina/Buenos_Aires")) {
            assertNull(policy.settingRefused("spark.sql.session.timeZone", value), value);
        }
        assertEquals("setting spark.sql.session.timeZone takes zone on this endpoint, not Mars/Olympus_Mons",
            policy.settingRefused("spark.sql.session.timeZone", "Mars/Olympus_Mons"));
        for (String value : List.of("EXCEPTION", "corrected", "Legacy")) {
            assertNull(policy.settingRefused("spark.sql.legacy.timeParserPolicy", value), value);
        }
        assertEquals("setting spark.sql.legacy.timeParserPolicy takes one of EXCEPTION CORRECTED LEGACY on this "
            + "endpoint, not CORRECTED LEGACY", policy.settingRefused("spark.sql.legacy.timeParserPolicy",
            "CORRECTED LEGACY"));
    }

    @Test
    void aSettingsNameIsMatchedWhateverItsCase() {
        assertNull(policy.settingRefused("SPARK.SQL.ANSI.ENABLED", "true"));
        assertNull(policy.settingRefused("spark.sql.session.timezone", "UTC"));
        assertEquals("setting Spark.SQL.Shuffle.Partitions takes a whole number from 1 64 on this endpoint, not 65",
            policy.settingRefused("Spark.SQL.Shuffle.Partitions", "65"));
    }

    @Test
    void anUnlistedSettingIsRefusedNamingTheSettableOnes() {
        String settable = "(settable: [hive.server2.thrift.resultset.default.fetch.size, spark.sql.adaptive.enabled, "
            + "spark.sql.ansi.enabled, spark.sql.datetime.java8API.enabled, spark.sql.legacy.timeParserPolicy, "
            + "spark.sql.session.timeZone, spark.sql.shuffle.partitions])";
        for (String key : List.of("spark.sql.warehouse.dir", "spark.hadoop.fs.s3a.secret.key",
                "spark.sql.shuffle.partitions.extra", "spark.lakehouse.serve.raw")) {
            assertEquals("setting " + key + " may not be changed on this endpoint " + settable,
                policy.settingRefused(key, "x"), key);
        }
    }

    @Test
    void aRefusedValueIsQuotedToFortyCharacters() {
        String value = "Europe/" + "x".repeat(60);
        assertEquals("setting spark.sql.session.timeZone takes zone on this endpoint, not "
            + value.substring(0, 40) + "...", policy.settingRefused("spark.sql.session.timeZone", value));
        assertEquals("x".repeat(40), ReadPolicy.abbreviate("x".repeat(40)));
    }
}
