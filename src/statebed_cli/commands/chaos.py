"""`statebed chaos`: chaos experiments. `chaos run EXPERIMENT` runs one experiment file (a
fault-free baseline, the faulted run, the verdict); `chaos matrix` (chaos_matrix.py) runs many.

Exit codes of `chaos run`: 0 valid, 1 invalid (anomalies), 2 harness or input error, 3 unknown
(a scheduled fault did not provably fire, the run timed out or its driver died unexpectedly,
a verifier could not decide).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

from statebed_base.errors import UsageError
from statebed_chaos.experiment import load_experiment
from statebed_chaos.experiment_runner import ExperimentResult, run_experiment
from statebed_job.runner import METRICS_PORT_ENV
from statebed_load.prometheus import PROMETHEUS_HELP, prometheus_binary, prometheus_for_run, set_env

from ..backend import add_backend_arg, baselines_cache, k8s_settings
from ..common import fresh_output_dir, non_negative_int
from . import chaos_matrix
from .report import default_report

# The hook for more `statebed chaos X` subcommands: each module's `add_parser(chaos_subparsers)`
# registers one (`run` is this module's own).
SUBCOMMANDS = (chaos_matrix,)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Registers `chaos`, its `run` subcommand and every module of SUBCOMMANDS under it."""
    p = sub.add_parser("chaos", help="chaos experiments: inject faults into a run and judge it", description=__doc__)
    chaos_sub = p.add_subparsers(dest="chaos_command", metavar="SUBCOMMAND", required=True)
    _add_run(chaos_sub)
    for module in SUBCOMMANDS:
        module.add_parser(chaos_sub)


def _add_run(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="run one experiment file: baseline, faulted run, verdict", description=__doc__)
    p.add_argument("experiment", metavar="EXPERIMENT", help="the experiment file (YAML; see examples/experiments/)")
    p.add_argument("--seed", type=non_negative_int, default=None, help="override the file's seed (default: the file's, else drawn)")
    p.add_argument("--out", type=Path, default=None, help="the experiment's directory, new or empty (default: runs/chaos/<time>-<name>)")
    p.add_argument("--json", action="store_true", help="print the result as JSON (progress stays on stderr)")
    p.add_argument("--no-report", action="store_true", help="do not write report.html into the experiment's directory")
    p.add_argument("--prometheus", action="store_true", help=PROMETHEUS_HELP)
    add_backend_arg(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    exp = load_experiment(args.experiment)  # its name is a checked path segment
    k8s = k8s_settings(args)  # before the output directory: a bad environment leaves nothing behind
    cache = baselines_cache(args)
    if args.prometheus:  # refused in one line before anything is created
        prometheus_binary()
        if k8s is not None:
            raise UsageError("--prometheus: local runs only; in a cluster the chart's PodMonitor/ServiceMonitor do this")
    out = fresh_output_dir(args.out or Path("runs") / "chaos" / f"{time.strftime('%Y%m%d-%H%M%S')}-{exp.name}")
    with _prometheus(args.prometheus, out):
        result = run_experiment(exp, seed=args.seed, out_dir=out, progress=True, baselines=cache, k8s=k8s)
    report = None if args.no_report else default_report("chaos run", result.run_dir)
    if args.json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    else:
        _print(result)
        if report is not None:
            print(f"  report: {report}")
    return result.exit_code


@contextlib.contextmanager
def _prometheus(wanted: bool, out: Path) -> Iterator[None]:
    """With --prometheus: a Prometheus over the experiment, and every driver asked for /metrics."""
    if not wanted:
        yield
        return
    with prometheus_for_run(out), set_env(METRICS_PORT_ENV, "0"):
        yield


def _print(r: ExperimentResult) -> None:
    print(f"experiment {r.name} (seed {r.seed}): {'valid' if r.valid is True else 'INVALID' if r.valid is False else 'unknown'}")
    for f in r.faults:
        print(f"  fault {f['id']} {f['kind']}: fired {f['fired']}: {f['detail']}")
    for name, check in r.checks.items():
        print(f"  check {name}: {check.get('valid', '-')}")
    print(f"  baseline equal: {r.baseline_equal}")
    for a in r.anomalies[:10]:
        print(f"  anomaly [{a.get('check')}] {a.get('kind')}: {a.get('detail', '')[:200]}")
    for why in r.reasons:
        print(f"  because: {why}")
    print(f"  run directory {r.run_dir} ({r.seconds:.0f} s); reproduce: {r.reproduce}")
