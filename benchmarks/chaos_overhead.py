"""The chaos harness's own cost: a fault-free experiment vs plain `statebed run`, same sizes.

Three modes, each a fresh process (its own driver JVM): `run` is `statebed run` (job, then
both verifiers); `experiment` is `statebed chaos run` of the same job with no faults and
the verifiers lineage, state and attempts (the job as a subprocess, the nemesis thread,
the history, the attempts check: the harness without the baseline); `cell` is the same
experiment with the fault-free baseline too, which is what one matrix cell costs. The
modes rotate (round i starts with mode i mod 3) so no mode always runs on a warmer machine;
`--quick` (the smoke test) leaves out `cell`.
Wall time is the process's, start to exit. The ratio experiment/run is the harness
overhead (goal <= 1.5: the harness should cost less than half a run more); cell/run the
price of the baseline (reported). Every run must be valid.

    python benchmarks/chaos_overhead.py [--quick] [--json] [--repeats N]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib

NAME = "chaos_overhead"
MODES = ("run", "experiment", "cell")
GOAL = 1.5
CHECKS = {"experiment": ["lineage", "state", "attempts"], "cell": ["lineage", "state", "attempts", "baseline"]}


def experiment_file(work: Path, mode: str, sizes: dict[str, int], seed: int) -> Path:
    """A fault-free experiment of the given sizes (JSON is YAML)."""
    doc = {"name": f"overhead-{mode}", "workload": "count", "format": "v2", "cluster": "local", **sizes}
    doc.update(seed=seed, faults=[], verifiers=CHECKS[mode])
    path = work / "experiment.yaml"
    path.write_text(json.dumps(doc))
    return path


def command(work: Path, mode: str, sizes: dict[str, int], seed: int) -> list[str]:
    if mode == "run":
        sized = [f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()]
        return ["run", "--run-dir", str(work / "run"), "--workload", "count", f"--seed={seed}", *sized, "--json"]
    return ["chaos", "run", str(experiment_file(work, mode, sizes, seed)), "--out", str(work / "exp"), "--json"]


def valid(mode: str, doc: dict[str, Any]) -> bool:
    if mode == "run":
        return all(v["valid"] is True for v in doc["verdicts"].values())
    return doc.get("valid") is True


def measure(env: benchlib.Env, mode: str, sizes: dict[str, int], seed: int, i: int) -> dict[str, Any]:
    """One process of one mode; its wall time and whether its verdict was valid."""
    work = env.dir(f"{mode}-{i}")
    doc, wall = benchlib.statebed_json(command(work, mode, sizes, seed), f"{mode} run {i}", timeout_s=3600)
    out = {"wall_s": round(wall, 2), "valid": valid(mode, doc)}
    env.remove(work)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = benchlib.parser(NAME, __doc__.split("\n\n")[0]).parse_args(argv)
    batches, rows, keys, rounds = (2, 500, 100, 1) if args.quick else (6, 20_000, 2_000, 3)
    rounds = args.repeats or rounds
    sizes = {"batches": batches, "rows_per_batch": rows, "keyspace": keys, "partitions": 2}
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, "the chaos harness: a fault-free experiment vs plain statebed run", args, env)
        rep.params.update(**sizes, rounds=rounds, cluster="local[2]", workload="count", format="v2")
        modes = MODES[:2] if args.quick else MODES
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        for i in range(rounds):
            for k in range(len(modes)):
                mode = modes[(i + k) % len(modes)]
                runs[mode].append(measure(env, mode, sizes, args.seed % 100_000, i))
        med = {m: benchlib.median([r["wall_s"] for r in rs]) for m, rs in runs.items()}
        rows_ = [
            [m, len(rs), med[m], min(r["wall_s"] for r in rs), max(r["wall_s"] for r in rs), all(r["valid"] for r in rs)]
            for m, rs in runs.items()
        ]
        rep.table("wall seconds per process, modes rotating", ["mode", "runs", "median s", "min", "max", "all valid"], rows_)
        rep.ratio("experiment/run wall (harness overhead)", med["experiment"] / med["run"], "<=", GOAL, baseline="plain statebed run")
        if "cell" in med:
            rep.ratio("cell/run wall (harness + fault-free baseline)", med["cell"] / med["run"], None, None, baseline="plain statebed run")
        rep.metrics.update(runs=runs, median_wall_s=med, valid=all(r["valid"] for rs in runs.values() for r in rs))
        rep.headline = (
            f"count {batches}x{rows:,}, {rounds} round(s): run {med['run']:.1f} s, experiment {med['experiment']:.1f} s "
            f"({med['experiment'] / med['run']:.2f}x)"
            + (f", cell with baseline {med['cell']:.1f} s ({med['cell'] / med['run']:.2f}x)" if "cell" in med else "")
        )
        return rep.finish()


if __name__ == "__main__":
    main()
