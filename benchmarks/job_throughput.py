"""The job: statebed's V2 store vs Spark's native RocksDB V2 store, same query and data.

`count` over a key space of 1M keys, 20 batches of 500k records, 4 state partitions
(full mode), on Spark `local[2]` and on a standalone cluster of 2 one-core workers, with
the checkpoint on local disk or (`--storage s3`) in MinIO (`install/`'s, started here unless
`--s3-endpoint` names one). Every measurement is a fresh process (its own driver JVM and,
standalone, its own cluster): no mode profits from a JVM or OS cache the other one warmed.
The modes alternate (pair i runs native first when i is even, statebed first when odd), 5
pairs per cluster. On local[2] with local disk a third mode runs in each round: the
no-durability probe (`probe_job.py`, `../shared/DESIGN.md` §4), the ceiling.

Ratios are geometric means of the per-pair ratios with 95% t intervals
(`benchlib.paired_ratio_ci`): batch throughput (records over the sum of the batches'
trigger durations, batches 2..n, "steady"), whole-process wall (native's wall over
statebed's: the process start to its exit, verification included) and statebed over the
probe. Every run is verified (statebed's and native's: lineage + state; the probe: its final
counts against the source), so a fast wrong answer cannot pass. Goals (issue 41): >= 2.0x native
by throughput and >= 1.8x by wall on local disk, >= 1.5x on MinIO, >= 0.9 of the probe. For
statebed, the batch's phases (input log, the Spark job of the state tasks, inside it the tasks'
load/apply/commit, the driver's commit) and the executor-cache hit rate: a task that rebuilt
nothing from storage and replayed no changelog it had applied (its partition open in its Python
worker at the base, or caught up by the changelogs committed since), and the exact hits alone.

    python benchmarks/job_throughput.py [--quick] [--json] [--repeats PAIRS] [--clusters local,standalone] [--storage local|s3]
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib

from statebed_model.rundir import RunDir
from statebed_store.config import S3Settings

NAME = "job_throughput"
GOALS = {  # storage -> (throughput, wall) goals of statebed over native (issue 41)
    "local": (2.0, 1.8),
    "s3": (1.5, 1.5),
}
PROBE_GOAL = 0.9  # statebed's throughput over the no-durability probe's
MODES = {"native": ["--native"], "v2": []}
CLUSTERS = {"local": [], "standalone": ["--cluster", "standalone", "--workers", "2"]}
PARTITIONS = 4
PROBE = Path(__file__).resolve().parent / "probe_job.py"


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
        "input_wait_s": med([r.get("input_wait_s", r["input_s"]) for r in rows]),  # on the critical path (before: all of it)
        "state_job_s": med([r["tasks_s"] for r in rows]),
        "task_max_s": med([max(r["task_seconds"]) for r in rows]),
        "task_load_s": med([ph["load_s"] for ph in phases]),
        "task_apply_s": med([ph["apply_s"] for ph in phases]),
        "task_commit_s": med([ph["commit_s"] for ph in phases]),
        "driver_commit_s": med([r["commit_s"] for r in rows]),
        # a hit rebuilt nothing from storage and replayed no changelog it had applied: open at the base, or caught up
        "cache_hit_rate": round(sum(ph["cache_hit"] + ph.get("caught_up", 0.0) for ph in phases) / len(phases), 3),
        "exact_hit_rate": round(sum(ph["cache_hit"] for ph in phases) / len(phases), 3),
        "borrowed_rate": round(sum(ph.get("borrowed", 0.0) for ph in phases) / len(phases), 3),  # from another worker's copy
        "resumed_rate": round(sum(ph.get("resumed", 0.0) for ph in phases) / len(phases), 3),  # from a dead worker's instance
    }


def measure(env: benchlib.Env, cluster: str, mode: str, sizes: dict[str, int], i: int, s3: S3Settings | None) -> dict[str, Any]:
    """One run in its own process (`statebed run`, or the probe); its summary, wall time and (statebed) breakdown."""
    work = env.dir(f"{cluster}-{mode}-{i}")
    sized = [f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()]
    if mode == "probe":
        s, wall = benchlib.json_process([sys.executable, str(PROBE), str(work), *sized], f"{cluster} probe run {i}")
    else:
        where = [] if s3 is None else [f"--checkpoint=s3://{env.args.s3_bucket}/{env.run_id}/{cluster}-{mode}-{i}", *s3_flags(s3)]
        argv = ["run", "--run-dir", str(work / "run"), "--workload", "count", *sized, "--json", *MODES[mode], *CLUSTERS[cluster], *where]
        s, wall = benchlib.statebed_json(argv, f"{cluster} {mode} run {i}")
    out = {
        "steady_records_per_s": s["steady_records_per_s"],
        "records_per_s": s["records_per_s"],
        "p50_s": s["batch_p50_s"],
        "p99_s": s["batch_p99_s"],
        "wall_s": round(wall, 2),
        "valid": all(v["valid"] is True for v in s["verdicts"].values()),
        "breakdown": breakdown(work / "run") if mode == "v2" else {},
    }
    env.remove(work)
    return out


def s3_flags(s3: S3Settings) -> list[str]:
    return [f"--s3-endpoint={s3.endpoint}", f"--s3-access-key={s3.access_key}", f"--s3-secret-key={s3.secret_key}"]


def spread(xs: Sequence[float]) -> tuple[float, float, float]:
    return benchlib.median(xs), min(xs), max(xs)


def _ci(rep: benchlib.Report, name: str, num: list[float], den: list[float], goal: float | None, baseline: str) -> dict[str, Any]:
    """A paired ratio with its 95% interval, as a goal line of the report; the numbers."""
    mean, lo, hi = benchlib.paired_ratio_ci(num, den)
    shown = f"95% CI {lo:.2f}-{hi:.2f}" if benchlib.finite(lo) else "one pair: no interval"
    rep.ratio(name, mean, ">=" if goal else None, goal, baseline=baseline, note=f"geometric mean of {len(num)} pair(s), {shown}")
    return {"ratio": round(mean, 4), "ci95": [round(lo, 4), round(hi, 4)] if benchlib.finite(lo) else None}


def report_cluster(rep: benchlib.Report, cluster: str, storage: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Tables and ratios of one cluster's pairs; returns its metrics."""
    where = f"{cluster}, {storage}"
    rows = []
    for mode, rs in runs.items():
        med, lo, hi = spread([r["steady_records_per_s"] for r in rs])
        hits = [r["breakdown"]["cache_hit_rate"] for r in rs if r["breakdown"]]
        p50, p99 = benchlib.median([r["p50_s"] for r in rs]), benchlib.median([r["p99_s"] for r in rs])
        hit = f"{benchlib.median(hits):.0%}" if hits else "-"
        rows.append([mode, len(rs), med, lo, hi, p50, p99, benchlib.median([r["wall_s"] for r in rs]), all(r["valid"] for r in rs), hit])
    headers = ["mode", "runs", "steady rec/s (median)", "min", "max", "p50 s", "p99 s", "wall s", "all valid", "cache hits"]
    rep.table(f"{where}: one process per run, modes alternating", headers, rows)
    thr_goal, wall_goal = GOALS[storage]
    sb, nat = ([r["steady_records_per_s"] for r in runs[m]] for m in ("v2", "native"))
    ratios = {
        "throughput": _ci(rep, f"statebed/native steady records/s, {where}", sb, nat, thr_goal, f"native RocksDB V2, {where}"),
        "wall": _ci(
            rep,
            f"native/statebed whole-process wall, {where}",
            [r["wall_s"] for r in runs["native"]],
            [r["wall_s"] for r in runs["v2"]],
            wall_goal,
            f"native RocksDB V2, {where}",
        ),
    }
    if runs.get("probe"):
        ratios["of_probe"] = _ci(
            rep,
            f"statebed/probe steady records/s, {where}",
            sb,
            [r["steady_records_per_s"] for r in runs["probe"]],
            PROBE_GOAL,
            f"the no-durability probe, {where}",
        )
    latency = [benchlib.median([r["p50_s"] for r in runs[m]]) for m in ("v2", "native")]
    if all(latency):
        rep.ratio(f"p50 batch latency statebed/native, {where}", latency[0] / latency[1], None, None, baseline=f"native p50, {where}")
    parts = [r["breakdown"] for r in runs["v2"] if r["breakdown"]]
    merged = {k: benchlib.median([p[k] for p in parts]) for k in parts[0]} if parts else {}
    if merged:
        rep.table(f"{where}: statebed batch, median seconds per phase (batches 2..n)", list(merged), [list(merged.values())])
    pair = [a / b for a, b in zip(sb, nat, strict=True)]
    medians = {m: benchlib.median([r["steady_records_per_s"] for r in rs]) for m, rs in runs.items() if rs}
    return {"runs": runs, "pair_ratios": [round(x, 4) for x in pair], "median": medians, "ratios": ratios, "breakdown": merged}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = benchlib.parser(NAME, __doc__.split("\n\n")[0])
    p.add_argument("--clusters", default="local,standalone", help="comma-separated: local, standalone")
    args = p.parse_args(argv)
    clusters = [c for c in args.clusters.split(",") if c]
    if not clusters or any(c not in CLUSTERS for c in clusters):
        p.error(f"--clusters takes a comma-separated subset of {', '.join(CLUSTERS)}, got {args.clusters!r}")
    batches, rows, keys, pairs = (3, 4_000, 2_000, 1) if args.quick else (20, 500_000, 1_000_000, 5)
    pairs = args.repeats or pairs
    sizes = {"batches": batches, "rows_per_batch": rows, "keyspace": keys, "partitions": PARTITIONS}
    with benchlib.environment(args, NAME) as env, _s3(env) as s3:
        storage = env.storage_kind
        rep = benchlib.Report(NAME, "statebed V2 vs Spark native RocksDB V2, count, one process per run", args, env)
        rep.params.update(**sizes, pairs=pairs, clusters=clusters, standalone="2 workers x 1 core, 1g, speculation on")
        metrics: dict[str, Any] = {}
        for cluster in clusters:
            modes = ["native", "v2", *(["probe"] if cluster == "local" and storage == "local" else [])]
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
            for i in range(pairs):
                for mode in modes if i % 2 == 0 else modes[::-1]:
                    runs[mode].append(measure(env, cluster, mode, sizes, i, s3))
                    benchlib.progress_row({}, f"{cluster} {storage} pair {i + 1}/{pairs}: {mode} {runs[mode][-1]['wall_s']} s", None)
            metrics[cluster] = report_cluster(rep, cluster, storage, runs)
        rep.metrics.update(
            storage=storage, clusters=metrics, valid=all(r["valid"] for m in metrics.values() for rs in m["runs"].values() for r in rs)
        )
        rep.headline = f"count, {keys:,} keys, {batches}x{rows:,}, {pairs} pair(s), {storage}: " + "; ".join(
            f"{c}: statebed {m['median']['v2']:,.0f} rec/s vs native {m['median']['native']:,.0f} "
            f"({m['ratios']['throughput']['ratio']:.2f}x by throughput, {m['ratios']['wall']['ratio']:.2f}x by wall"
            + (f", {m['ratios']['of_probe']['ratio']:.2f} of the probe" if "of_probe" in m["ratios"] else "")
            + (f", cache hits {m['breakdown']['cache_hit_rate']:.0%})" if m["breakdown"] else ")")
            for c, m in metrics.items()
        )
        return rep.finish()


@contextlib.contextmanager
def _s3(env: benchlib.Env) -> Iterator[S3Settings | None]:
    """The S3 settings of `--storage s3`: `--s3-endpoint`'s (or the environment's), else a MinIO started here and stopped after."""
    if env.storage_kind != "s3":
        yield None
        return
    if env.args.s3_endpoint or os.environ.get("STATEBED_S3_ENDPOINT"):
        yield S3Settings.from_env(endpoint=env.args.s3_endpoint)
        return
    from statebed_chaos.infra.minio_server import ACCESS_KEY, SECRET_KEY, start_s3_server

    server = start_s3_server(env.dir("s3"))
    try:
        yield S3Settings(server.endpoint, ACCESS_KEY, SECRET_KEY)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
