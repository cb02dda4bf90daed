package statebed;

import java.io.IOException;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Hadoop's local FileSystem with the `native.sst.upload` failpoint (`SstCopies`) on its SST
 * copies, and each open logged (`RequestLog`, level "fs"): Spark reads a V1 snapshot zip and the
 * SSTs it names through the FileSystem, not the checkpoint file manager, so a fault that damages
 * them is proven by these reads. Registered as `fs.file.impl`; every other operation is
 * LocalFileSystem's own.
 */
public class FailpointLocalFileSystem extends LocalFileSystem {
    @Override
    public void initialize(URI name, Configuration conf) throws IOException {
        super.initialize(name, conf);
        Failpoints.useControl(conf.get(Failpoints.CONF_KEY));
    }

    @Override
    public FSDataInputStream open(Path f, int bufferSize) throws IOException {
        if (!RequestLog.enabled()) {
            return super.open(f, bufferSize);
        }
        double start = RequestLog.now();
        IOException error = null;
        try {
            return super.open(f, bufferSize);
        } catch (IOException e) {
            error = e;
            throw e;
        } finally {
            RequestLog.opened(f.toString(), start, RequestLog.now(), error);
        }
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
        SstCopies.copy(dst, () -> super.copyFromLocalFile(delSrc, overwrite, src, dst));
    }
}
