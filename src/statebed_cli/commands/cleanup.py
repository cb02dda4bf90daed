"""`statebed cleanup`: keep the last N committed batches loadable, delete the rest, say why per file.

On a statebed checkpoint (or a statebed run directory) it is the cleanup a run's maintenance
does (`statebed_store.cleanup`). On a Spark checkpoint Spark's own maintenance owns the state:
the command keeps every batch Spark's commit log still holds and reports the files no retained
commit's load plan reaches (orphans Spark left, e.g. after a killed driver); deleting them needs
`--delete-orphans`. A snapshot a retained plan starts from is kept even when its own commit
entry is gone. Anything that deletes holds the checkpoint's lock (the one `rewind` takes).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from statebed_base.errors import UsageError
from statebed_base.names import printable
from statebed_model.rewind import lock
from statebed_model.rewind_journal import BACKUP_DIR, pending_journal
from statebed_model.rundir import RunDir
from statebed_store import S3Settings, Storage
from statebed_store.cleanup import DELETE_BATCH, CheckpointCleanup, cleanup_checkpoint
from statebed_store.config import StoreOptions
from statebed_store.location import is_remote
from statebed_store.naming import COMMITS_DIR, OFFSETS_DIR, hadoop_crc_name

from ..common import EXIT_OK, add_s3_args, emit_json, open_checkpoint, open_location, positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "cleanup",
        help="delete what no retained committed batch needs (superseded versions, losing attempts' orphans)",
        description="Keep the last N committed batches loadable in every store and delete every other state file, "
        "naming why (superseded version, orphan of attempt X, orphan sidecar, unreferenced SST) and the bytes "
        "reclaimed. Never deletes a file a retained batch's load plan needs; when a retained batch cannot be "
        "planned nothing is deleted. On a Spark checkpoint, every batch its commit log holds is retained and the "
        "files no retained plan reaches are reported; they are deleted only with --delete-orphans. Deleting holds "
        "the checkpoint's lock (CKPT/.statebed-lock, the one `rewind` takes; local checkpoints only).",
    )
    p.add_argument("checkpoint", metavar="CKPT", help="a statebed checkpoint, a run directory or a Spark checkpoint (a directory or s3://)")
    p.add_argument(
        "--retain", type=positive_int, metavar="N", help="committed batches to keep loadable (default: 100; Spark: all it holds)"
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be deleted; change nothing")
    p.add_argument("--delete-orphans", action="store_true", help="on a Spark checkpoint: delete the orphans found")
    p.add_argument(
        "--sst-grace", type=float, default=None, metavar="S", help="keep unreferenced SSTs younger than S seconds (default: 600)"
    )
    p.add_argument(
        "--delete-batch", type=positive_int, default=DELETE_BATCH, metavar="N", help="files per delete request (default: %(default)s)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_s3_args(p)
    p.set_defaults(run=run)


@dataclass
class Target:
    storage: Storage
    layout: str  # "statebed", "run-dir" or "spark"
    lock_root: Path | None  # None: an s3:// location (no lock file there)

    @property
    def spark(self) -> bool:
        return self.layout == "spark"


def _target(args: argparse.Namespace) -> Target:
    loc: str = args.checkpoint
    if is_remote(loc):
        storage = open_location(args, loc)
        if storage.exists("run.json"):
            return _run_dir(RunDir(loc, S3Settings.from_env(args.s3_endpoint, args.s3_access_key, args.s3_secret_key)), args, None)
        return Target(storage, "statebed", None)
    storage = open_checkpoint(args)
    root = Path(storage.url)
    if (root / "run.json").is_file():
        return _run_dir(RunDir(root), args, root)
    if (root / OFFSETS_DIR).is_dir():
        return Target(storage, "spark", root)
    if not (root / COMMITS_DIR).is_dir():
        raise UsageError(f"checkpoint {root}: no {COMMITS_DIR}/ directory; not a statebed or Spark checkpoint")
    return Target(storage, "statebed", root)


def _run_dir(run: RunDir, args: argparse.Namespace, root: Path | None) -> Target:
    info = run.read_info()
    if info.format.native:  # native, native-v1, native-v2: Spark's checkpoint, Spark's maintenance owns it
        return Target(open_location(args, str(run.spark_checkpoint)), "spark", root)
    return Target(open_location(args, run.checkpoint_location(info)), "run-dir", root)


def run(args: argparse.Namespace) -> int:
    """A dry run reads only; a cleanup that deletes holds the checkpoint's lock (exit 2 while another holds it)."""
    if args.sst_grace is not None and not 0 <= args.sst_grace <= 7 * 24 * 3600:
        raise UsageError(f"--sst-grace must be 0..604800 seconds, got {args.sst_grace}")
    t = _target(args)
    if args.delete_orphans and not t.spark:
        raise UsageError("--delete-orphans is for Spark checkpoints; a statebed checkpoint is cleaned without it")
    if t.spark and not (args.dry_run or args.delete_orphans):
        raise UsageError(
            f"{t.storage.url} is a Spark checkpoint: Spark's maintenance owns it; --dry-run lists the orphans, --delete-orphans deletes them"
        )
    if args.dry_run or t.lock_root is None:
        if t.lock_root is None and not args.dry_run:
            print("statebed cleanup: note: an s3:// checkpoint has no lock file; run one cleanup at a time", file=sys.stderr)
        return _cleanup(args, t)
    with lock(str(t.lock_root), f"cleanup --retain {args.retain}") as held:
        if held.previous is not None:
            print(f"statebed cleanup: note: took over the lock left by {held.previous.describe()}", file=sys.stderr)
        return _cleanup(args, t)


