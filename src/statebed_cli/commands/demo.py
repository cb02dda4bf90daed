"""`statebed demo`: write and reload a real checkpoint with the store alone (no Spark).

A small driver runs a count-per-key workload over P partitions, one provider per
partition as executors would hold them. One batch gets a second, slower attempt for a
partition (a speculative copy on another "executor"): both attempts write files, the
driver commits one id, checks every base id against the commit log, and the loser's file
stays as an orphan. At the end every partition is rebuilt from storage alone in a fresh
instance and compared with an oracle recomputed from the inputs. Re-running the command
on the same checkpoint continues from its commit log, as a restarted job would.

The checkpoint root gets a `demo.json` (format, partitions, rows, partitioner): demo refuses to write
into a non-empty directory without one (a Spark or `statebed run` checkpoint) and to
continue one with other partitions or rows (the oracle would not hold).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from statebed_base.errors import BaseIdMismatchError, MissingFileError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_base.names import printable
from statebed_store import CheckpointRef, CommitLog, CommitResult, StateStoreProvider, Storage, StoreId, StoreOptions
from statebed_store.formats import STATEBED_FORMATS, V2, get_format
from statebed_store.inspection import list_checkpoint
from statebed_store.location import is_remote
from statebed_store.partitioner import DEMO_MARKER, Partitioner

from ..common import EXIT_NEGATIVE, EXIT_OK, add_s3_args, non_negative_int, open_location

OPERATOR = 0
_U64 = struct.Struct(">Q")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="write and reload a checkpoint with the store alone (no Spark)", description=__doc__)
    p.add_argument("--checkpoint", default="runs/demo/checkpoint", help="checkpoint directory or s3://bucket/prefix (default: %(default)s)")
    p.add_argument("--batches", type=non_negative_int, default=12, help="batches to run (default: %(default)s)")
    p.add_argument("--partitions", type=non_negative_int, default=3, help="state partitions (default: %(default)s)")
    p.add_argument("--rows", type=non_negative_int, default=20_000, help="records per batch (default: %(default)s)")
    p.add_argument("--format", choices=sorted(STATEBED_FORMATS), default=V2.name, help="checkpoint format (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_s3_args(p)
    p.set_defaults(run=run)


def batch_keys(batch: int, rows: int) -> list[bytes]:
    """Deterministic input of one batch: `rows` keys over a 1000-key space."""
    seed = hashlib.sha256(b"statebed-demo-%d" % batch).digest()
    out = []
    for i in range(rows):
        h = hashlib.blake2b(seed + i.to_bytes(4, "big"), digest_size=4).digest()
        out.append(b"key-%03d" % (int.from_bytes(h, "big") % 1000))
    return out


def partition_of(key: bytes, partitions: int) -> int:
    """blake2b-32 of the key mod P: demo.json records it as the "blake2b32" partitioner the verifiers check."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") % partitions


def apply_counts(provider: StateStoreProvider, base: CheckpointRef, counts: Counter[bytes], task: str) -> CommitResult:
    keys = sorted(counts)
    with provider.load(base.version, base.id, task_info=task) as txn:
        old = txn.get_many(keys)
        txn.put_many(keys, [_U64.pack((_U64.unpack(o)[0] if o else 0) + counts[k]) for k, o in zip(keys, old)])
        return txn.commit()


MARKER = DEMO_MARKER  # the partition check reads its "partitioner" too


def claim_checkpoint(storage: Storage, params: dict[str, Any]) -> None:
    """Write `demo.json` into an empty root, or check the one there; refuse anything else before writing."""
    shown = storage.display(MARKER)
    try:
        found = loads_strict(storage.read(MARKER), file=shown, what="demo marker")
    except MissingFileError:
        if storage.list("") or storage.list_dirs(""):
            raise UsageError(
                f"{storage.url}: not empty and not a statebed demo checkpoint (no {MARKER}); "
                "demo writes only into an empty directory or one it created"
            ) from None
        storage.write(MARKER, json.dumps(params).encode(), create_only=True)
        return
    if not isinstance(found, dict):
        raise UsageError(f"{shown}: not a demo marker (expected a JSON object)")
    for key in ("partitions", "rows"):
        if found.get(key) != params[key]:
            raise UsageError(f"{shown}: this demo checkpoint was written with --{key} {found.get(key)}, not {params[key]}")


