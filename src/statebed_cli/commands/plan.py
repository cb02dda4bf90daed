"""`statebed plan`: which snapshot and changelogs would load a `(version, id)`."""

from __future__ import annotations

import argparse
import sys

from statebed_base.errors import UsageError
from statebed_base.names import printable
from statebed_store import CheckpointRef, StoreFiles
from statebed_store.inspection import plan_json
from statebed_store.plan import loadable_plan

from ..common import (
    EXIT_OK,
    add_checkpoint_args,
    add_store_args,
    add_target_args,
    checked_target,
    emit_json,
    open_checkpoint,
    store_from_args,
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "plan",
        help="show the load plan of a (version, id); checks every file it names",
        description="Print the snapshot and changelogs that rebuild VERSION/ID, after reading the header of each. "
        "Exit 2, naming the file, when no loadable plan exists.",
    )
    add_checkpoint_args(p)
    add_store_args(p)
    add_target_args(p, required=True, version_help="state version (batch id + 1)", id_help="checkpoint unique id (omit for V1 checkpoints)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    version, checkpoint_id = checked_target(args)
    storage = open_checkpoint(args)
    store = store_from_args(args)
    files = StoreFiles(storage, store)
    target = CheckpointRef(version, checkpoint_id)  # type: ignore[arg-type]
    _refuse_v1_load_of_v2(files, target)
    plan, passed_over = loadable_plan(files, target)
    doc = plan_json(files, plan)
    for err in passed_over:
        print(f"statebed plan: note: planned around an unusable snapshot: {printable(err)}", file=sys.stderr)
    if args.json:
        emit_json(doc)
        return EXIT_OK
    print(f"plan for {plan.target} of {store} in {printable(storage.url)}")
    rows = ([("snapshot", doc["snapshot"])] if doc["snapshot"] else []) + [("changelog", c) for c in doc["changelogs"]]
    if not rows:
        print("  (empty state: version 0)")
    for kind, f in rows:
        print(f"  {kind:<9} {f['version']:>8}  {f['id'] or '-':<36}  {printable(f['file'])}")
    return EXIT_OK


def _refuse_v1_load_of_v2(files: StoreFiles, target: CheckpointRef) -> None:
    """Without --id a version is planned by name (V1); say so when only V2 files exist there."""
    if target.id is not None or target.version == 0 or files.has_changelog(target) or files.has_snapshot(target):
        return
    ids = sorted({n.id for n in files.files if n.version == target.version and n.id is not None})
    if ids:
        raise UsageError(
            f"version {target.version} of {files.store} in {files.storage.url} is a V2 checkpoint (ids {', '.join(ids)}): pass --id"
        )
