"""`statebed diff`: the keys whose values differ between the state of two committed batches."""

from __future__ import annotations

import argparse
import json
import sys

from statebed_base.errors import UsageError
from statebed_store.inspection import render_bytes
from statebed_store.statediff import diff_stores, select_stores

from ..common import EXIT_OK, add_checkpoint_args, non_negative_int, open_checkpoint


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "diff",
        help="keys whose values differ between two committed batches (JSON lines)",
        description='One JSON object per differing key, store by store, in key order: {"operator", "partition", '
        '"store", "key" | "key_b64", "a" | "a_b64", "b" | "b_b64"}; a side is null when the key is absent there. '
        "Every store by default; narrow with --operator/--partition/--store.",
    )
    add_checkpoint_args(p)
    p.add_argument(
        "--batch", type=non_negative_int, action="append", required=True, metavar="B", help="a committed batch (give twice: A, then B)"
    )
    p.add_argument("--operator", type=non_negative_int, help="only this operator")
    p.add_argument("--partition", type=non_negative_int, help="only this partition")
    p.add_argument("--store", help="only this store name")
    p.add_argument("--json", action="store_true", help="accepted for uniformity: the output is always JSON lines")
    p.set_defaults(run=run)


def _side(name: str, value: bytes | None) -> dict[str, str | None]:
    if value is None:
        return {name: None}
    return dict(render_bytes(name, value))


def run(args: argparse.Namespace) -> int:
    if len(args.batch) != 2:
        raise UsageError(f"--batch must be given exactly twice (A and B), got {len(args.batch)}")
    a, b = args.batch
    storage = open_checkpoint(args)
    stores = select_stores(storage, args.operator, args.partition, args.store)
    out = sys.stdout
    for store, key, va, vb in diff_stores(storage, stores, a, b):
        where = {"operator": store.operator, "partition": store.partition, "store": store.store_name}
        out.write(json.dumps({**where, **render_bytes("key", key), **_side("a", va), **_side("b", vb)}) + "\n")
    return EXIT_OK
