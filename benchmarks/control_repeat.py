"""Run each V1 positive control many times in a row: a control that sometimes passes is not a
control (issue 24 #18). Outside `make test`: each repetition is a real Spark run.

Controls: the pytest tests asserting a V1 experiment is caught, the example experiments
whose comment says "Expected: invalid", and the quick matrix's V1 cell. A repetition counts as caught only when the test
passed (it asserts the fault fired and the verdict is false) or the experiment's verdict is
false with its fault fired; anything else is listed with its reason.
`--lock FILE` runs each repetition under `flock FILE` (one Spark at a time on a shared machine).

    python benchmarks/control_repeat.py [--controls a,b] [--repeats 20] [--lock /tmp/statebed-spark.lock]
        [--jsonl FILE] [--workdir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib

from statebed_base.processes import run_to_end
from statebed_chaos.matrix import fault_caused

ROOT = Path(__file__).resolve().parents[1]
TESTS = {
    "zombie-upload-v1-test": "tests/chaos/test_failpoint_faults.py::test_zombie_upload_v1_is_caught",
}
EXPERIMENTS = {
    "zombie-upload-v1-example": "examples/experiments/zombie-upload-sample3-v1.yaml",
    "zombie-upload-snapshot-v1-example": "examples/experiments/zombie-upload-snapshot-sample3-v1.yaml",
    "rewind-reprocess-v1-example": "examples/experiments/rewind-reprocess-sample3-v1.yaml",
}
# the quick matrix's V1 control cell, run as `make test` runs it (narrowed to that one cell)
MATRIX_CELLS = {"quick-matrix-v1-cell": ["--quick", "--faults", "zombie-upload", "--workloads", "sample3", "--formats", "v1"]}


KNOWN = [*TESTS, *EXPERIMENTS, *MATRIX_CELLS]


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks/control_repeat.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--controls", default=",".join(TESTS), help=f"comma-separated, of: {', '.join(KNOWN)}")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--lock", default=None, help="run each repetition under `flock LOCK`")
    p.add_argument("--jsonl", type=Path, default=None, help="append one JSON line per repetition to this file")
    p.add_argument("--workdir", type=Path, default=None, help="where experiment runs go (default: a temp dir, kept)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout")
    return p.parse_args(argv)


def _locked(args: argparse.Namespace, cmd: list[str]) -> list[str]:
    return ["flock", args.lock, *cmd] if args.lock else cmd


def run_test(args: argparse.Namespace, test: str, out: Path) -> dict[str, Any]:
    """One pytest run of `test`; its tmp_path under `out` (kept: pytest's own keeps three sessions)."""
    cmd = _locked(args, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", f"--basetemp={out}", test])
    proc = run_to_end(cmd, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("E ") or " passed" in ln or " failed" in ln]
    return {"caught": proc.returncode == 0, "why": " | ".join(lines[-3:])[:400]}


def run_experiment(args: argparse.Namespace, path: str, out: Path) -> dict[str, Any]:
    cmd = _locked(args, [sys.executable, "-m", "statebed_cli.main", "chaos", "run", str(ROOT / path), "--out", str(out), "--json"])
    proc = run_to_end(cmd, cwd=ROOT)
    return judged(out / "verdict.json", proc)


def run_matrix_cell(args: argparse.Namespace, flags: list[str], out: Path) -> dict[str, Any]:
    """The matrix narrowed to one V1 cell (it exits 1 itself: no V2 cell proves anything); its cell's verdict."""
    cmd = _locked(args, [sys.executable, "-m", "statebed_cli.main", "chaos", "matrix", *flags, "--keep", "--no-report", "--out", str(out)])
    proc = run_to_end(cmd, cwd=ROOT)
    cells = sorted(out.glob("*/verdict.json"))
    if len(cells) != 1:
        return {"caught": False, "why": f"{len(cells)} cell verdicts (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"}
    return judged(cells[0], proc)


def judged(verdict_path: Path, proc: subprocess.CompletedProcess[str] | None = None) -> dict[str, Any]:
    """Caught: the verdict is invalid, every fault fired, and an anomaly the faults can answer for
    (the matrix's rule, `fault_caused`: with a baseline invalid on its own, e.g. V1 under
    speculation alone, only one in the state after a batch a fault struck)."""
    if not verdict_path.is_file():
        got = f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}" if proc else "not run"
        return {"caught": False, "why": f"no verdict ({got})"}
    v = json.loads(verdict_path.read_text())
    fired = all(f.get("fired") is True for f in v.get("faults", []))
    base = v.get("checks", {}).get("baseline", {}).get("verdicts", {})
    itself = sorted(k for k, b in base.items() if isinstance(b, dict) and b.get("valid") is False)
    kinds = sorted({a.get("kind") for a in v.get("anomalies", [])})
    why = f"valid {v.get('valid')}, fired {fired}, baseline itself invalid {itself or 'no'}, anomalies {kinds}"
    struck = {int(f.get("at", {}).get("batch", -1)) for f in v.get("faults", [])}
    caused = fault_caused(v.get("anomalies", []), struck, bool(itself))
    return {"caught": v.get("valid") is False and fired and caused, "why": f"{why}, the faults' {caused}"[:400]}


def run_one(args: argparse.Namespace, name: str, out: Path) -> dict[str, Any]:
    if name in TESTS:
        return run_test(args, TESTS[name], out)
    if name in EXPERIMENTS:
        return run_experiment(args, EXPERIMENTS[name], out)
    return run_matrix_cell(args, MATRIX_CELLS[name], out)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    names = [n for n in args.controls.split(",") if n]
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise SystemExit(f"--controls: unknown control(s) {', '.join(unknown)} (known: {', '.join(KNOWN)})")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="control-repeat-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for i in range(1, args.repeats + 1):  # round-robin: a loop stopped early leaves every control equally far
        for name in names:
            t0 = time.monotonic()
            got = run_one(args, name, work / f"{name}-{i}")
            row = {"control": name, "repeat": i, "seconds": round(time.monotonic() - t0, 1), **got}
            rows[name].append(row)
            line = f"{name} #{i}: {'caught' if got['caught'] else 'NOT caught'} ({row['seconds']} s) {got['why'][:200]}"
            benchlib.progress_row(row, line, args.jsonl)
    summary = [
        {
            "control": name,
            "caught": sum(bool(r["caught"]) for r in rs),
            "repeats": len(rs),
            "misses": [f"#{r['repeat']}: {r['why']}" for r in rs if not r["caught"]],
        }
        for name, rs in rows.items()
    ]
    if args.json:
        print(json.dumps({"benchmark": "control_repeat", "controls": summary}, indent=2))
    else:
        print("| control | caught / repeats |\n|---|---|")
        for s in summary:
            print(f"| {s['control']} | {s['caught']} / {s['repeats']} |")
        for s in summary:
            for m in s["misses"]:
                print(f"  {s['control']} miss {m}")
    return 0 if all(s["caught"] == s["repeats"] for s in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