def run(args: argparse.Namespace) -> int:
    location = str(args.checkpoint)
    if not is_remote(location) and Path(location).exists() and not Path(location).is_dir():
        raise UsageError(f"--checkpoint {location}: exists and is not a directory")
    storage = open_location(args, location, create=True)
    parts = args.partitions or 1
    partitioner = Partitioner("blake2b32", parts, "bytes").to_json()
    claim_checkpoint(storage, {"format": args.format, "partitions": parts, "rows": args.rows, "partitioner": partitioner})
    local = Path(tempfile.mkdtemp(prefix="statebed-demo-"))
    try:
        return _run(args, storage, parts, local)
    finally:
        shutil.rmtree(local, ignore_errors=True)


def _run(args: argparse.Namespace, storage: Storage, parts: int, local: Path) -> int:
    log = CommitLog(storage)
    done = log.batch_ids()
    start = done[-1] + 1 if done else 0
    opts = StoreOptions(format=args.format, snapshot_interval=4, local_dir=local / "executor-1")
    providers = [StateStoreProvider(storage, StoreId(OPERATOR, p), opts) for p in range(parts)]
    # A second "executor" for the speculative copy: its own local instances.
    spec_opts = opts.with_(local_dir=local / "executor-2")
    spec_batch = start + min(2, max(args.batches - 1, 0))
    t0 = time.perf_counter()
    try:
        for b in range(start, start + args.batches):
            prev = log.read(b - 1) if b else None
            per_part: list[Counter[bytes]] = [Counter() for _ in range(parts)]
            for k in batch_keys(b, args.rows):
                per_part[partition_of(k, parts)][k] += 1
            results = []
            for p in range(parts):
                base = CheckpointRef(b, prev.id_for(OPERATOR, p) if prev else None)
                res = apply_counts(providers[p], base, per_part[p], f"batch {b} partition {p} attempt 0")
                if b == spec_batch and p == min(1, parts - 1):
                    with StateStoreProvider(storage, StoreId(OPERATOR, p), spec_opts) as spec:
                        apply_counts(spec, base, per_part[p], f"batch {b} partition {p} attempt 1 (speculative)")
                results.append(res)
            for p, res in enumerate(results):  # the driver's check that Spark 4.0/4.1 does not do
                expected = prev.id_for(OPERATOR, p) if prev else None
                if res.base_id != expected:
                    raise BaseIdMismatchError(f"batch {b} partition {p}: task built on {res.base_id}, commit log has {expected}")
            ids = {OPERATOR: [[r.checkpoint_id] for r in results]} if get_format(args.format).ids else None
            log.write(b, ids)
            print(f"batch {b}: committed version {b + 1} for {parts} partitions", file=sys.stderr)
        providers[0].uploader.drain(30)
    finally:  # on errors too: no uploader thread or lock outlives the demo
        for pr in providers:
            pr.close()
    write_s = time.perf_counter() - t0

    # Rebuild every partition from storage alone and compare with the oracle.
    latest = log.latest()
    oracle: Counter[bytes] = Counter()
    for b in range(0, latest.batch_id + 1 if latest else 0):
        oracle.update(batch_keys(b, args.rows))
    mismatches = []
    t1 = time.perf_counter()
    for p in range(parts):
        ref = CheckpointRef(latest.version, latest.id_for(OPERATOR, p)) if latest else CheckpointRef(0)
        with StateStoreProvider(storage, StoreId(OPERATOR, p), opts.with_(local_dir=local / "verifier")) as fresh:
            with fresh.load(ref.version, ref.id) as txn:
                got = {k: _U64.unpack(v)[0] for k, v in txn.items()}
        want = {k: c for k, c in oracle.items() if partition_of(k, parts) == p}
        if got != want:
            bad = sorted(set(got) ^ set(want) | {k for k in got.keys() & want.keys() if got[k] != want[k]})
            mismatches.append({"partition": p, "keys": [k.decode() for k in bad[:5]]})
    reload_s = time.perf_counter() - t1
    listing = list_checkpoint(storage)
    files = sum(len(v["ids"]) for s in listing["stores"] for v in s["versions"])
    orphans = sum(1 for s in listing["stores"] for v in s["versions"] for e in v["ids"] if not e["committed"] and v["version"] > 0)
    summary = {
        "checkpoint": storage.url,
        "format": args.format,
        "batches_run": args.batches,
        "latest_batch": latest.batch_id if latest else None,
        "partitions": parts,
        "checkpoints_written": files,
        "uncommitted_checkpoints": orphans,
        "write_seconds": round(write_s, 3),
        "reload_seconds": round(reload_s, 3),
        "state_equals_oracle": not mismatches,
        "mismatches": mismatches,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for name, value in summary.items():
            print(f"{name:>24}: {printable(value)}")
        print(f"\nInspect it: statebed ls {printable(storage.url)}")
    return EXIT_OK if not mismatches else EXIT_NEGATIVE
