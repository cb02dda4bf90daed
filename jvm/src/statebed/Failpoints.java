package statebed;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.FileOutputStream;
import java.io.IOException;
import java.math.BigDecimal;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.CRC32;

/**
 * statebed's failpoints inside the JVM: the same grammar, control file and firing records as the
 * Python store's `statebed_store.failpoints` (read that module's docstring for the grammar), for
 * the points only the JVM can reach (Spark's own checkpoint I/O, see docs/native-failpoints.md).
 *
 * Armed from STATEBED_FAILPOINTS (+ STATEBED_FAILPOINTS_SEED) and from the control file named by
 * the Hadoop conf key {@code statebed.failpoints.control} or STATEBED_FAILPOINTS_CONTROL. Counts are
 * per JVM; rolls come from a per-point RNG seeded like Python's (seed * 1000003 + crc32(name)), but
 * Java's generator, so a roll sequence is reproducible per seed, not equal to Python's.
 */
public final class Failpoints {
    public static final String CONF_KEY = "statebed.failpoints.control";
    static final String CONTROL_ENV = "STATEBED_FAILPOINTS_CONTROL";
    static final long CONTROL_POLL_MS = 100;
    static final int MAX_HOLD_MS = 600_000;
    static final String[] FILTER_KEYS = {"batch", "partition", "attempt"};

    /** The points this plug-in owns, and what each one is. */
    public static final Map<String, String> KNOWN_POINTS = new LinkedHashMap<>();

    static {
        String close = "at the atomic stream's close, before the rename into place (drop: the file never lands, the writer sees success)";
        KNOWN_POINTS.put("native.changelog.upload", "a state changelog (<v>[_<id>].changelog), " + close);
        KNOWN_POINTS.put("native.snapshot.upload", "a state snapshot zip (<v>[_<id>].zip), " + close);
        KNOWN_POINTS.put("native.sst.upload", "an SST copied into SSTs/ with the Hadoop FileSystem API, before the copy (drop: skip the copy)");
        KNOWN_POINTS.put("native.commitlog.write", "commits/<batch> on the driver, " + close);
        KNOWN_POINTS.put("native.offsetlog.write", "offsets/<batch> on the driver, " + close);
        String zombie = "delayed close (zombie): delay/hold make close() fail like a lost task while the rename lands later "
                + "(after delay ms, or on release / the hold bound); other actions as on the upload point";
        KNOWN_POINTS.put("native.changelog.zombie", "a state changelog, " + zombie);
        KNOWN_POINTS.put("native.snapshot.zombie", "a state snapshot zip, " + zombie);
        KNOWN_POINTS.put("native.cleanup.delete", "a state file (changelog, zip, SST) Spark's maintenance deletes, before the delete "
                + "(drop: the file stays; error: the delete fails, as Spark's maintenance sees a failed delete)");
    }

    private static final Pattern TERM = Pattern.compile(
            "^(?:\\[(?<filter>[^\\[\\]]*)\\])?(?:(?<pct>\\d+(?:\\.\\d+)?)%)?(?:(?<count>\\d+)\\*)?"
                    + "(?<action>off|delay|sleep|hold|drop|error|exit)(?:\\((?<arg>[^()]*)\\))?$");
    private static final Pattern FILTER_ITEM = Pattern.compile("^(?<key>[a-z]+)=(?<value>\\d+)$");
    private static final Pattern DIGITS = Pattern.compile("^\\d+$");
    static final ObjectMapper JSON = new ObjectMapper();

    private Failpoints() {}

    /** One term of a point's spec: `[filter]pct%count*action(arg)`. */
    public static final class Term {
        public final String action;
        public final double pct;
        public Integer count;  // remaining firings (per JVM), null: unlimited
        public final String arg;
        public final Map<String, Integer> task;  // null: no filter

        Term(String action, double pct, Integer count, String arg, Map<String, Integer> task) {
            this.action = action;
            this.pct = pct;
            this.count = count;
            this.arg = arg;
            this.task = task;
        }

        /** The term as Python's `_Term.describe` writes it. */
        public String describe() {
            StringBuilder b = new StringBuilder();
            if (task != null) {
                List<String> items = new ArrayList<>();
                task.forEach((k, v) -> items.add(k + "=" + v));
                b.append('[').append(String.join(",", items)).append(']');
            }
            if (pct != 100.0) {
                b.append(new BigDecimal(Double.toString(pct)).stripTrailingZeros().toPlainString()).append('%');
            }
            if (count != null) {
                b.append(count).append('*');
            }
            b.append(action);
            if (arg != null) {
                b.append('(').append(arg).append(')');
            }
            return b.toString();
        }

