package statebed;

import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Spark's checkpoint operations as statebed's S3 request log has statebed's own requests
 * (statebed_store.storage.request_log): one JSON line per atomic write, read, listing, existence
 * check, delete (`start`, `end` in epoch seconds, `op`, `file`, `bytes` for writes, `retries` 0,
 * `error` its class or null, `level` "fm": the checkpoint file manager's; "fs": an open of the local
 * FileSystem, `FailpointLocalFileSystem`) and, on S3A, one per S3
 * request the SDK made (`level` "sdk", `S3RequestInterceptor`) in
 * `s3-requests-jvm-<pid>.jsonl` under the directory STATEBED_S3_REQUEST_LOG names. A storage
 * fault on Spark's own store is proven by what it did to these writes, as on statebed's.
 */
public final class RequestLog {
    static final String ENV = "STATEBED_S3_REQUEST_LOG";
    private static final String DIR = System.getenv(ENV);
    private static final Object LOCK = new Object();

    private RequestLog() {}

    /** Whether this JVM logs its checkpoint writes (its environment names a directory). */
    public static boolean enabled() {
        return DIR != null && !DIR.isBlank();
    }

    static double now() {
        Instant t = Instant.now();
        return t.getEpochSecond() + t.getNano() / 1e9;
    }

    /** An operation of the file manager, run and logged as `op` on `file` (its error logged and thrown again). */
    interface Op<T> {
        T run();
    }

    static <T> T timed(String op, String file, Op<T> body) {
        if (!enabled()) {
            return body.run();
        }
        double start = now();
        Throwable error = null;
        try {
            return body.run();
        } catch (RuntimeException e) {
            error = e;
            throw e;
        } finally {
            log(op, file, start, now(), -1, 0, "fm", error);
        }
    }

    /** Append one write; a line that cannot be written is a warning on stderr, never a failed write. */
    static void write(String file, double start, double end, long bytes, Throwable error) {
        log("write", file, start, end, bytes, 0, "fm", error);
    }

    /** Append one open of the FileSystem (`FailpointLocalFileSystem`): a read past the file manager. */
    static void opened(String file, double start, double end, Throwable error) {
        log("read", file, start, end, -1, 0, "fs", error);
    }

    /** Append one S3 request of the SDK (`S3RequestInterceptor`): `retries` attempts beyond the first. */
    static void request(String op, String file, double start, double end, long bytes, int retries, Throwable error) {
        log(op, file, start, end, bytes, retries, "sdk", error);
    }

    private static void log(String op, String file, double start, double end, long bytes, int retries, String level, Throwable error) {
        Map<String, Object> rec = new LinkedHashMap<>();
        rec.put("start", Math.round(start * 1e6) / 1e6);
        rec.put("end", Math.round(end * 1e6) / 1e6);
        rec.put("op", op);
        rec.put("file", file);
        rec.put("bytes", bytes < 0 ? null : bytes);
        rec.put("retries", retries);
        rec.put("error", error == null ? null : error.getClass().getSimpleName());
        rec.put("level", level);
        Path out = Paths.get(DIR).resolve("s3-requests-jvm-" + ProcessHandle.current().pid() + ".jsonl");
        try {
            byte[] line = (Failpoints.JSON.writeValueAsString(rec) + "\n").getBytes(StandardCharsets.UTF_8);
            synchronized (LOCK) {
                Files.createDirectories(out.getParent());
                try (FileOutputStream o = new FileOutputStream(out.toFile(), true)) {
                    o.write(line);
                }
            }
        } catch (IOException e) {
            System.err.println("statebed: cannot log a checkpoint write in " + out + ": " + e);
        }
    }
}
