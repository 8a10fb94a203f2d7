package lakehouse;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.spark.SparkContext;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;

/**
 * New answers ready when a commit lands. A query asked again within the idle time (a dashboard's: every viewer,
 * every refresh) is watched: every period (a second by default) the metadata of each table it reads is read again
 * from the catalog (one look-up per table, not the query's analysis), and when one has taken a commit the query's
 * new answer is computed on the new snapshots and kept in the result cache, so that the next client to ask is
 * answered from the cache instead of waiting for the computation. A client asking while it is computed waits for
 * that computation, as for another client's; an answer is always that of the snapshots current when it is
 * computed, never an older one. A query is no longer watched once nobody asked it for the idle time, once its
 * result is too large to keep, or when computing it fails (past the query time limit among others). The work runs
 * on one thread of its own, in a Spark scheduler pool of its own, in a session cloned from the client's (its
 * settings and namespace, checked to give the same key), and within the query time limit like a client's
 * statement.
 */
final class Refresher {
    static final String POOL = "lakehouse-refresh";
    static final int MAX_WATCHED = 64;  // the most queries watched at once (the most recently asked kept)

    /** A watched query: its statement and context, a session to compute it in, what its last answer read. */
    static final class Watched {
        final String context;
        final String statement;
        final SparkSession session;
        Map<String, Object> tables = Map.of();  // name -> the Iceberg table (read again at each check)
        Map<String, String> read = Map.of();  // name -> the metadata file its last answer read
        volatile List<ResultCache.Read> lookups;  // the tables a client's ask looks up for its key (null: analysed)
        volatile long asked;  // when a client last asked it

        Watched(String context, String statement, SparkSession session, long asked) {
            this.context = context;
            this.statement = statement;
            this.session = session;
            this.asked = asked;
        }
    }

    private final ResultCache cache;
    private final long idleMs;
    private final Map<String, Long> askedOnce = new LinkedHashMap<>(64, 0.75f, true);  // context -> when
    final Map<String, Watched> watched = new ConcurrentHashMap<>();  // context -> the query
    private final ScheduledExecutorService thread;
    private final AtomicLong refreshes = new AtomicLong();

    Refresher(ResultCache cache, long everyMs, long idleMs) {
        this.cache = cache;
        this.idleMs = idleMs;
        this.thread = Executors.newSingleThreadScheduledExecutor(runnable -> {
            Thread refresher = new Thread(runnable, "lakehouse-result-refresh");
            refresher.setDaemon(true);
            return refresher;
        });
        thread.scheduleWithFixedDelay(this::check, everyMs, everyMs, TimeUnit.MILLISECONDS);
    }

    /** Pure bookkeeping, for tests: no thread. */
    Refresher(ResultCache cache, long idleMs) {
        this.cache = cache;
        this.idleMs = idleMs;
        this.thread = null;
    }

    /**
     * A client asked this query (its context: statement, namespace, settings) and was answered under key:
     * watched from its second ask within the idle time.
     */
    void asked(SparkSession spark, String statement, String context, String key, long now) {
        if (thread != null && watching(context, now)) {
            thread.execute(() -> watch(spark, statement, context, key, now));
        }
    }

    /** Whether a query asked now is to be watched from now (its second ask within the idle time). */
    boolean watching(String context, long now) {
        Watched known = watched.get(context);
        if (known != null) {
            known.asked = now;
            return false;
        }
        synchronized (askedOnce) {
            Long before = askedOnce.put(context, now);
            if (askedOnce.size() > 16 * MAX_WATCHED) {
                askedOnce.remove(askedOnce.keySet().iterator().next());
            }
            if (before == null || now - before > idleMs) {
                return false;
            }
            askedOnce.remove(context);
            return true;
        }
    }

    /** Add a query to the watched ones, the least recently asked dropped beyond the bound. */
    void add(Watched query) {
        watched.put(query.context, query);
        while (watched.size() > MAX_WATCHED) {
            Watched oldest = null;
            for (Watched w : watched.values()) {
                if (oldest == null || w.asked < oldest.asked) {
                    oldest = w;
                }
            }
            watched.remove(oldest.context, oldest);
        }
    }

