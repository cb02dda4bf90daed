package statebed;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;

/**
 * What statebed's checkpoint file managers add to Spark's, whichever they extend (the rename-based
 * default or the cloud one that writes in place): the failpoints at each atomic write's close, the
 * request log's timings, and the failpoint of a state file's delete. The managers are one-line
 * overrides calling here, so the two behave alike by construction.
 */
public final class AtomicWrites {
    private static final AtomicLong CREATED = new AtomicLong();

    private AtomicWrites() {}

    /** Something of the file system's, which may throw IOException. */
    @FunctionalInterface
    public interface IOAction {
        void run() throws IOException;
    }

    /** How many atomic writes passed through this JVM's managers (shows the plug-in is loaded, armed or not). */
    public static long created() {
        return CREATED.get();
    }

    /** `inner` (Spark's own stream for `path`) with the failpoints of its target and, when logging, its timing. */
    public static CheckpointFileManager.CancellableFSDataOutputStream wrap(CheckpointFileManager.CancellableFSDataOutputStream inner, Path path) {
        CREATED.incrementAndGet();
        Target target = Failpoints.idle() ? null : Target.of(path);
        CheckpointFileManager.CancellableFSDataOutputStream out = target == null ? inner : new Stream(inner, target);
        return RequestLog.enabled() ? new Timed(out, path.toString()) : out;
    }

    /**
     * A state file's delete (Spark's maintenance removing old versions and orphans) passes
     * `native.cleanup.delete` first: delay / hold widen the window in which cleanup races the
     * attempts still writing, drop keeps the file, error fails the delete. Other deletes (the
     * driver purging its offset and commit logs, checksum files) pass through.
     */
    public static void delete(Path path, IOAction delete) {
        RequestLog.timed("delete", path.toString(), () -> {
            Target target = Failpoints.idle() ? null : Target.of(path);
            Failpoints.Firing f = target != null && target.isStateFile()
                    ? Failpoints.evaluate("native.cleanup.delete", target.task, target.file) : null;
            if (f != null && f.action().equals("drop")) {
                return null;
            }
            if (f != null && f.action().equals("error")) {
                throw new UncheckedIOException(f.error());
            }
            if (f != null) {
                f.actInline();
            }
            try {
                delete.run();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            return null;
        });
    }

    /** A write timed from its close (where the object is uploaded and renamed into place) into the request log. */
    static final class Timed extends CheckpointFileManager.CancellableFSDataOutputStream {
        private final CheckpointFileManager.CancellableFSDataOutputStream out;
        private final String file;
        private long bytes;
        private boolean done;

        Timed(CheckpointFileManager.CancellableFSDataOutputStream out, String file) {
            super(out);
            this.out = out;
            this.file = file;
        }

        @Override
        public synchronized void write(int b) throws IOException {
            super.write(b);  // through FSDataOutputStream's position: Spark's checksum manager sizes the file by getPos()
            bytes++;
        }

        @Override
        public synchronized void write(byte[] b, int off, int len) throws IOException {
            super.write(b, off, len);
            bytes += len;
        }

        @Override
        public synchronized void close() throws IOException {
            if (done) {
                return;
            }
            done = true;
            double start = RequestLog.now();
            Throwable error = null;
            try {
                out.close();
            } catch (IOException | RuntimeException e) {
                error = e;
                throw e;
            } finally {
                RequestLog.write(file, start, RequestLog.now(), bytes, error);
            }
        }

        @Override
        public synchronized void cancel() {
            done = true;
            out.cancel();
        }
    }

    /** Spark's stream, with the failpoints of its target evaluated when it is closed. */
    static final class Stream extends CheckpointFileManager.CancellableFSDataOutputStream {
        private final CheckpointFileManager.CancellableFSDataOutputStream inner;
        private final Target target;
        private final ByteArrayOutputStream copy;  // a state file's bytes while its .zombie point is armed: what a parked close would land
        private boolean done;

        Stream(CheckpointFileManager.CancellableFSDataOutputStream inner, Target target) {
            super(inner);
            this.inner = inner;
            this.target = target;
            boolean state = target.kind.equals("changelog") || target.kind.equals("snapshot");
            this.copy = state && Failpoints.armed("native." + target.kind + ".zombie") ? new ByteArrayOutputStream() : null;
        }

        @Override
        public synchronized void write(int b) throws IOException {
            super.write(b);
            if (copy != null) {
                copy.write(b);
            }
        }

        @Override
        public synchronized void write(byte[] b, int off, int len) throws IOException {
            super.write(b, off, len);
            if (copy != null) {
                copy.write(b, off, len);
            }
        }

        @Override
        public synchronized void close() throws IOException {
            if (done) {
                return;
            }
            done = true;
            if (target.kind.equals("changelog") || target.kind.equals("snapshot")) {
                Failpoints.Firing zombie = Failpoints.evaluate("native." + target.kind + ".zombie", target.task, target.file);
                if (zombie != null && (zombie.action().equals("hold") || zombie.action().equals("delay"))) {
                    flush();
                    zombie.park(copy == null ? null : copy.toByteArray(), new Path(target.file).getName());
                    land(zombie);
                    throw new IOException("failpoint " + zombie.point + " fired: close delayed (zombie), the file lands later");
                }
                if (act(zombie)) {
                    return;
                }
            }
            String point = target.kind.equals("commitlog") || target.kind.equals("offsetlog")
                    ? "native." + target.kind + ".write" : "native." + target.kind + ".upload";
            if (act(Failpoints.evaluate(point, target.task, target.file))) {
                return;
            }
            inner.close();
        }

        /** Run a firing's action; true when the file must not land (drop). error cancels, then throws. */
        private boolean act(Failpoints.Firing f) throws IOException {
            if (f == null) {
                return false;
            }
            switch (f.action()) {
                case "drop":
                    inner.cancel();
                    return true;
                case "error":
                    inner.cancel();
                    throw f.error();
                default:
                    f.actInline();
                    return false;
            }
        }

        /** The delayed close: a daemon thread renames the file into place after the delay / on release. */
        private void land(Failpoints.Firing f) {
            Thread t = new Thread(() -> {
                String how = "landed";
                if (f.action().equals("hold")) {
                    how = f.hold();
                } else {
                    Failpoints.sleep(f.term.argMillis());
                }
                String outcome = "zombie-landed";
                String error = null;
                try {
                    inner.close();
                } catch (IOException | RuntimeException e) {
                    outcome = "zombie-failed";
                    error = e.toString();
                }
                f.record(outcome, error == null ? Map.of("after", how) : Map.of("after", how, "error", error));
            }, "statebed-zombie-close");
            t.setDaemon(true);
            t.start();
        }

        @Override
        public synchronized void cancel() {
            if (!done) {
                done = true;
                inner.cancel();
            }
        }
    }
}
