"""`statebed dump`: the state of one store (or every store) at a version or committed batch, as JSON lines."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

from statebed_base.errors import UsageError
from statebed_store.column_families import in_family, select_column_family
from statebed_store.inspection import dump_state, render_bytes, resolve_target, stores_of_batch
from statebed_store.naming import StoreId
from statebed_store.partition_check import checked_items
from statebed_store.partitioner import checkpoint_partitioning
from statebed_store.statediff import select_stores, state_at_batch
from statebed_store.storage.base import Storage

from ..common import (
    EXIT_OK,
    add_checkpoint_args,
    add_store_args,
    add_target_args,
    checked_target,
    non_negative_int,
    open_checkpoint,
    store_from_args,
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "dump",
        help="print one store's (or every store's) state as JSON lines",
        description='One JSON object per key, in key order: {"key": text} when the bytes are printable UTF-8, '
        'else {"key_b64": base64}; likewise value/value_b64. Defaults to the latest committed version. '
        "Without --operator and --partition, every store at --batch (default: the latest), each line "
        'prefixed with {"operator", "partition", "store"}. A state holding a key that the checkpoint\'s partitioner '
        "sends to another partition is not served: one error line naming the store, version and keys, exit 2.",
    )
    add_checkpoint_args(p)
    add_store_args(p, required=False)
    add_target_args(
        p, required=False, version_help="state version (default: latest committed)", id_help="checkpoint unique id (with --version)"
    )
    p.add_argument("--batch", type=non_negative_int, help="the state committed batch B (version B+1, the id its commit names)")
    p.add_argument(
        "--state-var",
        "--cf",
        dest="state_var",
        metavar="NAME",
        help="only this column family of a transformWithState store (a state variable, or Spark's "
        "$rowCounter_<list> / $eventTimers_* / $procTimers_* / TTL families); keys are printed without "
        "their 2-byte family id",
    )
    p.add_argument("--json", action="store_true", help="accepted for uniformity: the output is always JSON lines")
    p.set_defaults(run=run)


def _line(key: bytes, value: bytes, where: dict[str, object] | None = None) -> str:
    return json.dumps({**(where or {}), **render_bytes("key", key), **render_bytes("value", value)}) + "\n"


def _family(
    storage: Storage, store: StoreId, stores: list[StoreId], name: str | None, items: Iterable[tuple[bytes, bytes]]
) -> Iterable[tuple[bytes, bytes]]:
    """All of `items`, or with `--state-var` only that column family's (the family is looked up first)."""
    if name is None:
        return items
    return in_family(items, select_column_family(storage, store, stores, name))


def run(args: argparse.Namespace) -> int:
    version, checkpoint_id = checked_target(args)
    if args.batch is not None and version is not None:
        raise UsageError("--batch and --version are alternatives: give one")
    storage = open_checkpoint(args)
    out = sys.stdout
    if args.operator is None and args.partition is None:
        if version is not None:
            raise UsageError("--version needs --operator and --partition (ids differ per store); use --batch for every store")
        batch, parts = args.batch, checkpoint_partitioning(storage)
        all_stores = select_stores(storage, None, None, None)
        in_batch, counts = stores_of_batch(storage, all_stores, batch)
        for store in in_batch:
            if batch is None:
                ref = resolve_target(storage, store, None, None)
                items = dump_state(storage, store, ref)
            else:
                ref, items = state_at_batch(storage, store, batch)
            where = {"operator": store.operator, "partition": store.partition, "store": store.store_name}
            partitioner = parts.get(store)
            partitioner = None if partitioner is None else partitioner.with_partitions(counts.get(store.operator))
            checked = checked_items(storage, store, ref, items, partitioner)  # nothing served when misplaced
            for key, value in _family(storage, store, all_stores, args.state_var, checked):
                out.write(_line(key, value, where))
        return EXIT_OK
    if args.operator is None or args.partition is None:
        raise UsageError("--operator and --partition go together (or omit both for every store)")
    store = store_from_args(args)
    if args.batch is not None:
        ref, items = state_at_batch(storage, store, args.batch)
    else:
        ref = resolve_target(storage, store, version, checkpoint_id)
        items = dump_state(storage, store, ref)
    checked = checked_items(storage, store, ref, items, checkpoint_partitioning(storage).get(store))
    for key, value in _family(storage, store, select_stores(storage, store.operator, None, None), args.state_var, checked):
        out.write(_line(key, value))
    return EXIT_OK
