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
 * <p>Spark's own spark.sql.thriftServer.queryTimeout cannot serve here: with incremental collect a statement is
 * finished as soon as its result iterator exists, and the jobs that compute the result run while the client
 * fetches, after that timeout has stopped counting. The limit so counts the fetching too: a client that reads
 * a result slower than the limit allows is cut off as well.
 */
public final class QueryTimeout extends SparkListener {
    static final String GROUP = "spark.jobGroup.id";
    static final long FORGET_AFTER_MS = 3_600_000L;  // a statement's clock is kept this long after its last job

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
        context.addSparkListener(timeout);
        ScheduledExecutorService sweeper = Executors.newSingleThreadScheduledExecutor(runnable -> {
            Thread thread = new Thread(runnable, "lakehouse-query-timeout");
            thread.setDaemon(true);
            return thread;
        });
        sweeper.scheduleWithFixedDelay(timeout::sweep, 500, 500, TimeUnit.MILLISECONDS);
        return timeout;
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
        groups.entrySet().removeIf(group -> now - group.getValue()[1] > FORGET_AFTER_MS + limitMs
            && !running.containsValue(group.getKey()));
    }
}
