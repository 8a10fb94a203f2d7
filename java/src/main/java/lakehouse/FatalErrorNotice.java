package lakehouse;

import java.util.Map;

import org.apache.spark.ExceptionFailure;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskFailedReason;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;
import org.apache.spark.executor.CoarseGrainedExecutorBackend;
import org.apache.spark.executor.Executor$;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.scheduler.cluster.CoarseGrainedClusterMessages;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Option;
import scala.reflect.ClassTag$;

/**
 * An executor whose task met a fatal error (a heap out of memory) tells the driver it is going away before the
 * task's failure is reported, so that the driver sends it nothing more.
 *
 * <p>Without it, Spark's executor reports the failure, then exits; the driver offers the freed core to the task's
 * next try at once, on the same executor, whose task pool is shutting down and refuses it. Every try of the query
 * can be spent so in the few milliseconds before the executor is gone, and the query fails with "rejected from
 * ThreadPoolExecutor[Shutting down]" instead of its reason. Told first, the driver treats the executor as being
 * decommissioned: the next try waits for the executor started in its place, and the tasks of other queries lost
 * with it are tried again there without counting as their failures.
 *
 * <p>The fatal-error decision is Spark's own (the one that ends the executor), with the same cause depth.
 */
public final class FatalErrorNotice implements SparkPlugin {
    private static final Logger LOG = LoggerFactory.getLogger(FatalErrorNotice.class);

    @Override
    public DriverPlugin driverPlugin() {
        return null;
    }

    @Override
    public ExecutorPlugin executorPlugin() {
        return new ExecutorPlugin() {
            private int depth = 5;

            @Override
            public void init(PluginContext context, Map<String, String> extraConf) {
                depth = context.conf().getInt("spark.executor.killOnFatalError.depth", 5);
            }

            @Override
            public void onTaskFailed(TaskFailedReason reason) {
                if (reason instanceof ExceptionFailure failure && fatal(failure, depth)) {
                    leaving();
                }
            }
        };
    }

    /** Whether the executor ends for this failure (Spark's own test; the exception itself when it was sent). */
    static boolean fatal(ExceptionFailure failure, int depth) {
        Option<Throwable> exception = failure.exception();
        return exception.isDefined() && Executor$.MODULE$.isFatalError(exception.get(), depth);
    }

    private static void leaving() {
        SparkEnv env = SparkEnv.get();
        if (env == null || env.executorBackend().isEmpty()
                || !(env.executorBackend().get() instanceof CoarseGrainedExecutorBackend backend)
                || backend.driver().isEmpty()) {
            return;  // local mode: the executor is the driver
        }
        RpcEndpointRef driver = backend.driver().get();
        try {
            driver.askSync(new CoarseGrainedClusterMessages.ExecutorDecommissioning(env.executorId()),
                    ClassTag$.MODULE$.Boolean());
            LOG.warn("Executor {} met a fatal error in a task and is going away: the driver was told first",
                    env.executorId());
        } catch (RuntimeException e) {
            LOG.warn("Executor {} could not tell the driver it is going away", env.executorId(), e);
        }
    }
}
