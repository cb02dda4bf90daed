"""The job: statebed's V2 store vs Spark's native RocksDB V2 store, same query and data.

`count` over a key space of 1M keys, 20 batches of 500k records (full mode), Spark
`local[2]`, 4 state partitions, both runs in this process one after the other (native
first, then statebed; each in a fresh SparkSession and run directory). Throughput is
records over the sum of Spark's per-batch trigger durations; latency p50/p99 per batch.
Both runs are verified (lineage + state) so a fast wrong answer cannot pass. Goal
statebed/native >= 1.0 (first bar 0.5). Where the time goes: statebed's per-batch
timings split the batch into the input log, the Spark job of the state tasks (and inside
it the tasks' own load/apply/commit seconds) and the driver's commit (staging, commit
log, sink).

    python benchmarks/job_throughput.py [--quick] [--json]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib

from statebed_job.config import JobOptions
from statebed_job.runner import run_job

NAME = "job_throughput"
GOAL = 1.0


def breakdown(run_dir: Path) -> dict[str, float]:
    """Median per-batch seconds of each phase of statebed's batches (first batch excluded: warm-up)."""
    rows = [json.loads(x) for x in (run_dir / "timings.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("status") == "committed" and "tasks_s" in r][1:]
    if not rows:
        return {}

    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 4)

    phases = [ph for r in rows for ph in r.get("task_phases", [])]

    def med_phase(key: str) -> float:
        return round(statistics.median(ph[key] for ph in phases), 4) if phases else 0.0

    return {
        "batch_s": med("seconds"),
        "task_load_s": med_phase("load_s"),
        "task_apply_s": med_phase("apply_s"),
        "task_commit_s": med_phase("commit_s"),
        "cache_hit_rate": round(sum(ph["cache_hit"] for ph in phases) / len(phases), 3) if phases else 0.0,
        "input_log_s": med("input_s"),
        "state_job_s": med("tasks_s"),
        "task_max_s": round(statistics.median(max(r["task_seconds"]) for r in rows), 4),
        "driver_commit_s": med("commit_s"),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = benchlib.parser(NAME, __doc__.split("\n\n")[0]).parse_args(argv)
    batches, rows, keys = (3, 20_000, 20_000) if args.quick else (20, 500_000, 1_000_000)
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, "statebed V2 vs Spark native RocksDB V2, count, local[2]", args, env)
        rep.params.update(batches=batches, rows_per_batch=rows, keyspace=keys, partitions=4, master="local[2]")
        results: dict[str, Any] = {}
        dirs: dict[str, Path] = {}
        for mode in ("native", "v2"):
            opts = JobOptions(workload="count", mode=mode, batches=batches, rows_per_batch=rows, keyspace=keys, partitions=4)  # type: ignore[arg-type]
            dirs[mode] = env.dir(f"run-{mode}") / "run"
            t0 = time.perf_counter()
            results[mode] = run_job(dirs[mode], opts, progress=False)
            results[mode].seconds = round(time.perf_counter() - t0, 2)
        rows_out = []
        for mode, s in results.items():
            v = s.verdicts
            rows_out.append(
                [
                    mode,
                    s.records,
                    s.records_per_s,
                    s.steady_records_per_s,
                    s.batch_p50_s,
                    s.batch_p99_s,
                    s.seconds,
                    v["lineage"]["valid"],
                    v["state"]["valid"],
                ]
            )
        rep.table("runs", ["mode", "records", "records/s", "steady rec/s", "p50 s", "p99 s", "wall s", "lineage", "state"], rows_out)
        parts = breakdown(dirs["v2"])
        if parts:
            rep.table("statebed batch, median seconds per phase (batches 2..n)", list(parts), [list(parts.values())])
        nat, sb = results["native"], results["v2"]
        rep.ratio(
            "statebed/native steady records/s",
            sb.steady_records_per_s / nat.steady_records_per_s,
            ">=",
            GOAL,
            baseline="native RocksDB V2",
            note="batches 2..n; first bar 0.5",
        )
        rep.ratio("statebed/native records/s, all batches", sb.records_per_s / nat.records_per_s, None, None, baseline="native RocksDB V2")
        if nat.batch_p50_s and sb.batch_p50_s:
            rep.ratio("p50 batch latency statebed/native", sb.batch_p50_s / nat.batch_p50_s, None, None, baseline="native p50")
        if nat.batch_p99_s and sb.batch_p99_s:
            rep.ratio("p99 batch latency statebed/native", sb.batch_p99_s / nat.batch_p99_s, None, None, baseline="native p99")
        rep.metrics.update(
            runs={m: s.to_json() for m, s in results.items()},
            breakdown=parts,
            valid=all(v["valid"] is True for s in results.values() for v in s.verdicts.values()),
        )
        rep.headline = (
            f"count, {keys:,} keys, {batches}x{rows:,}: statebed {sb.steady_records_per_s:,.0f} rec/s (p50 {sb.batch_p50_s} s), "
            f"native {nat.steady_records_per_s:,.0f} rec/s (p50 {nat.batch_p50_s} s)"
        )
        return rep.finish()


if __name__ == "__main__":
    main()
