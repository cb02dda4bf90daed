"""`statebed verify lineage|state|repartition`: Jepsen-style verdicts on a checkpoint or a run.

Exit codes: 0 valid, 1 anomalies found, 2 unusable input, 3 unknown (could not decide,
e.g. a V1 checkpoint has no ids to check, or the checker itself crashed).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from statebed_base.names import printable
from statebed_store import S3Settings
from statebed_store.location import is_remote
from statebed_verify import (
    EXIT_CODES,
    CheckCrashed,
    LineageReport,
    RepartitionReport,
    Report,
    StateReport,
    check_safe,
    verify_lineage,
    verify_repartition,
    verify_state,
)

from ..common import add_checkpoint_args, emit_json, open_checkpoint


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("verify", help="check a checkpoint's committed lineage or a run's final state", description=__doc__)
    checks = p.add_subparsers(dest="check", metavar="CHECK", required=True)
    lin = checks.add_parser(
        "lineage",
        help="is the committed history one linear, loadable chain?",
        description="Read the commit log and every store directory (statebed's or Spark-native V2) and report "
        "missing-checkpoint, lineage-break, non-linear-lineage, unplannable, unreadable-file and commit-gap anomalies. "
        "Files of losing attempts are listed as orphans. Also whether Spark can resume the query from it (resumable): "
        "the files a restart reads besides the state (missing-, damaged-, inconsistent-query-file).",
    )
    add_checkpoint_args(lin)
    lin.add_argument("--all-versions", action="store_true", help="check a load plan for every retained version, not only the latest")
    lin.add_argument(
        "--query",
        metavar="DIR",
        help="Spark's query checkpoint, where it is not CKPT itself (a statebed run's spark-checkpoint/): what a restart reads is checked there",
    )
    lin.add_argument("--json", action="store_true", help="machine-readable output")
    lin.set_defaults(run=run_lineage)
    rep = checks.add_parser(
        "repartition",
        help="did each offline repartition move the rows to the right partitions, losing and adding none?",
        description="For each batch where Spark's offline repartition changed an operator's partition count: every key "
        "in the partition the partitioner assigns under the new count (misplaced-key, cross-partition-key), the same "
        "(key, value) rows before and after (repartition-mismatch), and the new batch's lineage. Unknown when the "
        "checkpoint records no repartition.",
    )
    add_checkpoint_args(rep)
    rep.add_argument("--json", action="store_true", help="machine-readable output")
    rep.set_defaults(run=run_repartition)
    st = checks.add_parser(
        "state",
        help="is the final committed state what the committed inputs must produce?",
        description="Load a run's final committed state and judge it: an oracle for deterministic workloads (count), "
        "invariants for random ones (bucket-collect, sample3); also checks the run's inputs and outputs (sink).",
    )
    st.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by `statebed run`: a directory or s3://bucket/prefix")
    s3 = st.add_argument_group("S3 (when the run directory or its checkpoint is s3://)")
    s3.add_argument("--s3-endpoint")
    s3.add_argument("--s3-access-key")
    s3.add_argument("--s3-secret-key")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(run=run_state)


VERDICT = {True: "VALID", False: "INVALID", "unknown": "UNKNOWN"}
RESUMABLE = {True: "yes", False: "no", "unknown": "unknown"}


def _check(args: argparse.Namespace, label: str, check: Callable[[], Report], human: Callable[[Any], None]) -> int:
    """Run a checker through `check_safe`; print its report (JSON or `human`)."""
    report = check_safe(f"verify {label}", check)
    if args.json:
        emit_json(report.to_json())
    elif isinstance(report, CheckCrashed):
        print(f"statebed verify {printable(label)}: UNKNOWN ({printable(report.error)})")
    else:
        human(report)
        for note in report.notes:
            print(f"  note: {printable(note)}")
    return EXIT_CODES[report.valid]


def run_lineage(args: argparse.Namespace) -> int:
    storage = open_checkpoint(args)

    def human(report: LineageReport) -> None:
        c = report.checked
        print(
            f"{printable(storage.url)}: {VERDICT[report.valid]} — format {report.format}; checked {c['operators']} operator(s), "
            f"{c['partitions']} partition(s), {c['versions']} version(s); {len(report.anomalies)} anomalies, "
            f"{len(report.orphans)} orphan checkpoint(s)"
        )
        if report.anomalies:
            print(f"  {'kind':<19} {'op':>3} {'part':>4} {'version':>7}  detail")
        for a in report.anomalies:
            op = "-" if a.operator is None else a.operator
            part = "-" if a.partition is None else a.partition
            version = "-" if a.version is None else a.version
            print(f"  {a.kind:<19} {op:>3} {part:>4} {version:>7}  {printable(a.detail)}")
            for f in a.files[:3]:
                print(f"  {'':<36} {printable(f)}")
        print(f"  resumable: {RESUMABLE[report.resumable]}")
        for reason in report.resumable_reasons[:5]:
            print(f"    {printable(reason)}")

    query = None if args.query is None else open_checkpoint(args, args.query, option="--query")
    return _check(args, f"lineage {storage.url}", lambda: verify_lineage(storage, all_versions=args.all_versions, query=query), human)


def run_repartition(args: argparse.Namespace) -> int:
    storage = open_checkpoint(args)

    def human(report: RepartitionReport) -> None:
        print(f"{printable(storage.url)}: {VERDICT[report.valid]} — {len(report.repartitions)} repartition(s)")
        for rp, found in report.repartitions:
            print(
                f"  operator {rp.operator}, batch {rp.batch} (version {rp.version}): {rp.before} -> {rp.after} partitions: "
                f"{VERDICT[report.verdict(rp, found)]}"
            )
            for a in found:
                print(f"    {a.kind:<21} {printable(a.detail)}")

    return _check(args, f"repartition {storage.url}", lambda: verify_repartition(storage), human)


def run_state(args: argparse.Namespace) -> int:
    s3 = _s3(args)

    def human(report: StateReport) -> None:
        c = report.checked
        print(
            f"{printable(args.run_dir)}: {VERDICT[report.valid]} — workload {report.workload} ({report.format}); {c['batches']} committed batch(es), "
            f"{c['records']} record(s), {c['partitions']} partition(s), {c['state_entries']} state entries; {len(report.anomalies)} anomalies"
        )
        for a in report.anomalies:
            print(f"  {a.kind:<24} {printable(a.detail)}")

    return _check(args, f"state {args.run_dir}", lambda: verify_state(args.run_dir, s3), human)


def _s3(args: argparse.Namespace) -> S3Settings | None:
    if args.s3_endpoint or os.environ.get("STATEBED_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL") or is_remote(args.run_dir):
        return S3Settings.from_env(args.s3_endpoint, args.s3_access_key, args.s3_secret_key)
    return None
