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
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.expressions.Exists;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.OneRowRelation;
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
 * reflection): each table's name, the snapshot read, its current metadata file and the read's options; and the
 * tables themselves, by name, whose metadata the Refresher looks up. The rest of
 * the key (the statement, the session's catalog, namespace and settings: ResultCache.key) is read from a running
 * SQLContext and not tested here. The tables are stand-ins answering as Iceberg's SparkTable does (table(),
 * snapshotId(), table().operations().current().metadataFileLocation()): Iceberg is not on this class path.
 */
class ResultCacheKeyTest {
    private Method tables;
    private final Map<String, Object> objects = new HashMap<>();  // the tables read, by name (what Refresher watches)

    @BeforeEach
    void catalyst() throws NoSuchMethodException {
        tables = ResultCache.class.getDeclaredMethod("tables", LogicalPlan.class, List.class, Map.class);
        tables.setAccessible(true);
    }

    /** A table as Iceberg's SparkTable answers: its snapshot (null: the current one) and its metadata file. */
    public static final class IcebergLike implements Table {
        private final String name;
        private final Long snapshot;
        private final String metadata;

        IcebergLike(String name, Long snapshot, String metadata) {
            this.name = name;
            this.snapshot = snapshot;
            this.metadata = metadata;
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
            return new Metadata(metadata);
        }
    }

    /** Iceberg's table, its operations and their current metadata, in one. */
    public static final class Metadata {
        private final String location;

        Metadata(String location) {
            this.location = location;
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

    static LogicalPlan read(String name, Long snapshot, String metadata) {
        return read(new IcebergLike(name, snapshot, metadata), Map.of());
    }

    /** The key's part of the plan's tables, or null when a table's metadata cannot be named (not cached). */
    private List<String> part(LogicalPlan plan) throws Throwable {
        List<String> out = new ArrayList<>();
        try {
            return (Boolean) tables.invoke(null, plan, out, objects) ? out : null;
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    @Test
    void eachTableReadIsItsNameSnapshotMetadataFileAndOptions() throws Throwable {
        assertEquals(List.of("lake.silver.orders@null@s3://w/orders/metadata/00007.metadata.json@{}"),
            part(select(text("x"), read("lake.silver.orders", null, "s3://w/orders/metadata/00007.metadata.json"))));
        assertEquals(List.of("lake.silver.orders@41@m7.json@{snapshot-id=41}"),
            part(read(new IcebergLike("lake.silver.orders", 41L, "m7.json"), Map.of("snapshot-id", "41"))));
    }

    @Test
    void theSameTablesInTheSameStateMakeTheSameKeyAndACommitAnother() throws Throwable {
        List<String> before = part(read("lake.t", null, "m1.json"));
        assertEquals(before, part(read("lake.t", null, "m1.json")));
        assertNotEquals(before, part(read("lake.t", null, "m2.json")));  // a commit: a new metadata file
        assertNotEquals(before, part(read("lake.t", 5L, "m1.json")));  // another snapshot, travelled to
        assertNotEquals(before, part(read("lake.u", null, "m1.json")));
        assertNotEquals(before, part(read(new IcebergLike("lake.t", null, "m1.json"), Map.of("branch", "b"))));
    }

    @Test
    void theTablesOfSubqueriesArePartOfIt() throws Throwable {
        LogicalPlan plan = new Filter(new Exists(read("lake.inner", null, "i1.json"), seq(),
            NamedExpression$.MODULE$.newExprId(), seq(), Option.empty()), read("lake.outer", null, "o1.json"));
        assertEquals(List.of("lake.inner@null@i1.json@{}", "lake.outer@null@o1.json@{}"), part(plan));
        assertEquals(Set.of("lake.inner", "lake.outer"), objects.keySet());
        assertEquals("i1.json", ResultCache.metadataFile(objects.get("lake.inner")));
    }

    @Test
    void aTableWhoseMetadataCannotBeNamedMakesNoKey() throws Throwable {
        assertNull(part(read(new Other(), Map.of())));
        assertNull(part(new Filter(new Exists(read(new Other(), Map.of()), seq(),
            NamedExpression$.MODULE$.newExprId(), seq(), Option.empty()), read("lake.t", null, "m1.json"))));
        assertTrue(part(new OneRowRelation()).isEmpty());
        assertFalse(part(read("lake.t", null, "m1.json")).isEmpty());
    }
}
