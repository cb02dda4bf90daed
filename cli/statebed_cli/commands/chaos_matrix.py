"""`statebed chaos matrix`: fault kinds × workloads × formats × seeds, one verdict.

Exit codes: 0 every statebed V2 cell valid and the V1 positive control caught (native cells
count only with --strict-native), 1 otherwise, 2 unusable flags (one line naming the flag),
130 interrupted (the running cell's processes are stopped by the runner).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from statebed_chaos.matrix import MatrixResult, RunCell, render_table, render_verdict, run_experiment_cell, run_matrix
from statebed_chaos.matrix_presets import PRESETS, plan_cells
from statebed_store.errors import UsageError

from ..common import emit_json


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "matrix",
        help="run the fault × workload × format × seed matrix and judge it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="the small matrix `make test` runs (default)")
    p.add_argument("--full", action="store_true", help="the nightly matrix: every fault kind × 3 workloads × v1/v2/native × 12 seeds")
    p.add_argument("--seeds", metavar="N", help="seeds 1..N per cell (default: quick 1, full 12)")
    p.add_argument("--faults", metavar="A,B", help="only these fault kinds (of the preset's cells)")
    p.add_argument("--workloads", metavar="A,B", help="only these workloads")
    p.add_argument("--formats", metavar="A,B", help="only these formats: v1, v2, native")
    p.add_argument("--out", metavar="DIR", type=Path, help="where the cells' directories go (default: runs/<time>-matrix-<preset>)")
    p.add_argument("--keep", action="store_true", help="keep the directories of valid cells too")
    p.add_argument("--strict-native", action="store_true", help="native Spark cells that are not valid fail the exit code")
    p.add_argument("--json", action="store_true", help='machine-readable output: {"runs": [...], "summary": {...}}')
    p.set_defaults(run=run)


def run(args: argparse.Namespace, run_cell: RunCell = run_experiment_cell) -> int:
    if args.quick and args.full:
        raise UsageError("--quick and --full: give one of them")
    preset = PRESETS["full" if args.full else "quick"]
    seeds = preset.seeds if args.seeds is None else _positive("--seeds", args.seeds)
    cells, skipped = plan_cells(
        preset,
        seeds,
        faults=_names("--faults", args.faults),
        workloads=_names("--workloads", args.workloads),
        formats=_names("--formats", args.formats),
    )
    if not cells:
        raise UsageError(
            f"no cell of the selection applies: {'; '.join(f'{s.fault}/{s.workload}/{s.format}: {s.reason}' for s in skipped)}"
        )
    out = _out_dir(args.out, preset.name)
    result = run_matrix(cells, skipped, out, preset=preset.name, run_cell=run_cell, keep=args.keep, strict_native=args.strict_native)
    _report(result, as_json=args.json)
    return result.exit_code


def _positive(flag: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{flag}: expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise UsageError(f"{flag}: expected an integer >= 1, got {value}")
    return value


def _names(flag: str, text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise UsageError(f"{flag}: expected a comma-separated list of names, got {text!r}")
    return names


def _out_dir(out: Path | None, preset: str) -> Path:
    """A new or empty directory: cell directories are created (and removed) only inside it."""
    path = out if out is not None else Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-matrix-{preset}"
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"--out {path}: exists and is not an empty directory")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _report(result: MatrixResult, *, as_json: bool) -> None:
    """The table and verdict on stdout (JSON instead with --json); replay commands after them."""
    failing = result.failing()
    lines = [f"  {r.cell.name}: {'INVALID' if r.valid is False else 'UNKNOWN'}: {r.reproduce}" for r in failing]
    if as_json:
        emit_json(result.to_json())
        print(render_verdict(result), file=sys.stderr)
        if lines:
            print("reproduce:\n" + "\n".join(lines), file=sys.stderr)
        return
    print(render_table(result))
    for s in result.skipped:
        print(f"  n/a {s.fault}/{s.workload}/{s.format}: {s.reason}")
    print(render_verdict(result))
    if lines:
        print("cells not valid (directories kept; reproduce with):\n" + "\n".join(lines))
