package lakehouse;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * When a held table may be read from memory and the files added since (HeldTables.appendsOnly, without Spark):
 * only when every snapshot after the held one, up to the one a query reads, is an append of its line. A table
 * here is what the check reads of Iceberg's: a snapshot by id, its operation and its parent.
 */
class HeldTablesTest {
    public static final class Snapshot {
        private final String operation;
        private final Long parent;

        Snapshot(String operation, Long parent) {
            this.operation = operation;
            this.parent = parent;
        }

        public String operation() {
            return operation;
        }

        public Long parentId() {
            return parent;
        }
    }

    public static final class Table {
        final Map<Long, Snapshot> snapshots = new HashMap<>();

        Table with(long id, String operation, Long parent) {
            snapshots.put(id, new Snapshot(operation, parent));
            return this;
        }

        public Snapshot snapshot(long id) {
            return snapshots.get(id);
        }
    }

    /** 1 <- 2 <- 3 appends; 4 an overwrite (a MERGE) after 3; 5 an append after 4; 6 an append on 2's line. */
    static Table table() {
        return new Table().with(1, "append", null).with(2, "append", 1L).with(3, "append", 2L)
            .with(4, "overwrite", 3L).with(5, "append", 4L).with(6, "append", 2L);
    }

    @Test
    void appendsAfterTheHeldSnapshotMayBeReadOverIt() throws ReflectiveOperationException {
        assertTrue(HeldTables.appendsOnly(table(), 1, 3));
        assertTrue(HeldTables.appendsOnly(table(), 2, 3));
        assertTrue(HeldTables.appendsOnly(table(), 3, 3), "the held snapshot itself");
        assertTrue(HeldTables.appendsOnly(table(), 1, 6));
    }

    @Test
    void aCommitOtherThanAnAppendSinceIsReadFromTheFiles() throws ReflectiveOperationException {
        assertFalse(HeldTables.appendsOnly(table(), 3, 4), "an overwrite");
        assertFalse(HeldTables.appendsOnly(table(), 3, 5), "an append after an overwrite");
        assertFalse(HeldTables.appendsOnly(table().with(7, "delete", 3L), 3, 7), "a delete");
    }

    @Test
    void aSnapshotNotAfterTheHeldOneIsReadFromTheFiles() throws ReflectiveOperationException {
        assertFalse(HeldTables.appendsOnly(table(), 3, 1), "an older snapshot (time travel)");
        assertFalse(HeldTables.appendsOnly(table(), 3, 6), "another line (a rollback, then appends)");
        assertFalse(HeldTables.appendsOnly(table(), 1, 9), "a snapshot the table does not have");
        Table expired = table();
        expired.snapshots.remove(2L);
        assertFalse(HeldTables.appendsOnly(expired, 1, 3), "its line broken by an expired snapshot");
        Table loop = new Table().with(1, "append", 2L).with(2, "append", 1L);
        assertFalse(HeldTables.appendsOnly(loop, 3, 2), "a line that loops ends");
    }
}
