package statebed;

import java.io.IOException;
import org.apache.hadoop.fs.Path;

/**
 * The `native.sst.upload` failpoint of an SST copy (RocksDB's file manager copies SSTs into the
 * checkpoint with `copyFromLocalFile`, past the checkpoint file manager), for whichever Hadoop
 * FileSystem the checkpoint is on: the local one and S3A call here from their override. A copy
 * that calls itself again (an overload delegating to another) passes the point once.
 */
public final class SstCopies {
    private static final ThreadLocal<Boolean> COPYING = ThreadLocal.withInitial(() -> false);

    private SstCopies() {}

    /** Run `copy` of an SST to `dst` behind the failpoint: drop skips it, error throws, delay/hold wait first. */
    public static void copy(Path dst, AtomicWrites.IOAction copy) throws IOException {
        if (COPYING.get() || Failpoints.idle()) {
            copy.run();
            return;
        }
        Target target = Target.of(dst);
        Failpoints.Firing f = target == null ? null : Failpoints.evaluate("native.sst.upload", target.task, target.file);
        if (f != null && f.action().equals("drop")) {
            return;
        }
        if (f != null && f.action().equals("error")) {
            throw f.error();
        }
        if (f != null) {
            f.actInline();
        }
        COPYING.set(true);
        try {
            copy.run();
        } finally {
            COPYING.set(false);
        }
    }
}
