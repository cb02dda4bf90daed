package statebed;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Prints how this plug-in parses each spec given on stdin (one per line) as one JSON line:
 * {"points": {name: [{action, pct, count, arg, task, describe}]}} or {"error": message}. The
 * tests compare it with Python's parse_spec of the same lines (tests/jvm).
 */
public final class ParseMain {
    private ParseMain() {}

    public static void main(String[] args) throws Exception {
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, "UTF-8"));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            Map<String, Object> out = new LinkedHashMap<>();
            try {
                Map<String, Object> points = new LinkedHashMap<>();
                for (Map.Entry<String, List<Failpoints.Term>> e : Failpoints.parseSpec(line.replace("\\n", "\n")).entrySet()) {
                    List<Object> terms = new ArrayList<>();
                    for (Failpoints.Term t : e.getValue()) {
                        Map<String, Object> term = new LinkedHashMap<>();
                        term.put("action", t.action);
                        term.put("pct", t.pct);
                        term.put("count", t.count);
                        term.put("arg", t.arg);
                        term.put("task", t.task);
                        term.put("describe", t.describe());
                        terms.add(term);
                    }
                    points.put(e.getKey(), terms);
                }
                out.put("points", points);
            } catch (IllegalArgumentException e) {
                out.put("error", e.getMessage());
            }
            System.out.println(Failpoints.JSON.writeValueAsString(out));
        }
    }
}
