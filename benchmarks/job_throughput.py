"""The job: statebed's V2 store vs Spark's native RocksDB V2 store, same query and data.

`count` over a key space of 1M keys, 20 batches of 500k records, 4 state partitions
(full mode), on Spark `local[2]` and on a standalone cluster of 2 one-core workers. Every
measurement is a fresh `statebed run` process (its own driver JVM and, standalone, its
own cluster): no mode profits from a JVM or OS cache the other one warmed. The modes
alternate (pair i runs native first when i is even, statebed first when odd), 3 pairs
per cluster; the report gives medians and min-max. Throughput is records over the sum of
the batches' trigger durations, batches 2..n ("steady"); latency p50/p99 per batch. Every
run is verified (lineage + state) so a fast wrong answer cannot pass. Goal statebed/native
>= 1.0 (first bar 0.5). For statebed, the batch's phases (input log, the Spark job of the
state tasks, inside it the tasks' load/apply/commit, the driver's commit) and the
executor-cache hit rate (a task that finds its partition open in its Python worker).

    python benchmarks/job_throughput.py [--quick] [--json] [--repeats PAIRS] [--clusters local,standalone]
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib

from statebed_model.rundir import RunDir

NAME = "job_throughput"
GOAL = 1.0
MODES = {"native": ["--native"], "v2": []}
CLUSTERS = {"local": [], "standalone": ["--cluster", "standalone", "--workers", "2"]}
PARTITIONS = 4


def steady_timings(run_dir: Path) -> list[dict[str, Any]]:
    """The last timing record of each committed batch, the first batch (warm-up) excluded."""
    last = {t["batch"]: t for t in RunDir(run_dir).timings() if t.get("status") == "committed" and "tasks_s" in t}
    return [last[b] for b in sorted(last)][1:]


def breakdown(run_dir: Path) -> dict[str, float]:
    """Median seconds of each phase of statebed's batches 2..n, and the executor-cache hit rate."""
    rows = steady_timings(run_dir)
    phases = [ph for r in rows for ph in r.get("task_phases", [])]
    if not rows or not phases:
        return {}

    def med(values: Sequence[float]) -> float:
        return round(statistics.median(values), 4)

    return {
        "batch_s": med([r["seconds"] for r in rows]),
        "input_log_s": med([r["input_s"] for r in rows]),
        "state_job_s": med([r["tasks_s"] for r in rows]),
        "task_max_s": med([max(r["task_seconds"]) for r in rows]),
        "task_load_s": med([ph["load_s"] for ph in phases]),
        "task_apply_s": med([ph["apply_s"] for ph in phases]),
        "task_commit_s": med([ph["commit_s"] for ph in phases]),
        "driver_commit_s": med([r["commit_s"] for r in rows]),
        "cache_hit_rate": round(sum(ph["cache_hit"] for ph in phases) / len(phases), 3),
    }


def measure(env: benchlib.Env, cluster: str, mode: str, sizes: dict[str, int], i: int) -> dict[str, Any]:
    """One `statebed run` in its own process; its summary, wall time and (statebed) breakdown."""
    work = env.dir(f"{cluster}-{mode}-{i}")
    run_dir = work / "run"
    sized = [f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()]
    argv = ["run", "--run-dir", str(run_dir), "--workload", "count", *sized, "--json", *MODES[mode], *CLUSTERS[cluster]]
    s, wall = benchlib.statebed_json(argv, f"{cluster} {mode} run {i}")
    out = {
        "steady_records_per_s": s["steady_records_per_s"],
        "records_per_s": s["records_per_s"],
        "p50_s": s["batch_p50_s"],
        "p99_s": s["batch_p99_s"],
        "wall_s": round(wall, 2),
        "valid": all(v["valid"] is True for v in s["verdicts"].values()),
        "breakdown": breakdown(run_dir) if mode == "v2" else {},
    }
    env.remove(work)
    return out


def spread(xs: Sequence[float]) -> tuple[float, float, float]:
    return benchlib.median(xs), min(xs), max(xs)