    /** The watched queries nobody asked for the idle time, no longer watched. */
    List<String> dropIdle(long now) {
        List<String> dropped = new java.util.ArrayList<>();
        for (Watched w : watched.values()) {
            if (now - w.asked > idleMs && watched.remove(w.context, w)) {
                dropped.add(w.statement);
            }
        }
        return dropped;
    }

    private void watch(SparkSession client, String statement, String context, String answered, long asked) {
        SparkSession session = client.cloneSession();
        SparkContext spark = session.sparkContext();
        String group = "lakehouse-refresh-" + refreshes.incrementAndGet();
        try {
            spark.setJobGroup(group, "result cache watch: " + abbreviated(statement), true);
            QueryTimeout.atWork(group);  // its analysis is bounded as a client's is
            session.sessionState().catalogManager().setCurrentCatalog(
                client.sessionState().catalogManager().currentCatalog().name());
            session.sessionState().catalogManager().setCurrentNamespace(
                client.sessionState().catalogManager().currentNamespace());
            if (!ResultCache.context(session, statement).equals(context)) {
                return;  // the client's settings changed meanwhile: watched at a later ask
            }
            Watched query = new Watched(context, statement, session, asked);
            Dataset<Row> analysed = ResultCache.cacheable(session, statement);
            String key = analysed == null ? null : reads(query, analysed);
            if (key == null) {
                return;
            }
            add(query);
            ResultCache.LOG.info("result cache: watched ({}): {}", query.lookups != null
                ? "asked again, its key made by its tables' look-ups" : "asked again, analysed",
                abbreviated(statement));
            if (cache.held != null) {
                spark.setLocalProperty("spark.scheduler.pool", POOL);
                cache.held.hold(session, analysed);
            }
            if (!key.equals(answered)) {  // a commit landed since the client's answer: its new answer now
                refresh(query);
            }
        } catch (Throwable e) {
            ResultCache.LOG.warn("result cache: not watched ({}): {}", e, abbreviated(statement));
        } finally {
            QueryTimeout.done();
            spark.clearJobGroup();
            spark.setLocalProperty("spark.scheduler.pool", null);
            Thread.interrupted();
        }
    }

    /**
     * The key of the query's answer as analysed, or null: none is kept. The tables it reads, the metadata file
     * each was read at, and whether a client's ask may make its key by looking them up alone are the query's from
     * now on.
     */
    private static String reads(Watched query, Dataset<Row> analysed) {
        List<ResultCache.Read> reads = new ArrayList<>();
        String key = ResultCache.key(query.context, analysed, reads);
        if (key == null) {
            return null;
        }
        Map<String, Object> tables = new HashMap<>();
        Map<String, String> files = new HashMap<>();
        boolean current = true;
        for (ResultCache.Read read : reads) {
            tables.putIfAbsent(read.name, read.table);
            files.putIfAbsent(read.name, read.file);
            current &= read.current;
        }
        query.tables = tables;
        query.read = files;
        query.lookups = current ? List.copyOf(reads) : null;
        return key;
    }

    /**
     * The key a client's ask of this context would make now, from a look-up of each table the watched query reads
     * alone, with no analysis; null when it is not watched, reads other than its tables' current snapshots, or a
     * look-up failed. The ask is analysed then, as any other.
     */
    String keyNow(String context) {
        Watched query = watched.get(context);
        List<ResultCache.Read> reads = query == null ? null : query.lookups;
        return reads == null ? null : ResultCache.keyNow(context, reads);
    }

