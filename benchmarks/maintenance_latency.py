"""Commit latency with the job's maintenance on vs off (issue 27, measured part).

Each measurement is a fresh `statebed run` process (its own driver JVM) of `count` with small
batches, `--retain 20`: "on" runs a maintenance pass after every committed batch
(`--maintenance-interval 0`, the most it can run; `--interval S` for a pass every S seconds),
"off" never runs one (interval 86400 s).
The two alternate (pair i starts with "off" when i is even, "on" when odd). Latencies come from
the run's timing records (`<run>/timings/`), committed batches after the first `--warmup`:
the driver's commit (staging, commit log, sink) and each task's store commit (changelog
upload); the batch's wall time is reported too. Per pair the ratio on/off of each run's p50
and p99; the report gives the geometric mean of the pair ratios with a 95 % t interval
(`benchlib.paired_ratio_ci`) and the pooled percentiles. Goal on/off <= 1.05. An "on" run
must show passes that deleted files in `<run>/maintenance.jsonl`, an "off" run none (the final
pass a clean stop runs after the last batch, in both modes, is not counted: it is off every
commit's path).
The runs skip the verifiers (`--no-verify`): the soak verifies the same job.

    python benchmarks/maintenance_latency.py [--quick] [--json] [--repeats PAIRS] [--batches N (80)] [--warmup N (10)]
                                             [--interval S (0)] [--jsonl FILE]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib

from statebed_model.rundir import RunDir

NAME = "maintenance_latency"
GOAL = 1.05
OFF_INTERVAL = "86400"
# (label, where the samples are: the batch record or each task's phases, key)
METRICS = (("driver commit", "batch", "commit_s"), ("task store commit", "task", "commit_s"), ("batch wall", "batch", "seconds"))
GATED = ("driver commit", "task store commit")


def samples(run_dir: Path, warmup: int) -> dict[str, list[float]]:
    """Seconds per metric over the committed batches after `warmup` (the last record of each batch)."""
    last = {t["batch"]: t for t in RunDir(run_dir).timings() if t.get("status") == "committed"}
    rows = [last[b] for b in sorted(last) if b >= warmup]
    out: dict[str, list[float]] = {}
    for label, where, key in METRICS:
        if where == "batch":
            out[label] = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        else:
            out[label] = [float(p[key]) for r in rows for p in r.get("task_phases") or [] if isinstance(p.get(key), (int, float))]
    return out


def measure(env: benchlib.Env, mode: str, sizes: dict[str, int], warmup: int, i: int, interval: float = 0.0) -> dict[str, Any]:
    """One `statebed run` in its own process: its latency samples and its maintenance passes."""
    work = env.dir(f"{mode}-{i}")
    run_dir = work / "run"
    sized = [f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()]
    argv = ["run", "--run-dir", str(run_dir), "--workload", "count", *sized]
    argv += [f"--maintenance-interval={f'{interval:g}' if mode == 'on' else OFF_INTERVAL}", "--no-verify", "--json"]
    _, wall = benchlib.statebed_json(argv, f"{mode} run {i}")
    passes = [r for r in RunDir(run_dir).maintenance() if not r.get("final")]  # a clean stop's final pass runs in both modes
    out = {
        "mode": mode,
        "pair": i,
        "wall_s": round(wall, 1),
        "samples": samples(run_dir, warmup),
        "passes": len({r["pass_no"] for r in passes}),
        "files_deleted": sum(int(r.get("files_deleted") or 0) for r in passes),
        "pass_seconds_p50": round(benchlib.pct([r["seconds"] for r in passes], 50), 5) if passes else None,
    }
    env.remove(work)
    return out


def percentiles(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "p50_ms": round(benchlib.pct(xs, 50) * 1000, 3), "p99_ms": round(benchlib.pct(xs, 99) * 1000, 3)}


def report(rep: benchlib.Report, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Pooled percentiles per mode, and per metric the paired on/off ratios of p50 and p99."""
    pooled = {m: {label: percentiles([x for r in rs for x in r["samples"][label]]) for label, _, _ in METRICS} for m, rs in runs.items()}
    rows = [
        [label, pooled["off"][label]["n"], *(pooled[m][label][q] for m in ("off", "on") for q in ("p50_ms", "p99_ms"))]
        for label, _, _ in METRICS
    ]
    rep.table("pooled over the runs (ms)", ["latency", "n (off)", "off p50", "off p99", "on p50", "on p99"], rows)
    ratios: dict[str, Any] = {}
    for label, _, _ in METRICS:
        for q in ("p50_ms", "p99_ms"):
            on = [percentiles(r["samples"][label])[q] for r in runs["on"]]
            off = [percentiles(r["samples"][label])[q] for r in runs["off"]]
            gm, lo, hi = benchlib.paired_ratio_ci(on, off)
            name = f"{label} {q.removesuffix('_ms')} on/off"
            ratios[name] = {
                "geomean": round(gm, 4),
                "ci95": [round(lo, 4), round(hi, 4)],
                "pairs": [round(a / b, 4) for a, b in zip(on, off)],
            }
            gated = label in GATED
            note = f"geometric mean of {len(on)} pair ratios, 95% CI {lo:.3f}-{hi:.3f}"
            rep.ratio(name, gm, "<=" if gated else None, GOAL if gated else None, baseline="maintenance off, same pair", note=note)
    return {"pooled": pooled, "ratios": ratios}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = benchlib.parser(NAME, __doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=None, help="batches per run (default 80; quick 6)")
    p.add_argument("--warmup", type=int, default=None, help="first batches left out (default 10; quick 1)")
    p.add_argument("--interval", type=float, default=0.0, help="the 'on' runs' --maintenance-interval (default 0: after every batch)")
    p.add_argument("--jsonl", type=Path, default=None, help="append each finished run's row here")
    args = p.parse_args(argv)
    batches, warmup, pairs = (6, 1, 1) if args.quick else (80, 10, 5)
    batches, warmup, pairs = args.batches or batches, args.warmup if args.warmup is not None else warmup, args.repeats or pairs
    retain, snap = (2, 2) if args.quick else (20, 10)  # quick: a snapshot every 2 versions, so 6 batches have something to delete
    sizes = {"batches": batches, "rows_per_batch": 20, "keyspace": 200, "partitions": 2, "retain": retain, "snapshot_interval": snap}
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(
            NAME, f"commit latency, maintenance every {args.interval:g} s (0: every batch) vs none, one process per run", args, env
        )
        rep.params.update(**sizes, warmup=warmup, pairs=pairs, interval_on=args.interval, cluster="local[2]")
        runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
        for i in range(pairs):
            for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
                r = measure(env, mode, sizes, warmup, i, args.interval)
                runs[mode].append(r)
                line = f"pair {i} {mode}: {r['wall_s']} s, {r['passes']} passes, {r['files_deleted']} files deleted"
                benchlib.progress_row(
                    {k: v for k, v in r.items() if k != "samples"} | {"p": {k: percentiles(v) for k, v in r["samples"].items()}},
                    line,
                    args.jsonl,
                )
        res = report(rep, runs)
        evidence = all(r["passes"] > 0 and r["files_deleted"] > 0 for r in runs["on"]) and all(r["passes"] == 0 for r in runs["off"])
        rep.metrics.update(
            **res, evidence=evidence, runs={m: [{k: v for k, v in r.items() if k != "samples"} for r in rs] for m, rs in runs.items()}
        )
        d = res["ratios"]
        rep.headline = (
            f"{pairs} pair(s) x {batches} batches: driver commit p50 {d['driver commit p50 on/off']['geomean']:.3f}x, "
            f"p99 {d['driver commit p99 on/off']['geomean']:.3f}x; task commit p50 {d['task store commit p50 on/off']['geomean']:.3f}x, "
            f"p99 {d['task store commit p99 on/off']['geomean']:.3f}x (on/off); maintenance evidence {evidence}"
        )
        return rep.finish()


if __name__ == "__main__":
    main()
