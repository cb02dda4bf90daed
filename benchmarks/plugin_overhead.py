"""The JVM failpoint plug-in unarmed: Spark's own store with and without it, `count`.

`native` is Spark's RocksDB store, checkpoint format V2, with Spark's default checkpoint file
manager; `native-v2` is the same store and format with the plug-in loaded (`spark.jars`, its
`checkpointFileManagerClass` and wrapping `FileSystem`) and nothing armed: every changelog,
zip, SST, offset- and commit-log write goes through its pass-through. Each run is a fresh
`statebed run` process (its own driver JVM); the modes alternate (pair i starts with the
plug-in when i is odd). Per pair: the plug-in's time per batch over the plain store's
(steady batches, the first one excluded), then the geometric mean of the pairs and its 95%
t interval. Goal ≤ 1.02. Every run is verified (lineage + state and the two readers).

    python benchmarks/plugin_overhead.py [--quick] [--json] [--repeats PAIRS]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib

NAME = "plugin_overhead"
GOAL = 1.02
MODES = {"plain": ["--native"], "plugin": ["--format", "native-v2"]}


def measure(env: benchlib.Env, mode: str, sizes: dict[str, int], i: int) -> dict[str, Any]:
    """One `statebed run` in its own process: steady seconds per batch, wall time, verdicts."""
    work = env.dir(f"{mode}-{i}")
    sized = [f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()]
    argv = ["run", "--run-dir", str(work / "run"), "--workload", "count", *sized, "--json", *MODES[mode]]
    s, wall = benchlib.statebed_json(argv, f"{mode} run {i}", timeout_s=3600)
    out = {
        "batch_s": sizes["rows_per_batch"] / s["steady_records_per_s"],
        "p50_s": s["batch_p50_s"],
        "p99_s": s["batch_p99_s"],
        "wall_s": round(wall, 2),
        "valid": all(v["valid"] is True for v in s["verdicts"].values()),
    }
    env.remove(work)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = benchlib.parser(NAME, __doc__.split("\n\n")[0]).parse_args(argv)
    batches, rows, keys, pairs = (3, 2_000, 500, 1) if args.quick else (20, 20_000, 5_000, 8)
    pairs = args.repeats or pairs
    sizes = {"batches": batches, "rows_per_batch": rows, "keyspace": keys, "partitions": 4}
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, "Spark's store with the unarmed failpoint plug-in vs without, count", args, env)
        rep.params.update(**sizes, pairs=pairs, cluster="local[2]", format="Spark checkpoint format V2")
        runs: dict[str, list[dict[str, Any]]] = {"plain": [], "plugin": []}
        for i in range(pairs):
            for mode in ("plain", "plugin") if i % 2 == 0 else ("plugin", "plain"):
                runs[mode].append(measure(env, mode, sizes, i))
                r = runs[mode][-1]
                benchlib.progress_row(r, f"pair {i} {mode}: {r['batch_s']:.3f} s/batch, valid {r['valid']}", None)
        ratio, lo, hi = benchlib.paired_ratio_ci([r["batch_s"] for r in runs["plugin"]], [r["batch_s"] for r in runs["plain"]])
        rows_ = [
            [
                m,
                len(rs),
                benchlib.median([r["batch_s"] for r in rs]),
                benchlib.median([r["p99_s"] for r in rs]),
                all(r["valid"] for r in rs),
            ]
            for m, rs in runs.items()
        ]
        rep.table(
            "steady seconds per batch, one process per run, modes alternating", ["mode", "runs", "median s", "p99 s", "all valid"], rows_
        )
        ci = f"95% CI [{lo:.3f}, {hi:.3f}]" if benchlib.finite(lo) else "one pair: no interval"
        rep.ratio(
            "plug-in/plain seconds per batch (geometric mean of pairs)",
            ratio,
            "<=",
            GOAL,
            baseline="native V2 without the plug-in",
            note=ci,
        )
        rep.metrics.update(runs=runs, ratio=ratio, ci95=[lo, hi], valid=all(r["valid"] for rs in runs.values() for r in rs))
        rep.headline = f"native count {batches}x{rows:,}, {pairs} pair(s): plug-in/plain {ratio:.3f}x ({ci})"
        return rep.finish()


if __name__ == "__main__":
    main()
