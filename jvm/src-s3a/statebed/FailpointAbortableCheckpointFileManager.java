package statebed;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

/**
 * The cloud checkpoint file manager Spark's docs recommend on S3 (spark-hadoop-cloud: the file is
 * written in place and published by the upload at close; cancel aborts the upload) with the same
 * failpoints, timings and delete point as the default one (`AtomicWrites`). Needs a file system
 * with abortable streams (S3A); in the plug-in's S3A jar, loaded only for s3a:// checkpoints.
 */
public class FailpointAbortableCheckpointFileManager extends AbortableStreamBasedCheckpointFileManager {
    public FailpointAbortableCheckpointFileManager(Path path, Configuration hadoopConf) {
        super(path, hadoopConf);
        Failpoints.useControl(hadoopConf.get(Failpoints.CONF_KEY));
    }

    @Override
    public CheckpointFileManager.CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
        return AtomicWrites.wrap(super.createAtomic(path, overwriteIfPossible), path);
    }

    @Override
    public FileStatus[] list(Path path, PathFilter filter) {
        return RequestLog.timed("list", path.toString(), () -> super.list(path, filter));
    }

    @Override
    public boolean exists(Path path) {
        return RequestLog.timed("exists", path.toString(), () -> super.exists(path));
    }

    @Override
    public FSDataInputStream open(Path path) {
        return RequestLog.timed("read", path.toString(), () -> super.open(path));
    }

    @Override
    public void delete(Path path) {
        AtomicWrites.delete(path, () -> super.delete(path));
    }
}