    /** Drop the idle queries, and compute the new answer of each one a table of which took a commit. */
    private void check() {
        try {
            long now = System.currentTimeMillis();
            for (String statement : dropIdle(now)) {
                ResultCache.LOG.info("result cache: no longer refreshed (not asked for {} s): {}", idleMs / 1000,
                    abbreviated(statement));
            }
            Map<String, String> current = new HashMap<>();  // table -> its metadata file now (one look-up each)
            List<Watched> changed = new ArrayList<>();
            Map<String, Watched> advanced = new LinkedHashMap<>();  // a table that took a commit -> a query reading it
            for (Watched query : watched.values()) {
                boolean stale = false;
                for (Map.Entry<String, Object> table : query.tables.entrySet()) {
                    String file = current.get(table.getKey());
                    if (file == null) {
                        try {
                            file = ResultCache.currentMetadataFile(table.getValue());
                        } catch (ReflectiveOperationException | RuntimeException e) {
                            file = "";  // dropped, or the catalog unreachable: the analysis says which
                        }
                        current.put(table.getKey(), file);
                    }
                    if (!file.equals(query.read.get(table.getKey()))) {
                        stale = true;
                        advanced.putIfAbsent(table.getKey(), query);
                    }
                }
                if (stale) {
                    changed.add(query);
                }
            }
            if (cache.held != null) {
                cache.held.keepOnly(current.keySet());
                for (Map.Entry<String, Watched> table : advanced.entrySet()) {
                    advance(table.getValue(), table.getKey());
                }
            }
            for (Watched query : changed) {
                refresh(query);
            }
        } catch (Throwable e) {  // the next check runs still
            ResultCache.LOG.warn("result cache: a check of the watched queries failed", e);
        }
    }

    /** The held copy of a table that took a commit brought to its new snapshot, in the session of a query reading it. */
    private void advance(Watched query, String table) {
        SparkContext context = query.session.sparkContext();
        String group = "lakehouse-refresh-" + refreshes.incrementAndGet();
        try {
            context.setJobGroup(group, "result cache: " + table + " held in memory", true);
            context.setLocalProperty("spark.scheduler.pool", POOL);
            QueryTimeout.atWork(group);
            cache.held.advance(query.session, table);
        } finally {
            QueryTimeout.done();
            context.clearJobGroup();
            context.setLocalProperty("spark.scheduler.pool", null);
            Thread.interrupted();
        }
    }

    /** The query's answer on its tables' current snapshots, computed and kept unless the cache has it. */
    void refresh(Watched query) {
        SparkContext context = query.session.sparkContext();
        String group = "lakehouse-refresh-" + refreshes.incrementAndGet();
        long started = System.nanoTime();
        String key = null;
        CompletableFuture<ResultCache.Entry> mine = null;
        ResultCache.Entry entry = null;
        try {
            context.setJobGroup(group, "result cache refresh: " + abbreviated(query.statement), true);
            context.setLocalProperty("spark.scheduler.pool", POOL);
            QueryTimeout.atWork(group);
            Dataset<Row> analysed = ResultCache.cacheable(query.session, query.statement);
            key = analysed == null ? null : reads(query, analysed);
            if (key == null) {
                unwatch(query, "it is no longer a query whose result is kept");
                return;
            }
            if (cache.get(key) != null) {
                return;  // a client asked first
            }
            mine = new CompletableFuture<>();
            if (cache.computing.putIfAbsent(key, mine) != null) {
                mine = null;
                return;  // a client computes it now
            }
            Dataset<Row> computed = cache.computed(analysed);
            try {
                entry = ResultCache.collect(computed, cache.maxRows);
            } catch (RuntimeException e) {
                if (computed == analysed || QueryTimeout.expired(group) != null) {
                    throw e;
                }
                ResultCache.LOG.warn("result cache: computed from the tables' files, not memory ({})", e.toString());
                entry = ResultCache.collect(analysed, cache.maxRows);
            }
            if (entry == null || !cache.keeps(entry)) {
                unwatch(query, "its result is too large to keep");
                entry = null;
                return;
            }
            cache.put(key, entry);
            ResultCache.LOG.info("result cache refresh ({} ms): {}", (System.nanoTime() - started) / 1_000_000,
                abbreviated(query.statement));
        } catch (Throwable e) {
            context.cancelJobGroup(group);
            String late = QueryTimeout.expired(group);
            unwatch(query, late != null ? late : String.valueOf(e));
        } finally {
            if (mine != null) {
                mine.complete(entry);
                cache.computing.remove(key, mine);
            }
            QueryTimeout.done();
            context.clearJobGroup();
            context.setLocalProperty("spark.scheduler.pool", null);
            Thread.interrupted();  // an interrupt for this query's limit is not the next one's
        }
    }

    private void unwatch(Watched query, String why) {
        if (watched.remove(query.context, query)) {
            ResultCache.LOG.info("result cache: no longer refreshed ({}): {}", why, abbreviated(query.statement));
        }
    }

    static String abbreviated(String statement) {
        return statement.length() > 200 ? statement.substring(0, 200) + "..." : statement;
    }
}
