package lakehouse;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;

/**
 * The SQL endpoint's per-query time limit. The Thrift server runs each statement's Spark jobs in a job group
 * named by the statement; a statement's clock starts with its first job, and once it has run longer than the
 * limit its running jobs, and any it starts afterwards, are cancelled with the reason the client sees.
 *
 * <p>Work a statement does on the driver (analysis, the optimiser's constant folding of a regular expression, a
 * result's rows read back) is bounded as well: the thread doing it is named by the read-only check (or by the
 * endpoint's own statement operation) with the statement's group; past the limit it is interrupted, and if it
 * is still at the statement's work a grace period later (a regular expression does not look at interrupts) it
 * is stopped, and the client gets the error. Tasks in executors are cancelled and interrupted; one that ignores
 * its interruption has its executor ended by Spark's task reaper (the endpoint's own executor, serving/endpoint.py).
 *
 * <p>Spark's own spark.sql.thriftServer.queryTimeout cannot serve here: with incremental collect a statement is
 * finished as soon as its result iterator exists, and the jobs that compute the result run while the client
 * fetches, after that timeout has stopped counting. The limit so counts the fetching too: a client that reads
 * a result slower than the limit allows is cut off as well.
 */
public final class QueryTimeout extends SparkListener {
    static final String GROUP = "spark.jobGroup.id";
    static final long FORGET_AFTER_MS = 3_600_000L;  // a statement's clock is kept this long after its last job
    static final long GRACE_MS = 3_000L;  // after its interrupt, how long a statement's thread has to give up

    private static volatile QueryTimeout installed;
    // The thread at a statement's work on the driver -> the statement's group; a thread interrupted -> when
    private static final Map<Thread, String> THREADS = new ConcurrentHashMap<>();
    private static final Map<Thread, Long> INTERRUPTED = new ConcurrentHashMap<>();

    private final SparkContext context;
    private final long limitMs;
    private final Map<String, long[]> groups = new ConcurrentHashMap<>();  // group -> {first job, last job}
    private final Map<Integer, String> running = new ConcurrentHashMap<>();  // job id -> group

    private QueryTimeout(SparkContext context, long limitMs) {
        this.context = context;
        this.limitMs = limitMs;
    }

    /** Watch the context's jobs: cancel those of statements older than the limit, checked every half second. */
    public static QueryTimeout install(SparkContext context, long limitSeconds) {
        QueryTimeout timeout = new QueryTimeout(context, limitSeconds * 1000L);
        installed = timeout;
        context.addSparkListener(timeout);
        ScheduledExecutorService sweeper = Executors.newSingleThreadScheduledExecutor(runnable -> {
            Thread thread = new Thread(runnable, "lakehouse-query-timeout");
            thread.setDaemon(true);
            return thread;
        });
        sweeper.scheduleWithFixedDelay(timeout::sweep, 500, 500, TimeUnit.MILLISECONDS);
        return timeout;
    }

    /** The statement of this thread's job group (set by the statement's operation) is worked on here from now. */
    static void statementThread(org.apache.spark.sql.SparkSession session) {
        String group = session.sparkContext().getLocalProperty(GROUP);
        if (group != null) {
            atWork(group);
        }
    }

    /** This thread works for the statement of this group from now (until done() or another statement's work). */
    static void atWork(String group) {
        QueryTimeout timeout = installed;
        if (timeout == null) {
            return;
        }
        long now = System.currentTimeMillis();
        timeout.groups.computeIfAbsent(group, key -> new long[] {now, now});
        THREADS.put(Thread.currentThread(), group);
        INTERRUPTED.remove(Thread.currentThread());
    }

    /** The client's error for a statement past the limit, or null while it is within it. */
    static String expired(String group) {
        QueryTimeout timeout = installed;
        long[] times = timeout == null ? null : timeout.groups.get(group);
        if (times == null || System.currentTimeMillis() - times[0] <= timeout.limitMs) {
            return null;
        }
        return "the query ran longer than the SQL endpoint's limit of " + (timeout.limitMs / 1000)
            + " s (LAKEHOUSE_SERVE_QUERY_TIMEOUT)";
    }

    /** This thread's work for its statement is done. */
    static void done() {
        THREADS.remove(Thread.currentThread());
        INTERRUPTED.remove(Thread.currentThread());
    }

    @Override
    public void onJobStart(SparkListenerJobStart start) {
        String group = start.properties() == null ? null : start.properties().getProperty(GROUP);
        if (group == null) {
            return;  // not a statement's job (the endpoint's own work)
        }
        long now = System.currentTimeMillis();
        groups.compute(group, (key, times) -> times == null ? new long[] {now, now} : new long[] {times[0], now});
        running.put(start.jobId(), group);
        sweep();
    }

    @Override
    public void onJobEnd(SparkListenerJobEnd end) {
        running.remove(end.jobId());
    }

    void sweep() {
        long now = System.currentTimeMillis();
        for (Map.Entry<Integer, String> job : running.entrySet()) {
            long[] times = groups.get(job.getValue());
            if (times != null && now - times[0] > limitMs && running.remove(job.getKey()) != null) {
                context.cancelJob(job.getKey(), "because the query ran longer than the SQL endpoint's limit of "
                    + (limitMs / 1000) + " s (LAKEHOUSE_SERVE_QUERY_TIMEOUT)");
            }
        }
        for (Map.Entry<Thread, String> work : THREADS.entrySet()) {
            long[] times = groups.get(work.getValue());
            if (times != null && now - times[0] > limitMs && !running.containsValue(work.getValue())) {
                stop(work.getKey(), work.getValue(), now);  // at work on the driver, not waiting for a job
            }
        }
        groups.entrySet().removeIf(group -> now - group.getValue()[1] > FORGET_AFTER_MS + limitMs
            && !running.containsValue(group.getKey()) && !THREADS.containsValue(group.getKey()));
    }

    /**
     * A statement's thread past the limit: interrupted first; stopped if a grace period later it is still at
     * the statement's work (its stack in Spark's SQL or in a regular expression), so that a statement cannot
     * hold the driver. Threads of other work are left alone.
     */
    @SuppressWarnings({"deprecation", "removal"})
    private void stop(Thread thread, String group, long now) {
        if (!thread.isAlive() || !atStatementWork(thread)) {
            THREADS.remove(thread, group);  // its statement's work ended (Spark's operation does not say so)
            INTERRUPTED.remove(thread);
            return;
        }
        Long interrupted = INTERRUPTED.putIfAbsent(thread, now);
        if (interrupted == null) {
            thread.interrupt();
        } else if (now - interrupted > GRACE_MS && group.equals(THREADS.get(thread))) {
            THREADS.remove(thread, group);
            INTERRUPTED.remove(thread);
            try {
                thread.stop();  // deprecated, and the only way to end a regular expression's backtracking
            } catch (UnsupportedOperationException e) {  // a JVM (20+) that no longer stops threads
                org.slf4j.LoggerFactory.getLogger(QueryTimeout.class).warn(
                    "a statement's thread went past the query time limit and cannot be stopped on this JVM");
            }
        }
    }

    private static boolean atStatementWork(Thread thread) {
        for (StackTraceElement frame : thread.getStackTrace()) {
            String name = frame.getClassName();
            if (name.startsWith("org.apache.spark.sql.") || name.startsWith("java.util.regex.")) {
                return true;
            }
        }
        return false;
    }
}