def _cleanup(args: argparse.Namespace, t: Target) -> int:
    if t.lock_root is not None and pending_journal(t.lock_root) is not None:
        raise UsageError(f"{t.lock_root / BACKUP_DIR}: an interrupted rewind must be finished first (any `statebed rewind` does)")
    retain = args.retain if args.retain is not None or t.spark else StoreOptions().retain_versions
    grace = StoreOptions().sst_orphan_grace_s if args.sst_grace is None else args.sst_grace
    done = cleanup_checkpoint(t.storage, retain, sst_orphan_grace_s=grace, dry_run=args.dry_run, delete_batch=args.delete_batch)
    if t.spark and not args.dry_run:
        _hadoop_crcs(t, done)
    if args.json:
        emit_json(_doc(args, t, done))
    else:
        _print(args, t, done)
    return EXIT_OK


def _hadoop_crcs(t: Target, done: CheckpointCleanup) -> None:
    """Spark on a local file system leaves `.<name>.crc` beside each file (hidden from listings): gone with it."""
    if t.lock_root is None:
        return
    for r in done.stores:
        for shown in r.reasons:
            crc = Path(shown).with_name(hadoop_crc_name(Path(shown).name))
            if crc.is_file() and not crc.is_symlink():
                os.unlink(crc)


def _doc(args: argparse.Namespace, t: Target, done: CheckpointCleanup) -> dict[str, object]:
    return {
        "checkpoint": t.storage.url,
        "layout": t.layout,
        "dryRun": bool(args.dry_run),
        "latestBatch": done.latest_batch,
        "retainedBatches": None if done.latest_batch is None else [done.first_retained, done.latest_batch],
        "files": done.files,
        "bytes": done.bytes,
        "stores": [
            {
                "store": r.store.dir,
                "retainedVersions": r.retained,
                "deleted": [{"path": p, "reason": why, "bytes": r.sizes[p]} for p, why in r.reasons.items()],
            }
            for r in done.stores
        ],
    }


def _print(args: argparse.Namespace, t: Target, done: CheckpointCleanup) -> None:
    if done.latest_batch is None:
        print(f"cleanup {printable(t.storage.url)} ({t.layout}): no committed batch; nothing to do")
        return
    print(
        f"cleanup {printable(t.storage.url)} ({t.layout}): latest batch {done.latest_batch}, "
        f"batches {done.first_retained}..{done.latest_batch} stay loadable"
    )
    for r in done.stores:
        for path, why in r.reasons.items():
            print(f"  {'would delete' if args.dry_run else 'deleted'} {printable(path)}: {why}, {r.sizes[path]} bytes")
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {done.files} file(s), {done.bytes} bytes, in {len(done.stores)} store(s)")
