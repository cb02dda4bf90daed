"""How often each fault kind of the catalogue provably fires when scheduled (issue 24 #19).

A fault that misses a live target makes its run `unknown`: honest, but a catalogue whose
faults miss has no power. This runs every kind (or `--kinds`) over seeds 1..N as the nightly
matrix schedules it (`matrix_presets.FAULTS`: trigger batch, duration, params, companions, cluster,
storage; the full preset's sizes), one `statebed chaos run` per (kind, seed), and prints per
kind: fired / N, the verdicts, and the detail of every miss. The goal is >= 9/10 per kind.

Only firing is measured, so the fault-free baseline is left out (`--with-baseline` keeps it).
Each run starts Spark: `--lock FILE` runs it under `flock FILE` (one Spark at a time on a
shared machine; the lock is held per run, not for the whole loop).

    python benchmarks/fault_firing.py [--kinds a,b] [--seeds N | --seed-list 1,5] [--workload count]
        [--format v2] [--lock /tmp/statebed-spark.lock] [--jsonl FILE] [--workdir DIR] [--json]
    python benchmarks/fault_firing.py --table-from FILE   # the table of every run a --jsonl file holds
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib

from statebed_base.processes import run_to_end
from statebed_chaos.faults import KINDS
from statebed_chaos.matrix_presets import PRESETS, plan_cells

GOAL = 0.9


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks/fault_firing.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated fault kinds (default: the whole catalogue)")
    p.add_argument("--seeds", type=int, default=10, help="seeds 1..N per kind (default 10)")
    p.add_argument("--seed-list", default=None, help="explicit comma-separated seeds instead of 1..N")
    p.add_argument("--workload", default="count")
    p.add_argument("--format", default="v2", choices=("v1", "v2", "native"))
    p.add_argument("--with-baseline", action="store_true", help="also run each experiment's fault-free baseline")
    p.add_argument("--lock", default=None, help="run each Spark run under `flock LOCK`")
    p.add_argument("--jsonl", type=Path, default=None, help="append one JSON line per run to this file")
    p.add_argument("--workdir", type=Path, default=None, help="where runs go (default: a temp dir, kept)")
    p.add_argument("--json", action="store_true", help="print the table as one JSON object on stdout")
    p.add_argument("--table-from", type=Path, default=None, help="run nothing: print the table of the runs in this --jsonl file")
    return p.parse_args(argv)


def experiments(args: argparse.Namespace, kind: str, seeds: list[int]) -> list[Any]:
    """The matrix's cell for `kind` on the workload and format, one per seed (a usage error if the kind does not apply)."""
    cells, skipped = plan_cells(PRESETS["full"], max(seeds), faults=[kind], workloads=[args.workload], formats=[args.format])
    if skipped:
        raise SystemExit(f"{kind}: {skipped[0].reason}")
    out = []
    for cell in cells:
        if cell.seed not in seeds:
            continue
        exp = cell.experiment
        if not args.with_baseline:
            exp = replace(exp, verifiers=tuple(v for v in exp.verifiers if v != "baseline"))
        out.append(exp)
    return out


def run_one(args: argparse.Namespace, exp: Any, work: Path) -> dict[str, Any]:
    """One `statebed chaos run`; what its verdict says of the fault under test."""
    path = work / f"{exp.name}-s{exp.seed}.yaml"
    path.write_text(exp.to_yaml())
    out = work / f"{exp.name}-s{exp.seed}"
    cmd = [sys.executable, "-m", "statebed_cli.main", "chaos", "run", str(path), "--out", str(out), "--json"]
    if args.lock:
        cmd = ["flock", args.lock, *cmd]
    t0 = time.monotonic()
    proc = run_to_end(cmd)
    seconds = round(time.monotonic() - t0, 1)
    verdict_path = out / "verdict.json"
    if not verdict_path.is_file():
        return {"fired": None, "valid": "no verdict", "detail": proc.stderr.strip()[-300:], "seconds": seconds, "out": str(out)}
    verdict = json.loads(verdict_path.read_text())
    kind = exp.faults[0].kind
    mine = [f for f in verdict.get("faults", []) if f.get("kind") == kind]
    fault = mine[0] if mine else {}
    return {
        "fired": fault.get("fired"),
        "valid": verdict.get("valid"),
        "detail": str(verdict.get("error") or fault.get("detail"))[:300],  # a harness error first: the run did not happen
        "seconds": seconds,
        "out": str(out),
    }


def table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per kind: fired / runs, the verdicts, the misses."""
    out = []
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind]
        fired = sum(1 for r in mine if r["fired"] is True)
        verdicts = Counter(str(r["valid"]) for r in mine)
        misses = [f"s{r['seed']}: {r['detail']}" for r in mine if r["fired"] is not True]
        out.append(
            {
                "kind": kind,
                "fired": fired,
                "runs": len(mine),
                "met": fired >= GOAL * len(mine),
                "verdicts": dict(verdicts),
                "misses": misses,
            }
        )
    return out


def report(summary: list[dict[str, Any]]) -> str:
    lines = ["| fault kind | fired / runs | verdicts | goal >= 9/10 |", "|---|---|---|---|"]
    for s in summary:
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(s["verdicts"].items()))
        goal = "MISSED" if not s["met"] else "met" if s["runs"] >= 10 else "no miss yet (fewer than 10 runs)"
        lines.append(f"| {s['kind']} | {s['fired']} / {s['runs']} | {verdicts} | {goal} |")
    for s in summary:
        lines += [f"  {s['kind']} miss {m}" for m in s["misses"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.table_from is not None:
        print(report(table([json.loads(line) for line in args.table_from.read_text().splitlines() if line.strip()])))
        return 0
    seeds = [int(s) for s in args.seed_list.split(",")] if args.seed_list else list(range(1, args.seeds + 1))
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise SystemExit(f"--kinds: unknown fault kind(s) {', '.join(unknown)} (known: {', '.join(KINDS)})")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="fault-firing-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for kind in kinds:
        for exp in experiments(args, kind, seeds):
            row = {"kind": kind, "seed": exp.seed, "workload": args.workload, "format": args.format, **run_one(args, exp, work)}
            rows.append(row)
            line = f"{kind} seed {exp.seed}: fired {row['fired']}, {row['valid']} ({row['seconds']} s) {row['detail'][:160]}"
            benchlib.progress_row(row, line, args.jsonl)
    summary = table(rows)
    if args.json:
        print(json.dumps({"benchmark": "fault_firing", "goal": GOAL, "runs": rows, "kinds": summary}, indent=2))
    else:
        print(report(summary))
    print(f"runs kept in {work}", file=sys.stderr)
    return 0 if all(s["met"] for s in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
