"""`statebed dump`: the state of one store at a version, as JSON lines."""

from __future__ import annotations

import argparse
import json
import sys

from statebed_store.inspection import dump_state, render_bytes, resolve_target

from ..common import EXIT_OK, add_checkpoint_args, add_store_args, add_target_args, checked_target, open_checkpoint, store_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "dump",
        help="print one store's state as JSON lines",
        description='One JSON object per key, in key order: {"key": text} when the bytes are printable UTF-8, '
        'else {"key_b64": base64}; likewise value/value_b64. Defaults to the latest committed version.',
    )
    add_checkpoint_args(p)
    add_store_args(p)
    add_target_args(
        p, required=False, version_help="state version (default: latest committed)", id_help="checkpoint unique id (with --version)"
    )
    p.add_argument("--json", action="store_true", help="accepted for uniformity: the output is always JSON lines")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    version, checkpoint_id = checked_target(args)
    storage = open_checkpoint(args)
    store = store_from_args(args)
    ref = resolve_target(storage, store, version, checkpoint_id)
    out = sys.stdout
    for key, value in dump_state(storage, store, ref):
        out.write(json.dumps({**render_bytes("key", key), **render_bytes("value", value)}) + "\n")
    return EXIT_OK
