package lakehouse;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Which queries the endpoint computes again when a commit lands (Refresher's bookkeeping, without Spark): those
 * asked again within the idle time, as long as they are asked, at most MAX_WATCHED of them.
 */
class RefresherTest {
    static final long IDLE = 60_000;

    static Refresher refresher() {
        return new Refresher(new ResultCache(10, 1 << 20), IDLE);
    }

    static Refresher.Watched watched(String context, long asked) {
        return new Refresher.Watched(context, "SELECT " + context, null, asked);
    }

    @Test
    void aQueryIsWatchedFromItsSecondAskWithinTheIdleTime() {
        Refresher refresher = refresher();
        assertFalse(refresher.watching("q", 0));
        assertTrue(refresher.watching("q", IDLE));
        assertFalse(refresher.watching("other", 0), "each query counts its own asks");
    }

    @Test
    void aQueryAskedOnceAndAgainAfterTheIdleTimeIsNotWatched() {
        Refresher refresher = refresher();
        assertFalse(refresher.watching("q", 0));
        assertFalse(refresher.watching("q", IDLE + 1));
        assertTrue(refresher.watching("q", IDLE + 2), "the later ask counts as its first");
    }

    @Test
    void anAskOfAWatchedQueryKeepsItWatchedAndNobodysAskForTheIdleTimeDropsIt() {
        Refresher refresher = refresher();
        refresher.add(watched("asked", 0));
        refresher.add(watched("forgotten", 0));
        assertFalse(refresher.watching("asked", IDLE), "already watched: not added again");
        assertEquals(List.of("SELECT forgotten"), refresher.dropIdle(IDLE + 1));
        assertEquals(List.of(), refresher.dropIdle(IDLE + 1));
        assertEquals(List.of("SELECT asked"), refresher.dropIdle(2 * IDLE + 1));
        assertTrue(refresher.watched.isEmpty());
    }

    @Test
    void beyondTheBoundTheLeastRecentlyAskedIsDropped() {
        Refresher refresher = refresher();
        for (int i = 0; i <= Refresher.MAX_WATCHED; i++) {
            refresher.add(watched("q" + i, i == 0 ? 1 : 1000 + i));
        }
        assertEquals(Refresher.MAX_WATCHED, refresher.watched.size());
        assertFalse(refresher.watched.containsKey("q0"));
        assertTrue(refresher.watched.containsKey("q" + Refresher.MAX_WATCHED));
    }

    @Test
    void theAsksRememberedAreBounded() {
        Refresher refresher = refresher();
        assertFalse(refresher.watching("first", 0));
        for (int i = 0; i < 16 * Refresher.MAX_WATCHED; i++) {
            assertFalse(refresher.watching("q" + i, 1));
        }
        assertFalse(refresher.watching("first", 2), "its first ask was forgotten: this one is its first again");
    }
}
