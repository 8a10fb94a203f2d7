package lakehouse;

import static lakehouse.ReadOnlySqlCheckTest.select;
import static lakehouse.ReadOnlySqlCheckTest.seq;
import static lakehouse.ReadOnlySqlCheckTest.text;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.AliasIdentifier;
import org.apache.spark.sql.catalyst.expressions.Exists;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.OneRowRelation;
import org.apache.spark.sql.catalyst.plans.logical.SubqueryAlias;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import scala.Option;

/**
 * The part of a result's cache key that the tables it reads make (ResultCache.tables, private, called by
 * reflection): each table's name, the snapshot read, its current metadata file and the read's options; the tables
 * themselves, whose metadata the Refresher looks up; and the key a watched query's ask makes from those look-ups
 * alone (keyNow), which must be the key its analysis would make. The rest of the key (the statement, the session's
 * catalog, namespace and settings: ResultCache.context) is read from a running SQLContext and not tested here. The
 * tables are stand-ins answering as Iceberg's SparkTable does (table(), snapshotId(),
 * table().operations().current().metadataFileLocation() and currentSnapshot(), table().refresh()): Iceberg is not on
 * this class path.
 */
class ResultCacheKeyTest {
    private Method tables;

    @BeforeEach
    void catalyst() throws NoSuchMethodException {
        tables = ResultCache.class.getDeclaredMethod("tables", LogicalPlan.class, List.class);
        tables.setAccessible(true);
    }

    /** A table as Iceberg's SparkTable answers: the snapshot read (pinned when loaded) and its table. */
    public static final class IcebergLike implements Table {
        private final String name;
        private final Long snapshot;
        private final Metadata table;

        IcebergLike(String name, Long snapshot, Metadata table) {
            this.name = name;
            this.snapshot = snapshot;
            this.table = table;
        }

        @Override
        public String name() {
            return name;
        }

        @Override
        public StructType schema() {
            return new StructType();
        }

        @Override
        public Set<TableCapability> capabilities() {
            return Set.of(TableCapability.BATCH_READ);
        }

        public Long snapshotId() {
            return snapshot;
        }

        public Metadata table() {
            return table;
        }
    }

    /**
     * Iceberg's table, its operations and their current metadata, in one: the metadata file and current snapshot
     * as loaded, and the catalog's, which a refresh loads.
     */
    public static final class Metadata {
        private String location;
        private Long current;
        String committed;  // the catalog's metadata file now (null: as loaded)
        Long committedSnapshot;
        boolean dropped;

        Metadata(String location, Long current) {
            this.location = location;
            this.current = current;
        }

        public Metadata operations() {
            return this;
        }

        public Metadata current() {
            return this;
        }

        public String metadataFileLocation() {
            return location;
        }

        public Snapshot currentSnapshot() {
            return current == null ? null : new Snapshot(current);
        }

        public void refresh() {
            if (dropped) {
                throw new IllegalStateException("Table does not exist");
            }
            if (committed != null) {
                location = committed;
                current = committedSnapshot;
            }
        }
    }

    public static final class Snapshot {
        private final long id;

        Snapshot(long id) {
            this.id = id;
        }

        public long snapshotId() {
            return id;
        }
    }

    /** A table of another kind: no snapshot, no metadata file. */
    public static final class Other implements Table {
        @Override
        public String name() {
            return "other";
        }

        @Override
        public StructType schema() {
            return new StructType();
        }

        @Override
        public Set<TableCapability> capabilities() {
            return Set.of(TableCapability.BATCH_READ);
        }
    }

    static LogicalPlan read(Table table, Map<String, String> options) {
        return new DataSourceV2Relation(table, seq(), Option.empty(), Option.empty(),
            new CaseInsensitiveStringMap(options), Option.empty());
    }

    /** A read of the table's snapshot (null: it has none) at that metadata file, where it is the current one. */
    static LogicalPlan read(String name, Long snapshot, String metadata) {
        return read(new IcebergLike(name, snapshot, new Metadata(metadata, snapshot)), Map.of());
    }