        boolean matches(Map<String, Integer> ctx) {
            if (task == null) {
                return true;
            }
            if (ctx == null) {
                return false;
            }
            for (Map.Entry<String, Integer> e : task.entrySet()) {
                if (!e.getValue().equals(ctx.get(e.getKey()))) {
                    return false;
                }
            }
            return true;
        }

        int argMillis() {
            return arg == null ? 0 : Integer.parseInt(arg.strip());
        }
    }

    static final class Point {
        final String name;
        final List<Term> terms;
        final SplittableRandom rng;
        final String source;
        final String spec;
        final long seed;
        long hits;

        Point(String name, List<Term> terms, String source, long seed) {
            this.name = name;
            this.terms = terms;
            CRC32 crc = new CRC32();
            crc.update(name.getBytes(StandardCharsets.UTF_8));
            this.rng = new SplittableRandom(seed * 1_000_003L + crc.getValue());
            this.source = source;
            this.spec = describe(terms);
            this.seed = seed;
        }
    }

    static String describe(List<Term> terms) {
        List<String> parts = new ArrayList<>();
        for (Term t : terms) {
            parts.add(t.describe());
        }
        return String.join("->", parts);
    }

    // ---- parsing (mirrors statebed_store.failpoints: _parse_terms, _parse_filter, _entries) ----

    static Map<String, Integer> parseFilter(String name, String text) {
        Map<String, Integer> found = new LinkedHashMap<>();
        for (String item : text.split(",", -1)) {
            Matcher m = FILTER_ITEM.matcher(item.strip());
            String key = m.matches() ? m.group("key") : null;
            if (key == null || !List.of(FILTER_KEYS).contains(key) || found.containsKey(key)) {
                throw new IllegalArgumentException("failpoint " + name + ": bad task filter [" + text
                        + "] (expected e.g. [batch=3,partition=1,attempt=0]: keys batch, partition, attempt once each, integer values)");
            }
            found.put(key, Integer.valueOf(m.group("value")));
        }
        Map<String, Integer> ordered = new LinkedHashMap<>();
        for (String k : FILTER_KEYS) {
            if (found.containsKey(k)) {
                ordered.put(k, found.get(k));
            }
        }
        return ordered;
    }

    /** `term->term...` of one point; IllegalArgumentException names the point and the bad part. */
    public static List<Term> parseTerms(String name, String text) {
        List<Term> terms = new ArrayList<>();
        for (String raw : text.split("->", -1)) {
            Matcher m = TERM.matcher(raw.strip());
            if (!m.matches()) {
                throw new IllegalArgumentException("failpoint " + name + ": cannot parse term '" + raw.strip() + "'");
            }
            double pct = m.group("pct") != null ? Double.parseDouble(m.group("pct")) : 100.0;
            if (pct < 0 || pct > 100) {
                throw new IllegalArgumentException("failpoint " + name + ": probability " + pct + "% out of range");
            }
            String action = m.group("action");
            String arg = m.group("arg");
            if (action.equals("sleep")) {
                action = "delay";
            }
            boolean digits = arg != null && DIGITS.matcher(arg.strip()).matches();
            if (action.equals("delay") && !digits) {
                throw new IllegalArgumentException("failpoint " + name + ": delay needs milliseconds, e.g. delay(2000)");
            }
            if (action.equals("exit") && arg != null && !digits) {
                throw new IllegalArgumentException("failpoint " + name + ": exit takes an integer code");
            }
            if (action.equals("hold") && (!digits || !holdBoundOk(arg.strip()))) {
                throw new IllegalArgumentException("failpoint " + name + ": hold needs a bound in milliseconds, 1.." + MAX_HOLD_MS);
            }
            Map<String, Integer> task = m.group("filter") == null ? null : parseFilter(name, m.group("filter"));
            Integer count = m.group("count") != null ? Integer.valueOf(m.group("count")) : null;
            terms.add(new Term(action, pct, count, arg, task));
        }
        return terms;
    }

    private static boolean holdBoundOk(String digits) {
        BigDecimal ms = new BigDecimal(digits);
        return ms.signum() > 0 && ms.compareTo(BigDecimal.valueOf(MAX_HOLD_MS)) <= 0;
    }

