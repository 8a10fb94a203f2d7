package lakehouse;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

import org.apache.hive.service.cli.FetchOrientation;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.cli.OperationState;
import org.apache.hive.service.cli.session.HiveSession;
import org.apache.hive.service.rpc.thrift.TRowSet;
import org.apache.hive.service.rpc.thrift.TTableSchema;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.hive.thriftserver.RowSetUtils;
import org.apache.spark.sql.hive.thriftserver.SparkExecuteStatementOperation;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.collection.JavaConverters;
import scala.runtime.AbstractFunction0;

/**
 * A client's statement on the endpoint: a query whose result may be kept (ResultCache) is answered from the cache
 * or computed, kept and answered here; anything else is Spark's own statement operation's. Computing runs in the
 * statement's job group, as Spark's does, so the query time limit and a client's cancel reach its jobs.
 */
final class CachedStatement extends SparkExecuteStatementOperation {
    private final SparkSession spark;  // the client's Spark session (Spark 4: the classic one)
    private final String statement;
    private final ResultCache cache;  // null: no result is kept
    private final long rowLimit;  // the most rows a client may fetch of a result (0: no limit)
    private long fetched;  // rows fetched of a result Spark's operation answers
    private volatile boolean ours;
    private StructType schema;
    private List<Row> rows = List.of();  // the result's first rows (all of it when kept)
    private Iterator<Row> rest;  // the rows after them, of a result too large to keep
    private long position;  // the next row a fetch answers

    CachedStatement(SparkSession spark, HiveSession session, String statement, Map<String, String> overlay,
                    boolean async, long timeout, ResultCache cache, long rowLimit) {
        super(spark, session, statement, overlay, async, timeout);
        this.spark = spark;
        this.statement = statement;
        this.cache = cache;
        this.rowLimit = rowLimit;
    }

    @Override
    public void runInternal() {
        long started = System.nanoTime();
        if (cache != null && cache.refresher != null
                && answeredWatched(ResultCache.context(spark, statement), started)) {
            return;
        }
        Dataset<Row> query = cache == null ? null : ResultCache.cacheable(spark, statement);
        String context = query == null ? null : ResultCache.context(spark, statement);  // as the analysis left it
        String key = query == null ? null : ResultCache.key(context, query, null);
        if (key == null) {
            super.runInternal();
            return;
        }
        ours = true;
        try {
            setState(OperationState.PENDING);
        } catch (HiveSQLException e) {
            throw CachedStatement.<RuntimeException>raise(e);
        }
        setHasResultSet(true);
        if (!shouldRunAsync()) {
            answer(query, context, key, started);
            return;
        }
        setBackgroundHandle(getParentSession().getSessionManager().submitBackgroundOperation(() -> {
            try {
                withLocalProperties(new AbstractFunction0<Object>() {
                    @Override
                    public Object apply() {
                        answer(query, context, key, started);
                        return null;
                    }
                });
            } catch (Throwable e) {
                setOperationException(e instanceof HiveSQLException ? (HiveSQLException) e : new HiveSQLException(e));
            }
        }));
    }

    /**
     * Whether a watched query (Refresher) was answered from the cache under the key its tables' current metadata
     * makes, looked up with no analysis: the statement was analysed in the same context (statement, namespace,
     * settings: the read-only check's inputs among them) when that answer was computed, on those very snapshots.
     */
    private boolean answeredWatched(String context, long started) {
        String key = cache.refresher.keyNow(context);
        ResultCache.Entry kept = key == null ? null : cache.get(key);
        if (kept == null) {
            return false;
        }
        ours = true;
        try {
            setState(OperationState.PENDING);
            setHasResultSet(true);
            setState(OperationState.RUNNING);
            answered(kept, context, key, "watched", started);
            setState(OperationState.FINISHED);
        } catch (HiveSQLException e) {
            throw CachedStatement.<RuntimeException>raise(e);
        }
        return true;
    }

    /** The statement's answer is this kept result (hit, shared, watched) or the one just computed (miss). */
    private void answered(ResultCache.Entry kept, String context, String key, String how, long started) {
        if (kept != null) {
            schema = kept.schema;
            rows = kept.rows;
            if (cache.refresher != null) {
                cache.refresher.asked(spark, statement, context, key, System.currentTimeMillis());
            }
        }
        ResultCache.LOG.info("result cache {} ({} ms): {}", how, (System.nanoTime() - started) / 1_000_000,
            Refresher.abbreviated(statement));
    }

    private void answer(Dataset<Row> query, String context, String key, long started) {
        try {
            synchronized (this) {
                if (getStatus().getState().isTerminal()) {
                    return;  // cancelled or closed before it started
                }
                setState(OperationState.RUNNING);
            }
            spark.sparkContext().setJobGroup(statementId(), statement, true);
            QueryTimeout.atWork(statementId());
            String how = "hit";
            ResultCache.Entry kept = cache.get(key);
            if (kept == null) {
                CompletableFuture<ResultCache.Entry> mine = new CompletableFuture<>();
                CompletableFuture<ResultCache.Entry> other = cache.computing.putIfAbsent(key, mine);
                if (other != null) {  // another client computes the same result now: its answer is this one's
                    kept = other.get();
                    how = "shared";
                }
                if (kept == null) {
                    how = "miss";
                    try {
                        kept = compute(query, other == null ? key : null);
                    } finally {
                        if (other == null) {
                            mine.complete(kept);
                            cache.computing.remove(key, mine);
                        }
                    }
                }
            }
            answered(kept, context, key, how, started);
            synchronized (this) {
                if (!getStatus().getState().isTerminal()) {
                    setState(OperationState.FINISHED);
                }
            }
        } catch (Throwable e) {
            spark.sparkContext().cancelJobGroup(statementId());
            OperationState state = getStatus().getState();
            if (!state.isTerminal()) {
                try {
                    setState(OperationState.ERROR);
                } catch (HiveSQLException ignored) {
                    // the state moved on meanwhile
                }
                Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
                String late = QueryTimeout.expired(statementId());
                throw CachedStatement.<RuntimeException>raise(cause instanceof HiveSQLException ? cause
                    : new HiveSQLException(late != null ? late : "Error running query: " + cause, cause));
            }
        } finally {
            QueryTimeout.done();
            spark.sparkContext().clearJobGroup();
        }
    }