def report_cluster(rep: benchlib.Report, cluster: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Tables and ratios of one cluster's pairs; returns its metrics."""
    rows = []
    for mode, rs in runs.items():
        med, lo, hi = spread([r["steady_records_per_s"] for r in rs])
        hits = [r["breakdown"]["cache_hit_rate"] for r in rs if r["breakdown"]]
        p50, p99 = benchlib.median([r["p50_s"] for r in rs]), benchlib.median([r["p99_s"] for r in rs])
        hit = f"{benchlib.median(hits):.0%}" if hits else "-"
        rows.append([mode, len(rs), med, lo, hi, p50, p99, benchlib.median([r["wall_s"] for r in rs]), all(r["valid"] for r in rs), hit])
    headers = ["mode", "runs", "steady rec/s (median)", "min", "max", "p50 s", "p99 s", "wall s", "all valid", "cache hits"]
    rep.table(f"{cluster}: one process per run, modes alternating", headers, rows)
    pair = [s["steady_records_per_s"] / n["steady_records_per_s"] for s, n in zip(runs["v2"], runs["native"])]
    sb, nat = (benchlib.median([r["steady_records_per_s"] for r in runs[m]]) for m in ("v2", "native"))
    note = f"medians of {len(pair)} runs each; per-pair ratios {min(pair):.2f}-{max(pair):.2f}; first bar 0.5"
    rep.ratio(f"statebed/native steady records/s, {cluster}", sb / nat, ">=", GOAL, baseline=f"native RocksDB V2, {cluster}", note=note)
    p50 = [benchlib.median([r["p50_s"] for r in runs[m]]) for m in ("v2", "native")]
    if all(p50):
        rep.ratio(f"p50 batch latency statebed/native, {cluster}", p50[0] / p50[1], None, None, baseline=f"native p50, {cluster}")
    parts = [r["breakdown"] for r in runs["v2"] if r["breakdown"]]
    merged = {k: benchlib.median([p[k] for p in parts]) for k in parts[0]} if parts else {}
    if merged:
        rep.table(f"{cluster}: statebed batch, median seconds per phase (batches 2..n)", list(merged), [list(merged.values())])
    return {"runs": runs, "pair_ratios": [round(x, 4) for x in pair], "median": {"v2": sb, "native": nat}, "breakdown": merged}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = benchlib.parser(NAME, __doc__.split("\n\n")[0])
    p.add_argument("--clusters", default="local,standalone", help="comma-separated: local, standalone")
    args = p.parse_args(argv)
    clusters = [c for c in args.clusters.split(",") if c]
    if not clusters or any(c not in CLUSTERS for c in clusters):
        p.error(f"--clusters takes a comma-separated subset of {', '.join(CLUSTERS)}, got {args.clusters!r}")
    batches, rows, keys, pairs = (3, 4_000, 2_000, 1) if args.quick else (20, 500_000, 1_000_000, 3)
    pairs = args.repeats or pairs
    sizes = {"batches": batches, "rows_per_batch": rows, "keyspace": keys, "partitions": PARTITIONS}
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, "statebed V2 vs Spark native RocksDB V2, count, one process per run", args, env)
        rep.params.update(**sizes, pairs=pairs, clusters=clusters, standalone="2 workers x 1 core, 1g, speculation on")
        metrics: dict[str, Any] = {}
        for cluster in clusters:
            runs: dict[str, list[dict[str, Any]]] = {"v2": [], "native": []}
            for i in range(pairs):
                for mode in ("native", "v2") if i % 2 == 0 else ("v2", "native"):
                    runs[mode].append(measure(env, cluster, mode, sizes, i))
            metrics[cluster] = report_cluster(rep, cluster, runs)
        rep.metrics.update(clusters=metrics, valid=all(r["valid"] for m in metrics.values() for rs in m["runs"].values() for r in rs))
        rep.headline = f"count, {keys:,} keys, {batches}x{rows:,}, {pairs} pair(s): " + "; ".join(
            f"{c}: statebed {m['median']['v2']:,.0f} rec/s vs native {m['median']['native']:,.0f} "
            f"({m['median']['v2'] / m['median']['native']:.2f}x, pairs {min(m['pair_ratios']):.2f}-{max(m['pair_ratios']):.2f}"
            + (f", cache hits {m['breakdown']['cache_hit_rate']:.0%})" if m["breakdown"] else ")")
            for c, m in metrics.items()
        )
        return rep.finish()


if __name__ == "__main__":
    main()