    /** `name=terms;name=terms` as (name, terms text) pairs in order; a missing '=' is an error. */
    static List<String[]> entries(String spec) {
        List<String[]> out = new ArrayList<>();
        for (String entry : spec.split("[;\n]", -1)) {
            entry = entry.strip();
            if (entry.isEmpty()) {
                continue;
            }
            int eq = entry.indexOf('=');
            if (eq < 0) {
                throw new IllegalArgumentException("failpoint entry '" + entry + "' needs the form name=action");
            }
            out.add(new String[] {entry.substring(0, eq).strip(), entry.substring(eq + 1)});
        }
        return out;
    }

    /** Parse a whole spec naming only this plug-in's points (Python's parse_spec for them). */
    public static Map<String, List<Term>> parseSpec(String spec) {
        Map<String, List<Term>> out = new LinkedHashMap<>();
        for (String[] e : entries(spec)) {
            if (!KNOWN_POINTS.containsKey(e[0])) {
                throw new IllegalArgumentException("unknown failpoint '" + e[0] + "'");
            }
            out.put(e[0], parseTerms(e[0], e[1]));
        }
        return out;
    }

    static boolean isOff(List<Term> terms) {
        for (Term t : terms) {
            if (!t.action.equals("off")) {
                return false;
            }
        }
        return true;
    }

    // ---- arming ----

    private static final Object LOCK = new Object();
    private static final Map<String, Point> ARMED = new LinkedHashMap<>();
    private static volatile Control control;

    static {
        String spec = System.getenv("STATEBED_FAILPOINTS");
        if (spec != null && !spec.isBlank()) {
            String seedText = System.getenv().getOrDefault("STATEBED_FAILPOINTS_SEED", "0");
            long seed = seedText.matches("-?\\d+") ? Long.parseLong(seedText) : 0;
            for (String[] e : entries(spec)) {  // other points belong to the Python processes
                if (KNOWN_POINTS.containsKey(e[0])) {
                    List<Term> terms = parseTerms(e[0], e[1]);
                    if (!isOff(terms)) {
                        ARMED.put(e[0], new Point(e[0], terms, "env", seed));
                    }
                }
            }
        }
        String env = System.getenv(CONTROL_ENV);
        if (env != null && !env.isBlank()) {
            useControl(env);
        }
    }

    /** Follow the control file at `path` (the first one named wins: one run per JVM). */
    public static void useControl(String path) {
        if (path == null || path.isBlank() || control != null) {
            return;
        }
        synchronized (LOCK) {
            if (control == null) {
                control = new Control(Paths.get(path).toAbsolutePath());
            }
        }
    }

    /** True when nothing can fire: no point armed and no control file followed. */
    public static boolean idle() {
        return control == null && ARMED.isEmpty();
    }

    /** One decided firing: the term chosen, already recorded. */
    public static final class Firing {
        public final String point;
        public final Term term;
        final Point p;
        final long hits;
        final long baseline;  // release counter before the firing (holds)
        final Map<String, Integer> task;
        final String file;

        Firing(Point p, Term term, long hits, long baseline, Map<String, Integer> task, String file) {
            this.point = p.name;
            this.term = term;
            this.p = p;
            this.hits = hits;
            this.baseline = baseline;
            this.task = task;
            this.file = file;
        }

        public String action() {
            return term.action;
        }

        /** Block until the point is released after this firing or the bound elapses; record how it ended. */
        public String hold() {
            Control c = control;
            long start = System.nanoTime();
            String outcome;
            if (c == null) {
                sleep(term.argMillis());
                outcome = "hold-timeout";
            } else {
                long deadline = start + term.argMillis() * 1_000_000L;
                while (true) {
                    c.poll();
                    if (c.released(point) > baseline) {
                        outcome = "released";
                        break;
                    }
                    long left = deadline - System.nanoTime();
                    if (left <= 0) {
                        outcome = "hold-timeout";
                        break;
                    }
                    sleep(Math.max(1, Math.min(CONTROL_POLL_MS, left / 1_000_000L)));
                }
            }
            Map<String, Object> extra = new LinkedHashMap<>();
            extra.put("held_s", Math.round((System.nanoTime() - start) / 1e6) / 1000.0);
            record(outcome, extra);
            return outcome;
        }

