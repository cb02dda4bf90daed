package statebed;

import java.io.IOException;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Hadoop's local FileSystem with the `native.sst.upload` failpoint (`SstCopies`) on its SST
 * copies. Registered as `fs.file.impl`; every other operation is LocalFileSystem's own.
 */
public class FailpointLocalFileSystem extends LocalFileSystem {
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
        SstCopies.copy(dst, () -> super.copyFromLocalFile(delSrc, overwrite, src, dst));
    }
}
