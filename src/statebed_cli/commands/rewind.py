"""`statebed rewind`: restart a query from committed batch K by moving later log entries aside."""

from __future__ import annotations

import argparse
import sys

from statebed_base.errors import UsageError
from statebed_model.rewind import lock, plan_rewind, recover, undo
from statebed_model.rewind_journal import Journal

from ..common import EXIT_OK, emit_json, non_negative_int


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "rewind",
        help="rewind a checkpoint or run directory to a committed batch (moves, never deletes)",
        description="Move every offsets/commits entry after batch K (and a file source's log entries, and a run "
        "directory's input/staged/output files after K) into CKPT/_rewind/<UTC time>/files/, so the next start "
        "runs batch K+1 on the state batch K committed. Refuses, naming the file, when some store cannot load "
        "batch K. A journal is written before the first move; an interrupted rewind or undo is finished by the "
        "next `statebed rewind`. --undo moves the files of the last rewind back. A rewind or undo holds the "
        "checkpoint's lock (CKPT/.statebed-lock): a second one is refused, naming the holder, while it runs.",
    )
    p.add_argument("checkpoint", metavar="CKPT", help="a local run directory, Spark checkpoint or statebed checkpoint")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--to-batch", type=non_negative_int, metavar="K", help="the committed batch to restart after")
    what.add_argument("--undo", action="store_true", help="restore the files of the last rewind")
    p.add_argument("--dry-run", action="store_true", help="print what would move; change nothing")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def _moves_text(j: Journal, back: bool) -> list[str]:
    return [f"  move {m.dst} -> {m.src}" if back else f"  move {m.src} -> {m.dst}" for m in (reversed(j.moves) if back else j.moves)]


def run(args: argparse.Namespace) -> int:
    """A dry run reads only; anything that moves a file holds the checkpoint's lock (exit 2 while another holds it)."""
    if args.undo and args.dry_run:
        raise UsageError("--undo does not take --dry-run")
    if args.dry_run:
        return _rewind(args)
    with lock(args.checkpoint, "rewind --undo" if args.undo else f"rewind --to-batch {args.to_batch}") as held:
        if held.previous is not None:
            gone = "which is no longer running" if not held.previous.running() else "which no longer held it"
            print(f"statebed rewind: note: took over the lock left by {held.previous.describe()}, {gone}", file=sys.stderr)
        return _rewind(args)


def _rewind(args: argparse.Namespace) -> int:
    recovered = None if args.dry_run else recover(args.checkpoint)
    if recovered is not None:
        how = "completed" if recovered.status == "done" else "undid"
        print(f"statebed rewind: note: {how} the interrupted rewind {recovered.path}", file=sys.stderr)
    if args.undo:
        j = undo(args.checkpoint)
        if args.json:
            emit_json(
                {
                    "checkpoint": str(j.root),
                    "undone": j.dir,
                    "toBatch": j.to_batch,
                    "latestBatch": j.latest_batch,
                    "moves": [m.to_json() for m in j.moves],
                }
            )
        else:
            print(f"undid the rewind {j.dir} of {j.root} (batch {j.to_batch} -> back to {j.latest_batch}):")
            print("\n".join(_moves_text(j, back=True)))
        return EXIT_OK
    plan = plan_rewind(args.checkpoint, args.to_batch)
    journal = None if args.dry_run or not plan.moves else plan.journal()
    if journal is not None:
        journal.run_forward()
    doc = {**plan.to_json(journal), "dryRun": bool(args.dry_run), "recovered": recovered.dir if recovered else None}
    for note in plan.notes:
        print(f"statebed rewind: note: {note}", file=sys.stderr)
    if args.json:
        emit_json(doc)
        return EXIT_OK
    verb = "would move" if args.dry_run else "moved"
    print(
        f"rewind {plan.root} ({plan.layout}) to batch {plan.to_batch}: latest committed batch {plan.latest_batch}, {plan.stores} store(s) loadable at it"
    )
    if not doc["moves"]:
        print(f"  nothing to move: batch {plan.to_batch} is already the latest")
        return EXIT_OK
    print(f"{verb} {len(doc['moves'])} file(s):")
    for m in doc["moves"]:
        print(f"  {m['from']} -> {m['to']}")
    if not args.dry_run:
        print(f"next start runs batch {plan.to_batch + 1}; undo with `statebed rewind {args.checkpoint} --undo`")
    return EXIT_OK
