package statebed;

import java.io.IOException;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Hadoop's local FileSystem with the `native.sst.upload` failpoint: RocksDB's file manager copies
 * SSTs into the checkpoint with copyFromLocalFile, past the checkpoint file manager. Registered as
 * `fs.file.impl`; every other operation is LocalFileSystem's own.
 */
public class FailpointLocalFileSystem extends LocalFileSystem {
    private static final ThreadLocal<Boolean> COPYING = ThreadLocal.withInitial(() -> false);

    @Override
    public void initialize(URI name, Configuration conf) throws IOException {
        super.initialize(name, conf);
        Failpoints.useControl(conf.get(Failpoints.CONF_KEY));
    }

    @Override
    public void copyFromLocalFile(Path src, Path dst) throws IOException {
        copyFromLocalFile(false, true, src, dst);
    }

    @Override
    public void copyFromLocalFile(boolean delSrc, Path src, Path dst) throws IOException {
        copyFromLocalFile(delSrc, true, src, dst);
    }

    @Override
    public void copyFromLocalFile(boolean delSrc, boolean overwrite, Path src, Path dst) throws IOException {
        if (COPYING.get() || Failpoints.idle()) {
            super.copyFromLocalFile(delSrc, overwrite, src, dst);
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
            super.copyFromLocalFile(delSrc, overwrite, src, dst);
        } finally {
            COPYING.set(false);
        }
    }
}
