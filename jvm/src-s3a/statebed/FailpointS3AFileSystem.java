package statebed;

import java.io.IOException;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.S3AFileSystem;

/**
 * S3A with the `native.sst.upload` failpoint (`SstCopies`) on its SST copies: the twin of
 * `FailpointLocalFileSystem` for s3a:// checkpoints, registered as `fs.s3a.impl`. In the
 * plug-in's S3A jar; every other operation is S3AFileSystem's own.
 */
public class FailpointS3AFileSystem extends S3AFileSystem {
    @Override
    public void initialize(URI name, Configuration conf) throws IOException {
        super.initialize(name, conf);
        Failpoints.useControl(conf.get(Failpoints.CONF_KEY));
    }

    @Override
    public void copyFromLocalFile(boolean delSrc, boolean overwrite, Path src, Path dst) throws IOException {
        SstCopies.copy(dst, () -> super.copyFromLocalFile(delSrc, overwrite, src, dst));
    }
}
