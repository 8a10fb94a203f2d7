package lakehouse;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Collections;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.junit.jupiter.api.Test;

import scala.collection.JavaConverters;

/**
 * The SQL endpoint's result cache: what a kept result is reckoned to take, which results are kept and which are
 * dropped first. Its key (ResultCache.key) and which statements it keeps (cacheable) are made from a SQLContext,
 * a running Spark session: not tested here. Which plans it may keep (pure): ResultCachePureTest.
 */
class ResultCacheTest {
    static Row row(Object... values) {
        return RowFactory.create(values);
    }

    /** A result of these rows (its schema is not looked at by the cache). */
    static ResultCache.Entry entry(List<Row> rows) {
        return new ResultCache.Entry(null, rows);
    }

    static final long EMPTY = 64;  // a result of no rows

    @Test
    void aValueIsReckonedByItsKindAndLength() {
        assertEquals(8, ResultCache.size(null));
        assertEquals(40, ResultCache.size(""));
        assertEquals(46, ResultCache.size("abc"));  // two bytes a character
        assertEquals(21, ResultCache.size(new byte[5]));
        assertEquals(24, ResultCache.size(7L));
        assertEquals(24, ResultCache.size(new java.math.BigDecimal("12345678901234567890.5")));
        assertEquals(16 + 44 + 8 + 24, ResultCache.size(row("ab", null, 1)));
        assertEquals(16 + (16 + 42), ResultCache.size(row(row("a"))));
        assertEquals(16 + 42 + 44, ResultCache.size(JavaConverters.asScalaBuffer(List.of("a", "bb")).toList()));
        assertEquals(16 + 42 + 44 + 42 + 40,
            ResultCache.size(JavaConverters.mapAsScalaMap(Map.of("k", "vv", "x", ""))));  // a map's keys and values
    }

    @Test
    void aResultIsSixtyFourBytesAndItsRowsSixteenEachBeyondTheirValues() {
        assertEquals(EMPTY, entry(List.of()).bytes);
        Row ab = row("ab");  // 16 + 40 + 2 * 2
        assertEquals(64 + 16 + 60, entry(List.of(ab)).bytes);
        assertEquals(64 + 3 * (16 + 60), entry(List.of(ab, ab, ab)).bytes);
    }

    @Test
    void aResultIsKeptUpToAnEighthOfTheCachesBytes() {
        ResultCache.Entry result = entry(List.of());
        assertTrue(new ResultCache(1000, 8 * EMPTY).keeps(result));
        assertFalse(new ResultCache(1000, 8 * EMPTY - 1).keeps(result));
    }

    @Test
    void beyondTheBytesTheLeastRecentlyUsedResultIsDroppedFirst() {
        ResultCache cache = new ResultCache(1000, 3 * EMPTY);
        ResultCache.Entry a = entry(List.of());
        cache.put("a", a);
        cache.put("b", entry(List.of()));
        cache.put("c", entry(List.of()));
        assertSame(a, cache.get("a"));  // a used: b is now the least recently
        cache.put("d", entry(List.of()));
        assertNull(cache.get("b"));
        assertSame(a, cache.get("a"));
        assertNotNull(cache.get("c"));
        assertNotNull(cache.get("d"));
    }

    @Test
    void aResultPutAgainUnderItsKeyIsCountedOnce() {
        ResultCache cache = new ResultCache(1000, 3 * EMPTY);
        cache.put("a", entry(List.of()));
        for (int i = 0; i < 10; i++) {
            cache.put("b", entry(List.of()));
        }
        cache.put("c", entry(List.of()));
        assertNotNull(cache.get("a"));
        assertNotNull(cache.get("b"));
        assertNotNull(cache.get("c"));
    }

    @Test
    void theRowsKeptInAllAreTwentyResultsOfTheLargestOrTwoHundredThousand() {
        assertEquals(200_000, new ResultCache(100, 1L << 40).maxTotalRows);
        assertEquals(400_000, new ResultCache(20_000, 1L << 40).maxTotalRows);
        List<Row> rows = Collections.nCopies(150_000, row("ab"));
        ResultCache small = new ResultCache(100, 1L << 40);
        small.put("x", entry(rows));
        small.put("y", entry(rows));  // 300,000 rows: x goes
        assertNull(small.get("x"));
        assertNotNull(small.get("y"));
        ResultCache large = new ResultCache(20_000, 1L << 40);
        large.put("x", entry(rows));
        large.put("y", entry(rows));
        assertNotNull(large.get("x"));
        assertNotNull(large.get("y"));
    }

    @Test
    void atMost4096ResultsAreKept() {
        ResultCache cache = new ResultCache(1000, 1L << 40);
        ResultCache.Entry empty = entry(List.of());
        for (int i = 0; i <= 4096; i++) {
            cache.put("q" + i, empty);
        }
        assertNull(cache.get("q0"));
        for (int i = 1; i <= 4096; i++) {
            assertSame(empty, cache.get("q" + i), "q" + i);
        }
    }
}
