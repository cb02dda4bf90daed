package statebed;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;

/**
 * What a checkpoint path is, as far as failpoints care: which kind of file Spark writes there and
 * which task it belongs to. V2 state files (and V1 snapshots) are written on pool / maintenance
 * threads with no TaskContext, so operator, partition and version come from the path; a task
 * thread adds its attempt number and its batch id (the `streaming.sql.batchId` local property).
 */
final class Target {
    private static final Pattern STATE_FILE = Pattern.compile("^(\\d+)(?:_[0-9A-Za-z-]+)?\\.(changelog|zip)$");
    private static final Pattern DIGITS = Pattern.compile("^\\d+$");

    /** "changelog", "snapshot", "sst", "commitlog" or "offsetlog". */
    final String kind;
    final Map<String, Integer> task;
    final String file;

    private Target(String kind, Map<String, Integer> task, String file) {
        this.kind = kind;
        this.task = task;
        this.file = file;
    }

    /** A file of a state store (changelog, zip, SST), not a driver log. */
    boolean isStateFile() {
        return kind.equals("changelog") || kind.equals("snapshot") || kind.equals("sst");
    }

    /** The target of a createAtomic(path) or an SST copy to path; null when no point covers it. */
    static Target of(Path path) {
        String name = path.getName();
        Path parent = path.getParent();
        if (parent == null || name.endsWith(".crc")) {
            return null;
        }
        if (DIGITS.matcher(name).matches() && (parent.getName().equals("commits") || parent.getName().equals("offsets"))) {
            String kind = parent.getName().equals("commits") ? "commitlog" : "offsetlog";
            return new Target(kind, context(safeInt(name), null), path.toString());
        }
        Matcher m = STATE_FILE.matcher(name);
        if (m.matches()) {
            Integer partition = partitionOf(parent);
            if (partition == null) {
                return null;
            }
            Integer version = safeInt(m.group(1));
            Integer batch = version == null ? null : version - 1;  // batch b commits version b + 1
            return new Target(m.group(2).equals("zip") ? "snapshot" : "changelog", context(batch, partition), path.toString());
        }
        if (name.endsWith(".sst") && parent.getName().equals("SSTs")) {
            Integer partition = partitionOf(parent.getParent());
            return partition == null ? null : new Target("sst", context(null, partition), path.toString());
        }
        return null;
    }

    /** `.../state/<op>/<partition>[/<store>]` -> partition; null when the path is not under state/. */
    private static Integer partitionOf(Path dir) {
        for (int up = 0; up < 2 && dir != null; up++, dir = dir.getParent()) {
            Path op = dir.getParent();
            Path state = op == null ? null : op.getParent();
            if (state != null && state.getName().equals("state") && DIGITS.matcher(dir.getName()).matches()
                    && DIGITS.matcher(op.getName()).matches()) {
                return safeInt(dir.getName());
            }
        }
        return null;
    }

    /** {batch, partition, attempt} from the path, overridden by the task thread's own context. */
    private static Map<String, Integer> context(Integer batch, Integer partition) {
        TaskContext tc = TaskContext.get();
        Integer attempt = null;
        if (tc != null) {
            String b = tc.getLocalProperty("streaming.sql.batchId");
            batch = b != null && DIGITS.matcher(b).matches() ? safeInt(b) : batch;
            partition = partition != null ? partition : tc.partitionId();
            attempt = tc.attemptNumber();
        }
        Map<String, Integer> task = new LinkedHashMap<>();
        if (batch != null) {
            task.put("batch", batch);
        }
        if (partition != null) {
            task.put("partition", partition);
        }
        if (attempt != null) {
            task.put("attempt", attempt);
        }
        return task.isEmpty() ? null : task;
    }

    private static Integer safeInt(String digits) {
        try {
            return Integer.valueOf(digits);
        } catch (NumberFormatException e) {
            return null;
        }
    }
}
