"""The partition invariant checked on what a checkpoint's files hold (see `partitioner`).

A changelog's keys (puts and deletes alike: a task only ever touches its own partition's
keys) and a snapshot's keys must all belong to the store's partition. Each file is checked
once per `StoreFiles`, its verdict kept, so `ls --rebuildable` pays once per file however
many committed batches' plans share it. Loaded state (`dump`) is checked as a whole.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from statebed_base.errors import MisplacedKeyError

from .changelog import DELETE, PUT, parse_changelog
from .lineage import CheckpointRef
from .naming import CHANGELOG, SNAPSHOT, StoreId
from .partitioner import Keys, Partitioner, check_keys
from .plan import LoadPlan
from .storage.base import Storage
from .store_files import StoreFiles
from .unpack import throwaway_snapshot

__all__ = ["check_file", "check_plan_keys", "checked_items", "file_keys"]


def file_keys(files: StoreFiles, ref: CheckpointRef, kind: str) -> Keys:
    """Every key a changelog touches (puts and deletes) or a snapshot holds; read errors propagate."""
    if kind == CHANGELOG:
        shown = files.display(ref, CHANGELOG)
        cl = parse_changelog(files.read_verified(ref, CHANGELOG), file=shown, version=ref.version)
        fixed = _equal_width_keys(cl.payload, cl.header.records_offset, cl.header.format_version in (2, 4))
        if fixed is not None:  # puts only: their keys are plain
            return fixed
        ops, keys, values = cl.columns()
        if files.row_checksums is None:
            return keys
        return files.row_checksums.replay_columns(ops, keys, values, DELETE, file=shown)  # a delete's key carries its checksum
    return _snapshot_keys(files, ref)


def _equal_width_keys(payload: bytes, start: int, typed: bool) -> np.ndarray | None:
    """Every key as one (n, width) array when all records are puts of one key width and one value
    width (statebed's count state: a million records in milliseconds); None: walk the records."""
    head, end = (5, b"\x00") if typed else (4, b"\xff\xff\xff\xff")  # `[type] klen` before a key; the end record
    if bytes(payload[-len(end) :]) != end:
        return None
    body = memoryview(payload)[start : len(payload) - len(end)]
    if len(body) < head + 4:
        return None
    klen = int.from_bytes(body[head - 4 : head], "big", signed=True)
    if klen < 0 or len(body) < head + klen + 4:
        return None
    vlen = int.from_bytes(body[head + klen : head + klen + 4], "big", signed=True)
    stride = head + klen + 4 + vlen
    if vlen < 0 or len(body) % stride:
        return None
    rows = np.frombuffer(body, dtype=np.uint8).reshape(-1, stride)
    lengths = np.concatenate([rows[:, head - 4 : head], rows[:, head + klen : head + klen + 4]], axis=1)
    if (lengths != lengths[0]).any() or (typed and (rows[:, 0] != PUT).any()):
        return None
    return rows[:, head : head + klen]


def _snapshot_keys(files: StoreFiles, snap: CheckpointRef) -> list[bytes]:
    """Every key of a snapshot, opened in a throwaway directory (no provider, no local cache, no fsync)."""
    with throwaway_snapshot(files, snap, "statebed-keys-") as engine:
        return list(engine.db.keys())  # type: ignore[arg-type]  # raw mode: bytes; entries checked on open (CRC32C or a full read)


def check_file(files: StoreFiles, partitioner: Partitioner, ref: CheckpointRef, kind: str) -> MisplacedKeyError | None:
    """The misplaced keys of one file (None: all in place). Read errors propagate: other checks name them."""

    def check() -> MisplacedKeyError | None:
        try:
            check_keys(partitioner, files.store, file_keys(files, ref, kind), where=files.display(ref, kind), version=ref.version)
        except MisplacedKeyError as e:
            return e
        return None

    return files.checked_once(("partition keys", f"{files.display(ref, kind)} over {partitioner.partitions}"), check)


def check_plan_keys(files: StoreFiles, plan: LoadPlan, partitioner: Partitioner) -> None:
    """Raise the first MisplacedKeyError among the files `plan` loads (its snapshot, then its changelogs)."""
    parts = [(plan.snapshot, SNAPSHOT)] if plan.snapshot is not None else []
    for ref, kind in parts + [(r, CHANGELOG) for r in plan.changelogs]:
        err = check_file(files, partitioner, ref, kind)
        if err is not None:
            raise err


def checked_items(
    storage: Storage, store: StoreId, ref: CheckpointRef, items: Iterable[tuple[bytes, bytes]], partitioner: Partitioner | None
) -> list[tuple[bytes, bytes]]:
    """`items` of a loaded state, whole, after checking every key belongs to `store`'s partition."""
    out = list(items)
    if partitioner is not None:
        check_keys(partitioner, store, [k for k, _ in out], where=storage.display(store.dir), version=ref.version)
    return out