    /** The tables the plan reads, or null when a table's metadata cannot be named (not cached). */
    private List<ResultCache.Read> reads(LogicalPlan plan) throws Throwable {
        List<ResultCache.Read> out = new ArrayList<>();
        try {
            return (Boolean) tables.invoke(null, plan, out) ? out : null;
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    /** The key's part of the plan's tables, or null when a table's metadata cannot be named (not cached). */
    private List<String> part(LogicalPlan plan) throws Throwable {
        List<ResultCache.Read> reads = reads(plan);
        return reads == null ? null : reads.stream().map(read -> read.part).toList();
    }

    /** The key the plan's analysis makes, in a context. */
    private String key(String context, LogicalPlan plan) throws Throwable {
        return context + part(plan).stream().map(part -> "\u0000" + part).reduce("", String::concat);
    }

    @Test
    void eachTableReadIsItsNameSnapshotMetadataFileAndOptions() throws Throwable {
        assertEquals(List.of("lake.silver.orders@null@s3://w/orders/metadata/00007.metadata.json@{}"),
            part(select(text("x"), read("lake.silver.orders", null, "s3://w/orders/metadata/00007.metadata.json"))));
        assertEquals(List.of("lake.silver.orders@41@m7.json@{snapshot-id=41}"), part(read(
            new IcebergLike("lake.silver.orders", 41L, new Metadata("m7.json", 42L)), Map.of("snapshot-id", "41"))));
    }

    @Test
    void theSameTablesInTheSameStateMakeTheSameKeyAndACommitAnother() throws Throwable {
        List<String> before = part(read("lake.t", null, "m1.json"));
        assertEquals(before, part(read("lake.t", null, "m1.json")));
        assertNotEquals(before, part(read("lake.t", null, "m2.json")));  // a commit: a new metadata file
        assertNotEquals(before, part(read("lake.t", 5L, "m1.json")));  // another snapshot, travelled to
        assertNotEquals(before, part(read("lake.u", null, "m1.json")));
        assertNotEquals(before, part(read(new IcebergLike("lake.t", null, new Metadata("m1.json", null)),
            Map.of("branch", "b"))));
    }

    @Test
    void theTablesOfSubqueriesArePartOfIt() throws Throwable {
        LogicalPlan plan = new Filter(new Exists(read("lake.inner", null, "i1.json"), seq(),
            NamedExpression$.MODULE$.newExprId(), seq(), Option.empty()), read("lake.outer", null, "o1.json"));
        assertEquals(List.of("lake.inner@null@i1.json@{}", "lake.outer@null@o1.json@{}"), part(plan));
        assertEquals(List.of("lake.inner", "lake.outer"), reads(plan).stream().map(read -> read.name).toList());
        assertEquals("i1.json", reads(plan).get(0).file);
    }

    @Test
    void aWatchedQuerysKeyFromItsTablesLookUpsAloneIsTheKeyItsAnalysisMakesBeforeAndAfterACommit() throws Throwable {
        Metadata orders = new Metadata("o1.json", 7L);
        Metadata users = new Metadata("u1.json", null);  // no snapshot yet
        LogicalPlan plan = select(text("x"), new Filter(new Exists(read(new IcebergLike("lake.users", null, users),
            Map.of()), seq(), NamedExpression$.MODULE$.newExprId(), seq(), Option.empty()),
            read(new IcebergLike("lake.orders", 7L, orders), Map.of())));
        List<ResultCache.Read> watched = reads(plan);
        assertTrue(watched.stream().allMatch(read -> read.current));
        assertEquals(key("ctx", plan), ResultCache.keyNow("ctx", watched));

        // Commits to both tables: the look-ups make the key the analysis of the new state makes, another key.
        orders.committed = "o2.json";
        orders.committedSnapshot = 8L;
        users.committed = "u2.json";
        users.committedSnapshot = 1L;
        String now = ResultCache.keyNow("ctx", watched);
        LogicalPlan analysedNow = select(text("x"), new Filter(new Exists(read("lake.users", 1L, "u2.json"), seq(),
            NamedExpression$.MODULE$.newExprId(), seq(), Option.empty()), read("lake.orders", 8L, "o2.json")));
        assertEquals(key("ctx", analysedNow), now);
        assertNotEquals(key("ctx", plan), now);
        assertNotEquals(now, ResultCache.keyNow("other ctx", watched));

        // A table dropped: no key by look-up (the ask is analysed, and fails as Spark says).
        users.dropped = true;
        assertNull(ResultCache.keyNow("ctx", watched));
    }

    @Test
    void aReadOfAnotherThanTheCurrentSnapshotOrWithOptionsMakesNoKeyByLookUp() throws Throwable {
        List<ResultCache.Read> travelled = reads(read(new IcebergLike("lake.t", 5L, new Metadata("m9.json", 9L)),
            Map.of()));
        assertFalse(travelled.get(0).current);
        assertNull(ResultCache.keyNow("ctx", travelled));
        List<ResultCache.Read> branch = reads(read(new IcebergLike("lake.t", 9L, new Metadata("m9.json", 9L)),
            Map.of("branch", "audit")));
        assertFalse(branch.get(0).current);
        assertNull(ResultCache.keyNow("ctx", branch));
    }

    @Test
    void aTableWhoseMetadataCannotBeNamedMakesNoKey() throws Throwable {
        assertNull(part(read(new Other(), Map.of())));
        assertNull(part(new Filter(new Exists(read(new Other(), Map.of()), seq(),
            NamedExpression$.MODULE$.newExprId(), seq(), Option.empty()), read("lake.t", null, "m1.json"))));
        assertTrue(part(new OneRowRelation()).isEmpty());
        assertFalse(part(read("lake.t", null, "m1.json")).isEmpty());
    }

    @Test
    void aViewsQueryUnderItsNameIsNoTableNamedInTheStatement() {
        LogicalPlan table = read("lake.t", 3L, "m3.json");
        // a table as the analyser names it, under an alias of the query's, in a subquery of the query's
        LogicalPlan named = new SubqueryAlias(new AliasIdentifier("t", seq("lake", "ns")), table);
        assertTrue(ResultCache.viewless(select(text("x"), new SubqueryAlias(new AliasIdentifier("x", seq()),
            select(text("y"), named)))));
        // a view of a catalog (as Iceberg's are put in a plan): its query under the view's qualified name
        assertFalse(ResultCache.viewless(select(text("x"), new SubqueryAlias(new AliasIdentifier("v",
            seq("lake", "ns")), select(text("y"), named)))));
        assertFalse(ResultCache.viewless(new Filter(new Exists(new SubqueryAlias(new AliasIdentifier("v",
            seq("lake", "ns")), select(text("y"), table)), seq(), NamedExpression$.MODULE$.newExprId(), seq(),
            Option.empty()), named)));
    }
}
