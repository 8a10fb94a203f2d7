package lakehouse;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.plans.logical.Union;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.execution.columnar.CachedRDDBuilder;
import org.apache.spark.sql.execution.columnar.InMemoryRelation;
import org.apache.spark.sql.execution.columnar.InMemoryRelation$;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.storage.StorageLevel;

import scala.Option;
import scala.collection.JavaConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * The small tables the watched queries read (Refresher), held in the endpoint's memory at a snapshot: Spark's
 * columnar cache of the table's rows, in one partition. A query computed on the endpoint (a client's, or its new
 * answer after a commit) reads a held table from there instead of its files: at the snapshot it is held at, the
 * cache alone; at a later one reached by appends only (a run's, the stream's), the cache and the files those
 * appends added (Iceberg's incremental read from the held snapshot to the current one), nothing else. A table whose
 * commits since are anything but appends (a MERGE, a delete, a forget, a rollback), whose columns changed, or that
 * a query reads otherwise (at a snapshot before the held one, with read options, its metadata columns) is read
 * from its files as before. So an answer is the same rows either way; only what is read differs.
 *
 * <p>The held copy is brought to the table's current snapshot by the refresher when the table takes a commit (the
 * cache and the added files, or the whole table read again after a commit of another kind or after DEPTH appends,
 * so that its lineage stays short), and let go once no watched query reads it. A table is held while the rows held
 * in all stay within maxRows (a snapshot's own count of its records says how many before it is read).
 */
public final class HeldTables {
    static final String SPARK_TABLE = ResultCache.SPARK_TABLE;
    static final int DEPTH = 16;  // appends put over a held copy before it is read again whole

    /** A table's rows at a snapshot, in memory. */
    static final class Held {
        final String name;  // the table's name as its relation gives it
        final String path;  // catalog, namespace and name, quoted: to read it
        final Object table;  // the Iceberg table
        final long snapshot;
        final InMemoryRelation rows;
        final long count;
        final int depth;  // appends put over the last whole read

        Held(String name, String path, Object table, long snapshot, InMemoryRelation rows, long count, int depth) {
            this.name = name;
            this.path = path;
            this.table = table;
            this.snapshot = snapshot;
            this.rows = rows;
            this.count = count;
            this.depth = depth;
        }
    }

    /** The caches of the held copies, for the read-only check: only these may be read from memory. */
    private static final Set<CachedRDDBuilder> HELD = Collections.newSetFromMap(
        Collections.synchronizedMap(new IdentityHashMap<>()));

    final long maxRows;
    final Map<String, Held> held = new ConcurrentHashMap<>();  // name -> its copy

    public HeldTables(long maxRows) {
        this.maxRows = maxRows;
    }

    /** Hold each table this analysed query reads that is small enough and not held yet. */
    public void hold(SparkSession spark, Dataset<Row> query) {
        for (DataSourceV2Relation relation : relations(query.queryExecution().analyzed())) {
            String name = relation.table().name();
            if (held.containsKey(name) || !current(relation) || relation.catalog().isEmpty()
                    || relation.identifier().isEmpty()) {
                continue;
            }
            try {
                Object table = ResultCache.call(relation.table(), "table");
                Held copy = read(spark, name, path(relation), table);
                if (copy != null) {
                    held.put(name, copy);
                    ResultCache.LOG.info("result cache: {} held in memory at snapshot {} ({} rows)", name,
                        copy.snapshot, copy.count);
                }
            } catch (ReflectiveOperationException | RuntimeException e) {
                ResultCache.LOG.warn("result cache: {} not held in memory ({})", name, e.toString());
            }
        }
    }

    /** Bring the held copy of this table to its current snapshot: the appended files put over it, or read again. */
    public void advance(SparkSession spark, String name) {
        Held old = held.get(name);
        if (old == null) {
            return;
        }
        Held copy = null;
        try {
            ResultCache.lookUp(old.table);
            Long now = snapshotId(old.table);
            if (now != null && now == old.snapshot) {
                return;
            }
            if (now != null && old.depth < DEPTH && appendsOnly(old.table, old.snapshot, now)) {
                LogicalPlan added = appended(spark, old, now);
                if (sameColumns(old.rows.output(), added.output())) {
                    copy = materialise(spark, old.name, old.path, old.table, now,
                        new Union(seq(List.of(old.rows.newInstance(), added)), false, false), old.depth + 1);
                }
            }
            if (copy == null && now != null) {
                held.remove(name, old);  // its rows are not counted against the bound while read again
                copy = read(spark, old.name, old.path, old.table);
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            ResultCache.LOG.warn("result cache: {} no longer held in memory ({})", name, e.toString());
        }
        if (copy != null) {
            held.put(name, copy);
            ResultCache.LOG.info("result cache: {} held in memory at snapshot {} ({} rows, {} appends over a whole "
                + "read)", name, copy.snapshot, copy.count, copy.depth);
        } else {
            held.remove(name, old);
        }
        clear(old.rows);
    }

    /** The snapshot each held table is held at, by name. */
    public Map<String, Long> snapshots() {
        Map<String, Long> snapshots = new java.util.TreeMap<>();
        for (Held copy : held.values()) {
            snapshots.put(copy.name, copy.snapshot);
        }
        return snapshots;
    }

    /** Let go of the held tables none of these names is. */
    public void keepOnly(Set<String> names) {
        for (Held copy : held.values()) {
            if (!names.contains(copy.name) && held.remove(copy.name, copy)) {
                clear(copy.rows);
                ResultCache.LOG.info("result cache: {} no longer held in memory (no watched query reads it)",
                    copy.name);
            }
        }
    }

    /**
     * The query with each held table it reads read from memory at the snapshot the analysis took (its current
     * one, or the one it travels to), and from the files its appends since the held one added; the query itself
     * when none is.
     */
    public Dataset<Row> over(Dataset<Row> query) {
        RuntimeException failed = null;
        for (int attempt = 0; attempt < 2 && !held.isEmpty(); attempt++) {
            try {
                return overHeld(query);
            } catch (RuntimeException e) {  // a copy it took was let go (brought forward) before it was analysed
                failed = e;
            }
        }
        if (failed != null) {
            ResultCache.LOG.warn("result cache: read from the tables' files, not memory ({})", failed.toString());
        }
        return query;
    }

    /** The query over the held copies as they are now (analysed: the read-only check allows them while held). */
    private Dataset<Row> overHeld(Dataset<Row> query) {
        SparkSession spark = query.sparkSession();
        boolean[] changed = {false};
        LogicalPlan plan = query.queryExecution().analyzed().transformUpWithSubqueries(
            new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
                @Override
                public boolean isDefinedAt(LogicalPlan node) {
                    return node instanceof DataSourceV2Relation && current((DataSourceV2Relation) node)
                        && held.containsKey(((DataSourceV2Relation) node).table().name());
                }

                @Override
                public LogicalPlan apply(LogicalPlan node) {
                    LogicalPlan instead = instead(spark, (DataSourceV2Relation) node);
                    changed[0] |= instead != null;
                    return instead != null ? instead : node;
                }
            });
        return changed[0] ? Dataset.ofRows(spark, plan) : query;
    }

    /** The held rows of this relation's table at the snapshot it reads, columns as the relation's; or null. */
    private LogicalPlan instead(SparkSession spark, DataSourceV2Relation relation) {
        Held copy = held.get(relation.table().name());
        try {
            Object table = ResultCache.call(relation.table(), "table");
            Object read = ResultCache.call(relation.table(), "snapshotId");  // the snapshot the analysis took
            Long now = read != null ? (Long) read : snapshotId(table);
            if (copy == null || now == null) {
                return null;
            }
            LogicalPlan rows = copy.rows.newInstance();
            if (now != copy.snapshot) {
                if (!appendsOnly(table, copy.snapshot, now)) {
                    return null;
                }
                LogicalPlan added = appended(spark, copy, now);
                if (!sameColumns(rows.output(), added.output())) {
                    return null;
                }
                rows = new Union(seq(List.of(rows, added)), false, false);
            }
            List<Attribute> from = JavaConverters.seqAsJavaList(rows.output());
            List<Attribute> to = JavaConverters.seqAsJavaList(((LogicalPlan) relation).output());
            if (!sameColumns(rows.output(), ((LogicalPlan) relation).output())) {
                return null;
            }
            List<NamedExpression> columns = new ArrayList<>();
            for (int i = 0; i < to.size(); i++) {  // the relation's own columns (their ids), the rows under them
                Attribute column = to.get(i);
                columns.add(new Alias(from.get(i), column.name(), column.exprId(), column.qualifier(),
                    Option.apply(column.metadata()), seq(List.of())));
            }
            return new Project(seq(columns), rows);
        } catch (ReflectiveOperationException | RuntimeException e) {
            ResultCache.LOG.warn("result cache: {} read from its files, not memory ({})", relation.table().name(),
                e.toString());
            return null;
        }
    }

    /** The table's rows at its current snapshot, read whole into memory; null when more than the bound allows. */
    private Held read(SparkSession spark, String name, String path, Object table)
            throws ReflectiveOperationException {
        Long now = snapshotId(table);
        if (now == null) {
            return null;
        }
        long records = records(table, now);
        long others = 0;
        for (Held copy : held.values()) {
            others += copy.name.equals(name) ? 0 : copy.count;
        }
        if (records < 0 || others + records > maxRows) {
            return null;
        }
        // Read through the catalog (DataFrameReader.table), as a client's query is: Iceberg's own data source
        // (format("iceberg")) would set a catalog of its own in the session's settings, the client's among them.
        Dataset<Row> whole = spark.read().option("versionAsOf", String.valueOf(now)).table(path);
        return materialise(spark, name, path, table, now, whole.logicalPlan(), 0);
    }

    private static Held materialise(SparkSession spark, String name, String path, Object table, long snapshot,
                                    LogicalPlan rows, int depth) {
        Dataset<Row> one = Dataset.ofRows(spark, rows).coalesce(1);
        InMemoryRelation memory = InMemoryRelation$.MODULE$.apply(StorageLevel.MEMORY_AND_DISK(),
            one.queryExecution(), Option.apply("lakehouse held " + name + "@" + snapshot));
        HELD.add(memory.cacheBuilder());
        long count;
        try {
            count = Dataset.ofRows(spark, memory).count();
        } catch (RuntimeException e) {
            clear(memory);
            throw e;
        }
        return new Held(name, path, table, snapshot, memory, count, depth);
    }

    /** The rows the appends after the held snapshot up to this one added (Iceberg's incremental read). */
    private static LogicalPlan appended(SparkSession spark, Held copy, long now) {
        return spark.read().option("start-snapshot-id", String.valueOf(copy.snapshot))
            .option("end-snapshot-id", String.valueOf(now)).table(copy.path).queryExecution().analyzed();
    }

    /** Whether every snapshot after `from` up to `to` (its ancestors back to `from`) is an append. */
    static boolean appendsOnly(Object table, long from, long to) throws ReflectiveOperationException {
        Long at = to;
        Set<Long> seen = new HashSet<>();
        while (at != null && at != from) {
            Object snapshot = table.getClass().getMethod("snapshot", long.class).invoke(table, at);
            if (snapshot == null || !seen.add(at) || !"append".equals(ResultCache.call(snapshot, "operation"))) {
                return false;
            }
            at = (Long) ResultCache.call(snapshot, "parentId");
        }
        return at != null;
    }

    private static Long snapshotId(Object table) throws ReflectiveOperationException {
        Object snapshot = ResultCache.call(table, "currentSnapshot");
        return snapshot == null ? null : (Long) ResultCache.call(snapshot, "snapshotId");
    }

    /** The records of a snapshot as its summary counts them (-1: not said). */
    private static long records(Object table, long snapshotId) throws ReflectiveOperationException {
        Object snapshot = table.getClass().getMethod("snapshot", long.class).invoke(table, snapshotId);
        @SuppressWarnings("unchecked")
        Map<String, String> summary = (Map<String, String>) ResultCache.call(snapshot, "summary");
        String total = summary == null ? null : summary.get("total-records");
        return total == null ? -1 : Long.parseLong(total);
    }

    /** Whether a plan node is a held copy's rows in memory (any other cached copy is refused by the check). */
    static boolean held(LogicalPlan node) {
        return node instanceof InMemoryRelation && HELD.contains(((InMemoryRelation) node).cacheBuilder());
    }

    private static void clear(InMemoryRelation rows) {
        HELD.remove(rows.cacheBuilder());
        rows.cacheBuilder().clearCache(false);
    }

    /** Whether a relation reads an Iceberg table's columns (no metadata column) with no read option. */
    static boolean current(DataSourceV2Relation relation) {
        return relation.table().getClass().getName().equals(SPARK_TABLE) && relation.options().isEmpty()
            && relation.table().columns().length == relation.output().size();
    }

    static boolean sameColumns(scala.collection.Seq<Attribute> a, scala.collection.Seq<Attribute> b) {
        if (b == null || a.size() != b.size()) {
            return false;
        }
        for (int i = 0; i < a.size(); i++) {
            Attribute x = a.apply(i);
            Attribute y = b.apply(i);
            if (!x.name().equals(y.name()) || !x.dataType().equals(y.dataType()) || x.nullable() != y.nullable()) {
                return false;
            }
        }
        return true;
    }

    /** The Iceberg relations of a plan and of its subqueries. */
    static List<DataSourceV2Relation> relations(LogicalPlan plan) {
        List<DataSourceV2Relation> found = new ArrayList<>();
        plan.foreachWithSubqueries(new scala.runtime.AbstractFunction1<LogicalPlan, scala.runtime.BoxedUnit>() {
            @Override
            public scala.runtime.BoxedUnit apply(LogicalPlan node) {
                if (node instanceof DataSourceV2Relation) {
                    found.add((DataSourceV2Relation) node);
                }
                return scala.runtime.BoxedUnit.UNIT;
            }
        });
        return found;
    }

    /** The relation's table as a name a reader resolves: its catalog, namespace and name, each quoted. */
    static String path(DataSourceV2Relation relation) {
        Identifier identifier = relation.identifier().get();
        List<String> parts = new ArrayList<>();
        parts.add(relation.catalog().get().name());
        parts.addAll(List.of(identifier.namespace()));
        parts.add(identifier.name());
        StringBuilder path = new StringBuilder();
        for (String part : parts) {
            path.append(path.length() == 0 ? "" : ".").append('`').append(part.replace("`", "``")).append('`');
        }
        return path.toString();
    }

    private static <T> scala.collection.immutable.Seq<T> seq(List<T> items) {
        return JavaConverters.asScalaBuffer(new ArrayList<>(items)).toList();
    }
}