    /**
     * The result's first rows, kept under the key when they are all of it and the key is given. Computed with the
     * held tables read from memory (ResultCache.computed); should that fail before a row is handed out, from the
     * tables' files as Spark reads them.
     */
    private ResultCache.Entry compute(Dataset<Row> query, String key) {
        schema = query.schema();
        Dataset<Row> computed = cache.computed(query);
        Iterator<Row> all;
        List<Row> first = new ArrayList<>();
        try {
            all = first(computed, first);
        } catch (RuntimeException e) {
            if (computed == query || QueryTimeout.expired(statementId()) != null
                    || getStatus().getState().isTerminal()) {
                throw e;
            }
            ResultCache.LOG.warn("result cache: computed from the tables' files, not memory ({})", e.toString());
            first.clear();
            all = first(query, first);
        }
        if (all.hasNext() || first.size() > cache.maxRows) {
            rows = first;
            rest = all;
            return null;
        }
        ResultCache.Entry entry = new ResultCache.Entry(schema, List.copyOf(first));
        if (key != null && cache.keeps(entry)) {
            cache.put(key, entry);
        }
        return entry;
    }

    /** The query's rows up to one past the most a kept result has, put in first; the iterator over the rest. */
    private Iterator<Row> first(Dataset<Row> query, List<Row> first) {
        Iterator<Row> all = query.toLocalIterator();
        while (first.size() <= cache.maxRows && all.hasNext()) {
            first.add(all.next());
        }
        return all;
    }

    @Override
    public TTableSchema getResultSetSchema() {
        return ours ? SparkExecuteStatementOperation.toTTableSchema(schema) : super.getResultSetSchema();
    }

    @Override
    public TRowSet getNextRowSet(FetchOrientation order, long maxRows) {
        if (!ours) {
            TRowSet rows;
            QueryTimeout.atWork(statementId());
            try {
                rows = super.getNextRowSet(order, maxRows);
            } finally {
                QueryTimeout.done();
            }
            fetched = (order == FetchOrientation.FETCH_FIRST ? 0 : fetched) + size(rows);
            if (rowLimit > 0 && fetched > rowLimit) {
                throw CachedStatement.<RuntimeException>raise(tooLarge());
            }
            return rows;
        }
        return withLocalProperties(new AbstractFunction0<TRowSet>() {
            @Override
            public TRowSet apply() {
                try {
                    spark.sparkContext().setJobGroup(statementId(), statement, true);
                    QueryTimeout.atWork(statementId());
                    return rowSet(order, maxRows);
                } catch (HiveSQLException e) {
                    throw CachedStatement.<RuntimeException>raise(e);
                } finally {
                    QueryTimeout.done();
                    spark.sparkContext().clearJobGroup();
                }
            }
        });
    }

    private synchronized TRowSet rowSet(FetchOrientation order, long maxRows) throws HiveSQLException {
        validateDefaultFetchOrientation(order);
        assertState(OperationState.FINISHED);
        if (order == FetchOrientation.FETCH_FIRST) {
            if (position > rows.size()) {
                throw new HiveSQLException("this result is too large to be read again from its start: run the "
                    + "query again");
            }
            position = 0;
        }
        long start = position;
        List<Row> batch = new ArrayList<>();
        while (batch.size() < maxRows) {
            if (rowLimit > 0 && position >= rowLimit && (position < rows.size() || rest != null && rest.hasNext())) {
                throw tooLarge();
            }
            if (position < rows.size()) {
                batch.add(rows.get((int) position));
            } else if (rest != null && rest.hasNext()) {
                batch.add(rest.next());
            } else {
                break;
            }
            position++;
        }
        DataType[] types = new DataType[schema.fields().length];
        StructField[] fields = schema.fields();
        for (int i = 0; i < fields.length; i++) {
            types[i] = fields[i].dataType();
        }
        // Spark 4's RowSetUtils takes the session's time formatters itself (HiveResult.getTimeFormatters).
        return RowSetUtils.toTRowSet(start, JavaConverters.asScalaBuffer(batch).toSeq(), types,
            getProtocolVersion());
    }

    private HiveSQLException tooLarge() {
        spark.sparkContext().cancelJobGroup(statementId());
        return new HiveSQLException("the result has more than " + rowLimit + " rows, the SQL endpoint's limit "
            + "(LAKEHOUSE_SERVE_MAX_ROWS): aggregate or filter it, or add a LIMIT");
    }

    /** The number of rows in a row set, columnar (each column a list of values) or row by row. */
    static long size(TRowSet rows) {
        if (rows.getColumnsSize() == 0) {
            return rows.getRowsSize();
        }
        Object column = rows.getColumns().get(0).getFieldValue();
        try {
            return ((Number) column.getClass().getMethod("getValuesSize").invoke(column)).longValue();
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("an unknown column in a row set: " + column.getClass(), e);
        }
    }

    /** Throw a checked exception (HiveSQLException) from a method Spark's Scala declares without it, as Spark's
     * own statement operation does. */
    @SuppressWarnings("unchecked")
    static <E extends Throwable> E raise(Throwable e) throws E {
        throw (E) e;
    }
}
