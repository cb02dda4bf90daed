"""`statebed ls`: every store, version and id in a checkpoint, and which are committed."""

from __future__ import annotations

import argparse
import sys

from statebed_base.names import printable
from statebed_store.inspection import list_checkpoint
from statebed_store.rebuild import rebuildability

from ..common import EXIT_OK, add_checkpoint_args, emit_json, open_checkpoint


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "ls",
        help="list stores, versions, ids, committed ids and lineage",
        description="Per operator/partition/store: every version with its ids, which one the commit log "
        "committed, snapshot/changelog presence and the lineage each file records.",
    )
    add_checkpoint_args(p)
    p.add_argument(
        "--rebuildable",
        action="store_true",
        help="per store, the committed batches whose state can still be loaded (every file on the plan present and "
        "checked), and the newest that cannot, with the reason",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def _short(text: str | None) -> str:
    return "-" if text is None else text[:8]


def _spans(spans: list[list[int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans) or "none"


def _rebuildable(args: argparse.Namespace) -> int:
    doc = rebuildability(open_checkpoint(args))
    for note in doc["notes"]:
        print(f"statebed ls: note: {printable(note)}", file=sys.stderr)
    if args.json:
        emit_json(doc)
        return EXIT_OK
    print(
        f"{printable(doc['checkpoint'])}: committed batches {_spans(doc['committed'])}; rebuildable in every store: {_spans(doc['rebuildable'])}"
    )
    for s in doc["stores"]:
        bad = s["firstUnrebuildable"]
        why = f"; batch {bad['batch']} cannot: {printable(bad['reason'])}" if bad else ""
        print(f"  operator {s['operator']} partition {s['partition']} store {s['store']}: batches {_spans(s['rebuildable'])}{why}")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    if args.rebuildable:
        return _rebuildable(args)
    storage = open_checkpoint(args)
    doc = list_checkpoint(storage)
    for note in doc["notes"]:
        print(f"statebed ls: note: {printable(note)}", file=sys.stderr)
    if args.json:
        emit_json(doc)
        return EXIT_OK
    c = doc["commits"]
    print(f"{printable(doc['checkpoint'])}: format {doc['format']}, {c['count']} commits, latest batch {c['latestBatch']}")
    for s in doc["stores"]:
        print(f"\noperator {s['operator']} partition {s['partition']} store {printable(s['store'])} ({printable(s['dir'])})")
        print(f"  {'version':>8}  {'id':<8}  {'commit':<6}  {'files':<18}  {'needed':<18}  lineage")
        for v in s["versions"]:
            for e in v["ids"]:
                files = "+".join(k for k in ("changelog", "snapshot") if e[k])
                lineage = printable(e.get("error") or "") or ",".join(f"{x['version']}:{_short(x['id'])}" for x in (e["lineage"] or []))
                mark = "yes" if e["committed"] else ""
                print(f"  {v['version']:>8}  {_short(e['id']):<8}  {mark:<6}  {files:<18}  {'+'.join(e['needed']):<18}  {lineage}")
    return EXIT_OK
