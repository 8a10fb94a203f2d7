package lakehouse;

import java.io.IOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system (the "file:" scheme, checksum files included), with each new file's and folder's
 * permissions set by Java. Without Hadoop's native library (pyspark ships none) Hadoop sets them by starting a
 * {@code chmod} process per file, its checksum file included: a local lake's every data file, delete file,
 * manifest and metadata file cost two processes started from the JVM, hundreds in one small run. The permissions
 * set are the same; a mode Java cannot set (sticky, setuid, setgid bits) is left to Hadoop's own way.
 */
public final class LocalFiles extends LocalFileSystem {
    public LocalFiles() {
        super(new Raw());
    }

    /**
     * Make this the JVM's "file:" file system, the one Hadoop's cache gives every caller of the current user (Spark,
     * Iceberg's file IO, the tasks of a local master), whatever their configuration; returns it. Not by
     * {@code fs.file.impl} in Spark's configuration: spark-submit reads the jars' paths through the file system
     * before this class's jar is loaded. The file system cached before it (spark-submit's) is closed, which for a
     * local one deletes nothing but its files marked to delete on exit.
     */
    public static FileSystem install(Configuration conf) throws IOException {
        URI local = URI.create("file:///");
        FileSystem cached = FileSystem.get(local, conf);
        if (cached instanceof LocalFiles) {
            return cached;
        }
        cached.close();  // out of the cache
        Configuration ours = new Configuration(conf);
        ours.setClassLoader(LocalFiles.class.getClassLoader());
        ours.set("fs.file.impl", LocalFiles.class.getName());
        return FileSystem.get(local, ours);
    }

    /** The raw local file system under the checksums, setting permissions without a process. */
    public static final class Raw extends RawLocalFileSystem {
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            Set<PosixFilePermission> posix = posix(permission.toShort());
            if (posix == null) {
                super.setPermission(p, permission);
            } else {
                Files.setPosixFilePermissions(pathToFile(p).toPath(), posix);
            }
        }
    }

    private static final PosixFilePermission[] BITS = {  // from 0400 down to 0001
        PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE,
        PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE,
        PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE,
    };

    /** The permissions of a Unix mode; null for a mode with bits beyond the nine permissions. */
    static Set<PosixFilePermission> posix(int mode) {
        if ((mode & ~0777) != 0) {
            return null;
        }
        Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
        for (int i = 0; i < BITS.length; i++) {
            if ((mode & (0400 >> i)) != 0) {
                set.add(BITS[i]);
            }
        }
        return set;
    }
}
