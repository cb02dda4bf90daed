"""`statebed run`: a streaming run on statebed's store (or Spark's own), then both verifiers.

Exit codes: 0 the run finished and both verifiers say valid; 1 a verifier found
anomalies; 2 unusable input (bad arguments, unreachable storage, a checkpoint holding
another run) or a failed query; 3 a verifier could not decide (a V1 run's lineage).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any

from statebed_base.errors import FieldError, UsageError
from statebed_chaos.limits import MAX_DURATION_S
from statebed_job.config import CONTINUOUS, Flag, JobOptions, flag_of, run_flags
from statebed_job.runner import metrics_port_from_env, run_job
from statebed_model.rundir import RunDir
from statebed_model.workloads import WORKLOADS
from statebed_store import S3Settings, failpoints
from statebed_store.formats import LEGACY_NATIVE
from statebed_store.location import is_remote
from statebed_verify import EXIT_CODES, merge_verdicts, summarise, verify_run

from ..common import duration_arg, non_negative_int, positive_int
from .report import default_report
from .verify import VERDICT


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not 0 < value < 1e7:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


_PARSE: dict[str, Callable[[str], object]] = {
    "count": positive_int,
    "seed": non_negative_int,
    "seconds": float,
    "duration": duration_arg(MAX_DURATION_S),
}


def _add_flag(group: argparse._ActionsContainer, flag: Flag, default: object, workloads: str) -> None:
    """One argument from the table of run options (`statebed_job.config.Flag`)."""
    kw: dict[str, Any] = {"default": [] if flag.kind == "conf" else None, "metavar": flag.metavar}
    kw["help"] = flag.help.format(default=default, workloads=workloads)
    if flag.choices:
        kw["choices"] = flag.choices
    if flag.kind in _PARSE:
        kw["type"] = _PARSE[flag.kind]
    if flag.kind == "conf":
        kw["action"] = "append"
    group.add_argument(flag.name, **kw)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    d = JobOptions()
    p = sub.add_parser("run", help="run a streaming workload on a local or standalone Spark cluster, then verify it", description=__doc__)
    workloads = "; ".join(f"{name}: {w.description}" for name, w in sorted(WORKLOADS.items()))
    groups: dict[str | None, argparse._ActionsContainer] = {None: p}
    for name, flag in run_flags().items():
        if flag.group not in groups:
            groups[flag.group] = p.add_argument_group(flag.group)
        _add_flag(groups[flag.group], flag, getattr(d, name), workloads)
        if name == "format":
            p.add_argument(
                "--native",
                action="store_true",
                help="run the workload on Spark's own RocksDB store with checkpointFormatVersion=2 (= --format native-v2)",
            )
        elif name == "workers":
            p.add_argument("--master", default=None, help="use a running cluster (spark://...) instead of starting one")
    groups[CONTINUOUS].add_argument(
        "--metrics-port",
        type=non_negative_int,
        default=None,
        metavar="P",
        help="serve the driver's Prometheus /metrics on 127.0.0.1:P (0: any)",
    )
    p.add_argument("--run-dir", default=None, help="where the run directory goes (default: runs/<time>-<workload>-<format>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir (e.g. after the driver died)")
    p.add_argument("--no-verify", action="store_true", help="skip the verifiers at the end (and so the report)")
    p.add_argument("--no-report", action="store_true", help="do not write report.html into the run directory after the verifiers")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    s3 = p.add_argument_group("S3 (for an s3:// checkpoint)")
    s3.add_argument("--s3-endpoint")
    s3.add_argument("--s3-access-key")
    s3.add_argument("--s3-secret-key")
    p.set_defaults(run=run)


def _confs(pairs: list[str]) -> dict[str, str] | None:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf wants KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out or None


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The fields the command line set, by the table of run options (None: not given)."""
    out: dict[str, Any] = {}
    for name, flag in run_flags().items():
        value = getattr(args, flag.name.removeprefix("--").replace("-", "_"))
        if flag.kind == "conf":
            value = _confs(value)
        elif flag.kind == "path" and value is not None:
            value = os.path.abspath(value)
        elif flag.kind == "format" and args.native:
            value = LEGACY_NATIVE.name
        out[name] = value
    return {k: v for k, v in out.items() if v is not None}


def _options(args: argparse.Namespace) -> JobOptions:
    """Options from the arguments given; on --resume, the saved run's options overridden by them."""
    given = _given(args)
    if args.resume:
        if not args.run_dir:
            raise UsageError("--resume needs --run-dir")
        saved = RunDir(args.run_dir).read_info().params
        return _named_by_flag(lambda: JobOptions(**{**JobOptions.from_json(saved).__dict__, "slow_task": None, **given}))
    return _named_by_flag(lambda: JobOptions(**given))


def _named_by_flag(build: Callable[[], JobOptions]) -> JobOptions:
    """The options; a bad field named by its flag (`snapshot_interval` -> `--snapshot-interval`)."""
    try:
        return build()
    except FieldError as e:
        raise UsageError(f"{flag_of(e.field)} {e.detail}") from None


def run(args: argparse.Namespace) -> int:
    failpoints.check_known()  # every failpoint is registered by now (the job's at import): a typo is exit 2
    opts = _options(args)
    s3 = None
    if is_remote(opts.checkpoint):
        s3 = S3Settings.from_env(args.s3_endpoint, args.s3_access_key, args.s3_secret_key)
    summary = run_job(
        args.run_dir,
        opts,
        resume=args.resume,
        master=args.master,
        s3=s3,
        progress=not args.json,
        metrics_port=metrics_port_from_env(args.metrics_port),
    )
    report = None
    if not args.no_verify:
        composite = verify_run(summary.run_dir, s3)
        summary.verdicts = summarise(composite)
        report = None if args.no_report else default_report("run", summary.run_dir, composite)
    doc = summary.to_json()
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"\nrun {summary.run_dir}: {summary.workload} on {summary.format} ({summary.cluster})")
        print(f"  committed batches {summary.batches}, records {summary.records:,}, wall {summary.seconds:.1f} s, seed {summary.seed}")
        p50 = "-" if summary.batch_p50_s is None else f"{summary.batch_p50_s:.2f}"
        p99 = "-" if summary.batch_p99_s is None else f"{summary.batch_p99_s:.2f}"
        print(f"  throughput {summary.records_per_s:,.0f} records/s, batch latency p50 {p50} s, p99 {p99} s")
        for name, v in summary.verdicts.items():
            print(f"  verify {name:<8} {VERDICT[v['valid']]} ({v['anomalies']} anomalies)")
        print(f"  details: statebed verify lineage {summary.checkpoint}; statebed verify state {summary.run_dir}")
        if report is not None:
            print(f"  report: {report}")
    return EXIT_CODES[merge_verdicts(v["valid"] for v in summary.verdicts.values())]
