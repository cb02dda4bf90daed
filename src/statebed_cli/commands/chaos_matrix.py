"""`statebed chaos matrix`: fault kinds × workloads × formats × seeds, one verdict.

Exit codes: 0 only when something was proven: at least one statebed V2 cell ran and every
one is valid, and a V1 positive control (a V1 cell on bucket-collect or sample3) was caught by
a state or lineage anomaly (native cells count only with --strict-native); 1 otherwise, the
verdict line (and the JSON summary's "reasons") saying why, also for a selection with no V2
cell or no V1 control; 2 unusable flags (one line naming the flag), 130 interrupted (the
running cell's processes are stopped by the runner).
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from statebed_base.errors import UsageError
from statebed_chaos.baseline_cache import Baselines
from statebed_chaos.experiment import Experiment
from statebed_chaos.experiment_runner import ExperimentResult, run_experiment
from statebed_chaos.k8s_backend import K8sSettings
from statebed_chaos.matrix import MatrixResult, RunCell, render_table, render_verdict, run_experiment_cell, run_matrix
from statebed_chaos.matrix_presets import PRESETS, plan_cells
from statebed_chaos.shared_cluster import SharedCluster
from statebed_model.experimentdir import MatrixDir

from ..backend import add_backend_arg, baselines_cache, k8s_settings
from ..common import emit_json, fresh_output_dir
from .report import default_report


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "matrix",
        help="run the fault × workload × format × seed matrix and judge it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="the small matrix `make test` runs (default)")
    p.add_argument(
        "--full", action="store_true", help="the nightly matrix: every fault kind × 3 workloads × v1/v2/native-v1/native-v2 × 12 seeds"
    )
    p.add_argument("--seeds", metavar="N", help="seeds 1..N per cell (default: quick 1, full 12)")
    p.add_argument("--faults", metavar="A,B", help="only these fault kinds (of the preset's cells)")
    p.add_argument("--workloads", metavar="A,B", help="only these workloads")
    p.add_argument("--formats", metavar="A,B", help="only these formats: v1, v2, native-v1, native-v2")
    p.add_argument(
        "--storage",
        metavar="local|s3",
        help="where every cell's checkpoint lives: local disk or a bucket (MinIO behind Toxiproxy; cells named -s3); "
        "default: the preset's (local), the storage faults always on S3",
    )
    p.add_argument("--out", metavar="DIR", type=Path, help="where the cells' directories go (default: runs/<time>-matrix-<preset>)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the matrix in --out: the cells its journal (cells.jsonl) lists as finished are taken from it, "
        "the rest run; the same selection flags as the first invocation",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run no cell: judge and report the cells the journal in --out lists (e.g. the shards' journals joined), "
        "a selected cell it lacks counted unknown (not run); the same selection flags as the runs",
    )
    p.add_argument(
        "--cluster-per-run",
        action="store_true",
        help="each standalone run starts and stops its own cluster (as `statebed chaos run` does) instead of "
        "the matrix's one long-lived cluster in --out/cluster",
    )
    p.add_argument("--keep", action="store_true", help="keep the directories of valid cells too")
    p.add_argument("--strict-native", action="store_true", help="native Spark cells that are not valid fail the exit code")
    p.add_argument("--json", action="store_true", help='machine-readable output: {"runs": [...], "summary": {...}}')
    p.add_argument("--no-report", action="store_true", help="do not write report.html (the matrix's and each kept cell's)")
    add_backend_arg(p)
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
        storage=args.storage,
    )
    if not cells:
        raise UsageError(
            f"no cell of the selection applies: {'; '.join(f'{s.fault}/{s.workload}/{s.format}: {s.reason}' for s in skipped)}"
        )
    k8s = k8s_settings(args)  # before the output directory: a bad environment leaves nothing behind
    cache_dir = baselines_cache(args).directory
    out = _journal_dir(args.out) if args.report_only else _resumed_dir(args.out) if args.resume else _out_dir(args.out, preset.name)
    shared = None
    if k8s is not None and run_cell is run_experiment_cell:
        run_cell = _real_cell(k8s=k8s)
    elif (
        run_cell is run_experiment_cell
        and not (args.cluster_per_run or args.report_only)
        and any(c.experiment.cluster == "standalone" for c in cells)
    ):
        shared = SharedCluster(out / "cluster")
        run_cell = _real_cell(cluster=shared)
    with shared or nullcontext():
        result = run_matrix(
            cells,
            skipped,
            out,
            preset=preset.name,
            run_cell=run_cell,
            keep=args.keep,
            strict_native=args.strict_native,
            baselines_dir=cache_dir,
            resume=args.resume or args.report_only,
            run_missing=not args.report_only,
        )
    if shared is not None:
        result.notes.append(f"standalone cells ran on one long-lived cluster ({shared.dir}), started {shared.starts} time(s)")
    MatrixDir(out).write_record(result.to_json())
    report = None if args.no_report else default_report("chaos matrix", out)
    _report(result, as_json=args.json)
    if report is not None:
        print(f"report: {report}", file=sys.stderr if args.json else sys.stdout)
    return result.exit_code


def _real_cell(*, k8s: K8sSettings | None = None, cluster: SharedCluster | None = None) -> RunCell:
    """The real cell on the Kubernetes backend (`k8s`), or here with its standalone runs on the
    matrix's long-lived cluster (`cluster`)."""

    def cell(exp: Experiment, seed: int, out_dir: Path, baselines: Baselines) -> ExperimentResult:
        return run_experiment(exp, seed=seed, out_dir=out_dir, progress=True, baselines=baselines, k8s=k8s, cluster=cluster)

    return cell


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
    return fresh_output_dir(out if out is not None else Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-matrix-{preset}")


def _resumed_dir(out: Path | None) -> Path:
    """`--resume`'s directory: a matrix's (its journal or record there) or a new or empty one."""
    if out is None:
        raise UsageError("--resume: give the matrix's directory with --out")
    if out.exists() and any(out.iterdir()) and not (MatrixDir(out).journal.is_file() or MatrixDir(out).record.is_file()):
        raise UsageError(f"--out {out}: holds no chaos matrix (no {MatrixDir(out).journal.name}); refusing to resume into it")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _journal_dir(out: Path | None) -> Path:
    """`--report-only`'s directory: it must hold a matrix journal."""
    if out is None:
        raise UsageError("--report-only: give the directory of the matrix's journal with --out")
    if not MatrixDir(out).journal.is_file():
        raise UsageError(f"--out {out}: holds no matrix journal ({MatrixDir(out).journal.name}); nothing to report")
    return out


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
