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

from statebed_base.errors import FieldError, UsageError
from statebed_chaos.limits import MAX_DURATION_S
from statebed_job.config import JobOptions
from statebed_job.runner import metrics_port_from_env, run_job
from statebed_model.rundir import RunDir
from statebed_model.workloads import WORKLOADS
from statebed_report.reproduce import flag_of
from statebed_store import S3Settings, failpoints
from statebed_store.formats import LEGACY_NATIVE, RUN_FORMATS
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


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    d = JobOptions()
    p = sub.add_parser("run", help="run a streaming workload on a local or standalone Spark cluster, then verify it", description=__doc__)
    known = "; ".join(f"{name}: {w.description}" for name, w in sorted(WORKLOADS.items()))
    p.add_argument("--workload", choices=sorted(WORKLOADS), help=f"{known} (default: {d.workload})")
    p.add_argument("--batches", type=positive_int, help=f"micro-batches in total (default: {d.batches})")
    p.add_argument("--partitions", type=positive_int, help=f"state partitions (default: {d.partitions})")
    p.add_argument("--rows-per-batch", type=positive_int, help=f"records per batch (default: {d.rows_per_batch})")
    p.add_argument("--keyspace", type=positive_int, help=f"distinct keys (default: {d.keyspace})")
    p.add_argument(
        "--checkpoint", default=None, help="statebed checkpoint: a directory or s3://bucket/prefix (default: <run-dir>/checkpoint)"
    )
    p.add_argument(
        "--format",
        choices=RUN_FORMATS,
        help="statebed checkpoint format v1/v2 (default: v2; v1 is the positive control), or Spark's own RocksDB store "
        "with checkpointFormatVersion 1/2 (native-v1/native-v2)",
    )
    p.add_argument(
        "--native",
        action="store_true",
        help="run the workload on Spark's own RocksDB store with checkpointFormatVersion=2 (= --format native-v2)",
    )
    p.add_argument(
        "--cluster", choices=("local", "standalone"), help=f"local[2], or a standalone cluster started for the run (default: {d.cluster})"
    )
    p.add_argument("--workers", type=positive_int, help=f"standalone workers, one per loopback address (default: {d.workers})")
    p.add_argument("--master", default=None, help="use a running cluster (spark://...) instead of starting one")
    p.add_argument("--snapshot-interval", type=positive_int, help=f"versions between snapshots (default: {d.snapshot_interval})")
    p.add_argument(
        "--retain",
        type=positive_int,
        metavar="N",
        help=f"committed versions maintenance keeps loadable per store; native: Spark's minBatchesToRetain (default: {d.retain})",
    )
    p.add_argument(
        "--maintenance-interval",
        type=float,
        metavar="S",
        help=f"seconds between maintenance passes; 0: after every committed batch (default: {d.maintenance_interval_s:g})",
    )
    p.add_argument(
        "--sst-grace",
        type=float,
        metavar="S",
        help=f"seconds maintenance leaves an SST no kept snapshot names (an upload may be in flight; default: {d.sst_grace_s:g})",
    )
    p.add_argument(
        "--checkpoint-file-manager",
        choices=("rename", "abortable"),
        help="native-v1/native-v2: the Spark checkpoint file manager the plug-in wraps: rename (Spark's default) or, "
        "on an s3:// checkpoint, abortable (spark-hadoop-cloud's, written in place; default: rename)",
    )
    p.add_argument(
        "--hedge",
        choices=("off", "on", "adaptive"),
        help="hedged create-only uploads of changelogs and commit-log entries (default: off; see StoreOptions.hedge)",
    )
    p.add_argument(
        "--slow-task",
        default=None,
        metavar="B:P:MS",
        help="make attempt 0 of batch B, partition P sleep MS after its commit (provokes speculation)",
    )
    p.add_argument(
        "--source",
        choices=("generated", "ingest"),
        help="generated: deterministic records, one file per batch (default); ingest: what has landed in --landing",
    )
    p.add_argument("--landing", default=None, metavar="DIR", help="the ingest landing area (data/ and acks/) for --source ingest")
    cont = p.add_argument_group(
        "continuous ingest (--source ingest): batches over what keeps landing until one condition holds, then drain"
    )
    cont.add_argument("--duration", type=duration_arg(MAX_DURATION_S), default=None, metavar="S", help="stop after S: 30, 30s, 2m, 1h30m")
    cont.add_argument("--until-records", type=positive_int, default=None, metavar="N", help="stop once N records are committed")
    cont.add_argument("--stop-file", default=None, metavar="PATH", help="stop once PATH exists")
    cont.add_argument(
        "--metrics-port",
        type=non_negative_int,
        default=None,
        metavar="P",
        help="serve the driver's Prometheus /metrics on 127.0.0.1:P (0: any)",
    )
    cont.add_argument("--trigger-ms", type=positive_int, default=None, metavar="MS", help="a micro-batch every MS (default: 500)")
    p.add_argument(
        "--seed",
        type=non_negative_int,
        default=None,
        help="seed of every task's random choices, from (seed, batch, partition, attempt): a run replays (default: drawn, saved in run.json)",
    )
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration (repeatable)")
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


def _confs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf wants KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def _options(args: argparse.Namespace) -> JobOptions:
    """Options from the arguments given; on --resume, the saved run's options overridden by them."""
    given = {
        "workload": args.workload,
        "batches": args.batches,
        "partitions": args.partitions,
        "rows_per_batch": args.rows_per_batch,
        "keyspace": args.keyspace,
        "format": LEGACY_NATIVE.name if args.native else args.format,
        "cluster": args.cluster,
        "workers": args.workers,
        "checkpoint": args.checkpoint,
        "snapshot_interval": args.snapshot_interval,
        "hedge": args.hedge,
        "slow_task": args.slow_task,
        "seed": args.seed,
        "extra_conf": _confs(args.conf) or None,
        "source": args.source,
        "landing": args.landing,
        "duration_s": args.duration,
        "until_records": args.until_records,
        "stop_file": None if args.stop_file is None else os.path.abspath(args.stop_file),
        "trigger_ms": args.trigger_ms,
        "retain": args.retain,
        "maintenance_interval_s": args.maintenance_interval,
        "sst_grace_s": args.sst_grace,
        "checkpoint_file_manager": args.checkpoint_file_manager,
    }
    given = {k: v for k, v in given.items() if v is not None}
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
