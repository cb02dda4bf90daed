package statebed;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;

/**
 * Spark 4.3's default checkpoint file manager (write a temp file, rename it into place) with
 * statebed's failpoints at each atomic write's close (`AtomicWrites`): loaded with
 * `spark.sql.streaming.checkpointFileManagerClass`, so the state store's changelogs and zips and
 * the driver's offset and commit logs all pass here. Unarmed, createAtomic returns Spark's own stream.
 */
public class FailpointCheckpointFileManager extends FileContextBasedCheckpointFileManager {
    public FailpointCheckpointFileManager(Path path, Configuration hadoopConf) {
        super(path, hadoopConf);
        Failpoints.useControl(hadoopConf.get(Failpoints.CONF_KEY));
    }

    /** How many atomic writes passed through this JVM's managers, of either kind. */
    public static long created() {
        return AtomicWrites.created();
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