        /**
         * Keep a parked stream's whole content beside the control file ({@code parked/<pid>-<hit>-<name>}),
         * recorded as "zombie-parked" with its path: if this JVM dies before the close lands, the file
         * under Spark's temp name holds only what was flushed, and a controller can land the whole.
         */
        public void park(byte[] content, String name) {
            Control c = control;
            if (c == null) {
                return;
            }
            if (content == null) {  // armed after the stream opened: nothing was kept
                record("zombie-parked", Map.of("error", "the point was armed after the stream opened: no copy"));
                return;
            }
            Path dir = c.path.getParent().resolve("parked");
            Path out = dir.resolve(ProcessHandle.current().pid() + "-" + hits + "-" + name);
            Map<String, Object> extra = new LinkedHashMap<>();
            try {
                Files.createDirectories(dir);
                Files.write(out, content);
                extra.put("copy", out.toString());
                extra.put("bytes", content.length);
            } catch (IOException e) {
                extra.put("error", e.toString());
            }
            record("zombie-parked", extra);
        }

        /** Append one more record for this firing (a hold's end, a zombie's landing). */
        public void record(String action, Map<String, Object> extra) {
            Control c = control;
            if (c != null) {
                c.record(this, action, extra);
            }
        }

        /** Act as Python's hit() does for everything but drop/error: delay sleeps, hold blocks, exit halts. */
        public void actInline() {
            switch (term.action) {
                case "delay":
                    sleep(term.argMillis());
                    break;
                case "hold":
                    hold();
                    break;
                case "exit":
                    Runtime.getRuntime().halt(term.arg == null ? 1 : term.argMillis());
                    break;
                default:
                    break;
            }
        }

        public IOException error() {
            return new IOException("failpoint " + point + " fired: " + (term.arg == null ? "injected error" : term.arg));
        }
    }

    /** Whether point `name` has terms armed now (the control file re-read if due). */
    public static boolean armed(String name) {
        Control c = control;
        if (c != null) {
            c.poll();
        }
        synchronized (LOCK) {
            return ARMED.containsKey(name);
        }
    }

