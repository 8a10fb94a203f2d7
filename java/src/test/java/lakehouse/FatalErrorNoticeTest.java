package lakehouse;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;

import org.apache.spark.ExceptionFailure;
import org.apache.spark.memory.SparkOutOfMemoryError;
import org.junit.jupiter.api.Test;

import scala.collection.immutable.List$;

class FatalErrorNoticeTest {
    private static ExceptionFailure failure(Throwable thrown, boolean sent) {
        return new ExceptionFailure(thrown, List$.MODULE$.empty(), sent);
    }

    @Test
    void aHeapOutOfMemoryEndsTheExecutorAsACauseToo() {
        assertTrue(FatalErrorNotice.fatal(failure(new OutOfMemoryError("Java heap space"), true), 5));
        RuntimeException wrapped = new RuntimeException("reading", new IllegalStateException(
                "row", new OutOfMemoryError("Java heap space")));
        assertTrue(FatalErrorNotice.fatal(failure(wrapped, true), 5));
        assertFalse(FatalErrorNotice.fatal(failure(wrapped, true), 2), "deeper than Spark looks");
    }

    @Test
    void errorsTheExecutorSurvivesAreNotFatal() {
        assertFalse(FatalErrorNotice.fatal(failure(new ArithmeticException("Division by zero"), true), 5));
        assertFalse(FatalErrorNotice.fatal(failure(new SparkOutOfMemoryError("UNABLE_TO_ACQUIRE_MEMORY",
                Map.of("requestedBytes", "1048576", "receivedBytes", "0")), true), 5), "Spark's own memory manager refusing: the task fails, the executor stays");
        assertFalse(FatalErrorNotice.fatal(failure(new OutOfMemoryError("Java heap space"), false), 5),
                "no exception sent with the failure: nothing to decide on");
    }
}
