"""`statebed plan`: which snapshot and changelogs would load a `(version, id)`."""

from __future__ import annotations

import argparse

from statebed_store import CheckpointRef, StoreFiles, check_plan, plan_load
from statebed_store.inspection import plan_json

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
    plan = plan_load(files, CheckpointRef(version, checkpoint_id))  # type: ignore[arg-type]
    check_plan(files, plan)
    doc = plan_json(files, plan)
    if args.json:
        emit_json(doc)
        return EXIT_OK
    print(f"plan for {plan.target} of {store} in {storage.url}")
    rows = ([("snapshot", doc["snapshot"])] if doc["snapshot"] else []) + [("changelog", c) for c in doc["changelogs"]]
    if not rows:
        print("  (empty state: version 0)")
    for kind, f in rows:
        print(f"  {kind:<9} {f['version']:>8}  {f['id'] or '-':<36}  {f['file']}")
    return EXIT_OK