    /**
     * Evaluate point `name` for one operation on `file` by the task `task` (null: none known).
     * Returns the firing (already recorded) or null when nothing fires.
     */
    public static Firing evaluate(String name, Map<String, Integer> task, String file) {
        Control c = control;
        if (c == null && ARMED.isEmpty()) {
            return null;
        }
        if (c != null) {
            c.poll();
        }
        Point p;
        Term chosen = null;
        long hits;
        synchronized (LOCK) {
            p = ARMED.get(name);
            if (p == null) {
                return null;
            }
            p.hits += 1;
            for (Term t : p.terms) {
                if (!t.matches(task) || (t.count != null && t.count <= 0)) {
                    continue;
                }
                if (t.pct < 100.0 && p.rng.nextDouble() * 100.0 >= t.pct) {
                    continue;
                }
                if (t.count != null) {
                    t.count -= 1;
                }
                chosen = t;
                break;
            }
            hits = p.hits;
        }
        if (chosen == null || chosen.action.equals("off")) {
            return null;
        }
        long baseline = c != null && chosen.action.equals("hold") ? c.releasedNow(name) : 0;
        Firing f = new Firing(p, chosen, hits, baseline, task, file);
        f.record(null, Map.of());
        return f;
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Make the control-armed points exactly `points` (names that are not ours belong to Python). */
    static void applyControl(JsonNode points, long seed) {
        Map<String, List<Term>> wanted = new LinkedHashMap<>();
        Iterator<Map.Entry<String, JsonNode>> it = points.properties().iterator();
        while (it.hasNext()) {
            Map.Entry<String, JsonNode> e = it.next();
            if (KNOWN_POINTS.containsKey(e.getKey())) {
                try {
                    wanted.put(e.getKey(), parseTerms(e.getKey(), e.getValue().asText()));
                } catch (IllegalArgumentException bad) {
                    System.err.println("statebed: bad failpoint in control file; ignored: " + bad.getMessage());
                }
            }
        }
        synchronized (LOCK) {
            ARMED.entrySet().removeIf(e -> e.getValue().source.equals("control") && !wanted.containsKey(e.getKey()));
            for (Map.Entry<String, List<Term>> e : wanted.entrySet()) {
                Point old = ARMED.get(e.getKey());
                String spec = describe(e.getValue());
                if (old != null && old.source.equals("control") && old.spec.equals(spec) && old.seed == seed) {
                    continue;  // unchanged: keep its counts and RNG
                }
                if (isOff(e.getValue())) {
                    ARMED.remove(e.getKey());
                } else {
                    ARMED.put(e.getKey(), new Point(e.getKey(), e.getValue(), "control", seed));
                }
            }
        }
    }

    /** This JVM's view of a control file: re-read when its identity changes, applied by version. */
    static final class Control {
        final Path path;
        volatile long version;
        volatile Map<String, Long> released = Map.of();
        private Object key;
        private long nextPoll;

        Control(Path path) {
            this.path = path;
        }

        synchronized void poll() {
            long now = System.nanoTime();
            if (now < nextPoll) {
                return;
            }
            nextPoll = now + CONTROL_POLL_MS * 1_000_000L;
            BasicFileAttributes st;
            try {
                st = Files.readAttributes(path, BasicFileAttributes.class);
            } catch (IOException e) {
                return;
            }
            Object k = List.of(String.valueOf(st.fileKey()), st.lastModifiedTime().toString(), st.size());
            if (!k.equals(key)) {
                key = k;
                load();
            }
        }

        private void load() {
            try {
                JsonNode doc = JSON.readTree(Files.readAllBytes(path));
                long v = doc.get("version").asLong();
                long seed = doc.has("seed") ? doc.get("seed").asLong() : 0;
                JsonNode points = doc.get("points");
                if (points == null || !points.isObject()) {
                    throw new IOException("no points");
                }
                if (v > version) {
                    applyControl(points, seed);
                    released = releasedOf(doc);
                    version = v;
                }
            } catch (IOException | RuntimeException e) {
                System.err.println("statebed: failpoint control file " + path + " unreadable; keeping the current arming: " + e);
            }
        }

        private static Map<String, Long> releasedOf(JsonNode doc) {
            Map<String, Long> out = new LinkedHashMap<>();
            JsonNode r = doc.get("released");
            if (r != null && r.isObject()) {
                r.properties().forEach(e -> out.put(e.getKey(), e.getValue().asLong()));
            }
            return out;
        }

        long released(String name) {
            return released.getOrDefault(name, 0L);
        }

        /** The release counter as the file says right now (a hold's baseline; unthrottled). */
        long releasedNow(String name) {
            try {
                return releasedOf(JSON.readTree(Files.readAllBytes(path))).getOrDefault(name, 0L);
            } catch (IOException | RuntimeException e) {
                return released(name);
            }
        }

        /** Append one record, one write on an append-mode file, in Python's record shape (+ file). */
        void record(Firing f, String action, Map<String, Object> extra) {
            Map<String, Object> rec = new LinkedHashMap<>();
            rec.put("time", Math.round(System.currentTimeMillis() * 1000.0) / 1e6);
            rec.put("failpoint", f.point);
            rec.put("action", action != null ? action : f.term.arg == null ? f.term.action : f.term.action + "(" + f.term.arg + ")");
            rec.put("spec", f.p.spec);
            long pid = ProcessHandle.current().pid();
            String host = host();
            long started = started();
            rec.put("pid", pid);
            rec.put("host", host);
            rec.put("started", started);
            rec.put("task", f.task);
            rec.put("hit", f.hits);
            rec.put("control_version", version);
            rec.put("file", f.file);
            rec.putAll(extra);
            Path out = path.getParent().resolve(firingFile(host, pid, started));
            try {
                Files.createDirectories(out.getParent());
                byte[] line = (JSON.writeValueAsString(rec) + "\n").getBytes(StandardCharsets.UTF_8);
                try (FileOutputStream o = new FileOutputStream(out.toFile(), true)) {
                    o.write(line);
                }
            } catch (IOException e) {
                System.err.println("statebed: cannot record a failpoint firing in " + out + ": " + e);
            }
        }

        /** One file per process, named as Python's failpoint_control.firing_file names it: host, pid, start time. */
        static String firingFile(String host, long pid, long started) {
            StringBuilder safe = new StringBuilder();
            for (char c : host.toCharArray()) {
                safe.append(Character.isLetterOrDigit(c) && c < 128 || c == '.' || c == '-' ? c : '_');
                if (safe.length() == 100) {
                    break;
                }
            }
            return "fired-" + (safe.length() == 0 ? "unknown" : safe) + "-" + pid + "-" + started + ".jsonl";
        }

        /** This JVM's start time in clock ticks since boot (field 22 of /proc/self/stat), 0 when unknown. */
        private static long started() {
            try {
                String stat = new String(Files.readAllBytes(Paths.get("/proc/self/stat")), StandardCharsets.US_ASCII);
                String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
                return Long.parseLong(fields[19]);
            } catch (IOException | RuntimeException e) {
                return 0;
            }
        }

        private static String host() {
            String ip = System.getenv("SPARK_LOCAL_IP");
            if (ip != null && !ip.isEmpty()) {
                return ip;
            }
            try {
                return InetAddress.getLocalHost().getHostName();
            } catch (IOException e) {
                return "unknown";
            }
        }
    }
}
