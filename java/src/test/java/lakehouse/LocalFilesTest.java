package lakehouse;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.OutputStream;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The local file system Spark is given for "file:" (runtime/spark.py): the files and permissions Hadoop's own makes. */
class LocalFilesTest {
    @TempDir
    Path dir;

    @Test
    void modesMapToTheirPosixPermissions() {
        assertEquals(PosixFilePermissions.fromString("rw-r--r--"), LocalFiles.posix(0644));
        assertEquals(PosixFilePermissions.fromString("rwxr-x--x"), LocalFiles.posix(0751));
        assertEquals(PosixFilePermissions.fromString("-w--wx-w-"), LocalFiles.posix(0232));
        assertEquals(PosixFilePermissions.fromString("---------"), LocalFiles.posix(0));
        assertNull(LocalFiles.posix(01777), "the sticky bit is Hadoop's to set");
    }

    @Test
    void installedItIsWhatTheCacheGivesEveryCallerOfFile() throws Exception {
        Configuration conf = new Configuration(false);
        FileSystem before = FileSystem.get(URI.create("file:///"), conf);
        assertFalse(before instanceof LocalFiles, "Hadoop's own before");
        FileSystem installed = LocalFiles.install(conf);
        assertInstanceOf(LocalFiles.class, installed);
        assertSame(installed, FileSystem.get(URI.create("file:///"), new Configuration(false)));
        assertSame(installed, new org.apache.hadoop.fs.Path(dir.toUri()).getFileSystem(new Configuration()));
        assertSame(installed, LocalFiles.install(conf), "installed once");
    }

    @Test
    void filesAndFoldersGetTheModeAskedLessTheUmaskAndTheirChecksums() throws Exception {
        Configuration conf = new Configuration(false);
        conf.set("fs.file.impl", LocalFiles.class.getName());
        conf.setBoolean("fs.file.impl.disable.cache", true);
        conf.set("fs.permissions.umask-mode", "022");
        FileSystem fs = FileSystem.get(URI.create("file:///"), conf);
        assertInstanceOf(LocalFiles.class, fs);

        org.apache.hadoop.fs.Path file = new org.apache.hadoop.fs.Path(dir.resolve("a/b/data.parquet").toUri());
        try (OutputStream out = fs.create(file, new FsPermission((short) 0666), true, 4096, (short) 1, 1 << 20, null)) {
            out.write("rows".getBytes());
        }
        assertEquals("rows", Files.readString(dir.resolve("a/b/data.parquet")));
        assertEquals(PosixFilePermissions.fromString("rw-r--r--"),
                     Files.getPosixFilePermissions(dir.resolve("a/b/data.parquet")));
        assertTrue(Files.exists(dir.resolve("a/b/.data.parquet.crc")), "checksums are kept as Hadoop keeps them");
        assertEquals(PosixFilePermissions.fromString("rwxr-xr-x"), Files.getPosixFilePermissions(dir.resolve("a/b")));

        fs.setPermission(file, new FsPermission((short) 0600));
        assertEquals(PosixFilePermissions.fromString("rw-------"),
                     Files.getPosixFilePermissions(dir.resolve("a/b/data.parquet")));
        assertTrue(fs.mkdirs(new org.apache.hadoop.fs.Path(dir.resolve("c").toUri()), new FsPermission((short) 0750)));
        assertEquals(PosixFilePermissions.fromString("rwxr-x---"), Files.getPosixFilePermissions(dir.resolve("c")));
    }
}
