"""A repartition moves rows, never changes them: the state before and after it holds the same rows.

Spark's offline repartition (4.2+, `StreamingCheckpointManager.repartition`) writes a stopped
query's state at version N as version N + 1 under a new partition count, as a batch of its own.
Its output is a snapshot per new partition with no changelog, so `snapshot_check` has no replay
route to compare it with, and an older snapshot of the same partition copied under its name (an
empty one, or one holding only keys a later batch overwrites) passes every file check and
`misplaced-key` (its keys may route anywhere or there may be none). What holds instead, whatever
the partitioner: the multiset of (key, value) rows of one store over all partitions is the same
at N and at N + 1. A difference is `repartition-mismatch`, naming the new partitions' files
holding rows that version N never had, or every new partition's file when rows went missing
(which partition lost them needs the partitioner).

Where a side cannot be loaded (retention deleted the old version, a damaged file), no rows are
compared: the lineage check names the damage and a note says why. Cost: one full load of every
partition at both versions, only at a batch where the partition count changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from statebed_base.errors import StatebedError
from statebed_store import CheckpointRef, StoreFiles, StoreId
from statebed_store.column_families import column_family_names_at
from statebed_store.commitlog import CommitRecord
from statebed_store.inspection import dump_state
from statebed_store.naming import CHANGELOG, DEFAULT_STORE, SNAPSHOT
from statebed_store.storage.base import Storage

from .result import Anomaly

__all__ = ["KIND", "Repartition", "repartition_anomalies", "repartitions"]

KIND = "repartition-mismatch"


@dataclass(frozen=True)
class Repartition:
    """Batch `batch` committed `after` partitions of `operator` where batch `batch - 1` committed `before`."""

    operator: int
    batch: int
    before: int
    after: int

    @property
    def version(self) -> int:
        """The version the repartition wrote (N + 1); the rows it moved are version N's."""
        return self.batch + 1


def repartitions(commits: Mapping[int, CommitRecord], operators: Iterable[int] = ()) -> list[Repartition]:
    """Every consecutive pair of kept entries whose partition count of an operator differs: a V2
    entry counts its ids, a V1 one has its offset log entry's count (`with_offset_partitions`) for
    each of `operators` (the state directory's)."""
    out = []
    for b in sorted(commits):
        prev, rec = commits.get(b - 1), commits[b]
        if prev is None:
            continue
        for op in sorted(set(rec.state_ids or {}) | set(operators)):
            before, after = prev.partition_count(op), rec.partition_count(op)
            if before is not None and after is not None and before != after:
                out.append(Repartition(op, b, before, after))
    return out


def _rows(storage: Storage, store: StoreId, ref: CheckpointRef) -> np.ndarray:
    """One 64-bit hash per (key, value) row of `store` at `ref` (Python's `hash`: stable within a
    process). A transformWithState store's key starts with its column family's id, which Spark's
    repartition may assign afresh: such a row is hashed with the family's name in place of its id."""
    names = column_family_names_at(StoreFiles(storage, store), ref.version)
    rows = dump_state(storage, store, ref)
    if not names:
        return np.fromiter((hash(row) for row in rows), dtype=np.int64)
    return np.fromiter((hash((names.get(int.from_bytes(k[:2], "little"), k[:2]), k[2:], v)) for k, v in rows), dtype=np.int64)


def _side(storage: Storage, stores: Iterable[tuple[StoreId, str | None]], version: int) -> dict[StoreId, np.ndarray] | StatebedError:
    """Each partition's rows at `version`, or the first error loading one."""
    out = {}
    for store, sid in stores:
        try:
            out[store] = _rows(storage, store, CheckpointRef(version, sid))
        except StatebedError as e:
            return e
    return out


def _shown(storage: Storage, store: StoreId, ref: CheckpointRef) -> str:
    files = StoreFiles(storage, store)
    return files.display(ref, SNAPSHOT if files.has_snapshot(ref) else CHANGELOG)


def repartition_anomalies(
    storage: Storage,
    stores: list[StoreId],
    commits: Mapping[int, CommitRecord],
    index_of: Callable[[StoreId], int],
    required: Callable[[int], bool],
) -> tuple[list[Anomaly], list[str]]:
    """A `repartition-mismatch` per (repartition, store name) whose rows differ across it; notes where none could be compared."""
    anomalies: list[Anomaly] = []
    notes: list[str] = []
    for rp in repartitions(commits, {s.operator for s in stores}):
        old_rec, new_rec = commits[rp.batch - 1], commits[rp.batch]
        for name in sorted({s.store_name for s in stores if s.operator == rp.operator}):
            mine = [s for s in stores if s.operator == rp.operator and s.store_name == name]
            old = [(s, old_rec.id_for(rp.operator, s.partition, index_of(s))) for s in mine if s.partition < rp.before]
            new = [(s, new_rec.id_for(rp.operator, s.partition, index_of(s))) for s in mine if s.partition < rp.after]
            label = "" if name == DEFAULT_STORE else f"[store {name}] "
            what = f"{label}the repartition of operator {rp.operator} at batch {rp.batch} ({rp.before} -> {rp.after} partitions)"
            if not required(rp.version - 1):
                notes.append(f"{what}: version {rp.version - 1} is below the retained window, its rows cannot be compared")
                continue
            if len(old) < rp.before or len(new) < rp.after:
                continue  # a partition with no state directory: `missing-checkpoint` names it
            before, after = _side(storage, old, rp.version - 1), _side(storage, new, rp.version)
            if isinstance(before, StatebedError) or isinstance(after, StatebedError):
                notes.append(f"{what}: a side does not load, its rows are not compared (the lineage check names the file)")
                continue
            found = _mismatch(storage, rp, what, before, dict(new), after)
            if found is not None:
                anomalies.append(found)
    return anomalies, notes


def _mismatch(
    storage: Storage,
    rp: Repartition,
    what: str,
    before: dict[StoreId, np.ndarray],
    ids: dict[StoreId, str | None],
    after: dict[StoreId, np.ndarray],
) -> Anomaly | None:
    old_rows = np.sort(np.concatenate(list(before.values()) or [np.empty(0, np.int64)]))
    new_rows = np.sort(np.concatenate(list(after.values()) or [np.empty(0, np.int64)]))
    if np.array_equal(old_rows, new_rows):
        return None
    foreign = [s for s, rows in after.items() if not np.isin(rows, old_rows).all()]
    blamed = sorted(foreign or after, key=lambda s: s.partition)
    refs = {s: CheckpointRef(rp.version, ids[s]) for s in blamed}
    return Anomaly(
        KIND,
        rp.operator,
        blamed[0].partition,
        rp.version,
        ids=[r.id for r in refs.values()],
        files=[_shown(storage, s, r) for s, r in refs.items()],
        batches=[rp.batch - 1, rp.batch],
        detail=f"{what} holds {len(new_rows)} row(s) at version {rp.version}, but version {rp.version - 1} held "
        f"{len(old_rows)} row(s)"
        + (f"; partition(s) {', '.join(str(s.partition) for s in foreign)} hold rows it never had" if foreign else "")
        + ": a repartition moves rows, never changes them",
    )
