"""The cross-partition key invariant: no key is in two partitions of one store at one version.

Whatever the partitioner (known, unknown, or changed by a repartition batch), a keyed
operator routes each key to exactly one partition of a batch, so the keys a committed file
of version v touches (a changelog's puts and deletes) or holds (a snapshot) are never in
another partition's committed file of the same operator, store and version. A file copied
from one partition into another breaks it without any hash being known. Only partitions of
the same version are compared: the partition count may change at a repartition batch. No
column family is excluded: every family Spark 4.3 writes into these stores (aggregation,
dedup, join, transformWithState) is keyed by the grouping key.

Cost: one 64-bit hash per key (Python's `hash` of the key bytes, stable within a process),
held per (store, version, partition) as a numpy array; a store's version is compared with
one `np.unique` over its partitions. The keys themselves are read again only to name sample
keys when a collision is found.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from statebed_store import CheckpointRef, StoreFiles, StoreId
from statebed_store.errors import StatebedError
from statebed_store.naming import CHANGELOG, SNAPSHOT
from statebed_store.partition_check import file_keys
from statebed_store.partitioner import Keys

from .result import Anomaly

__all__ = ["KIND", "CrossPartitionKeys"]

KIND = "cross-partition-key"
SAMPLE = 5


def _as_bytes(keys: Keys) -> list[bytes]:
    if isinstance(keys, np.ndarray):
        return [row.tobytes() for row in keys]
    return [bytes(k) for k in keys]


def _hashes(keys: Keys) -> np.ndarray:
    arr = np.fromiter((hash(k) for k in _as_bytes(keys)), dtype=np.int64)
    return np.unique(arr)


@dataclass
class _File:
    files: StoreFiles
    ref: CheckpointRef
    kind: str
    hashes: np.ndarray


@dataclass
class CrossPartitionKeys:
    """Collects each committed file's key hashes, then reports keys found in two partitions."""

    seen: dict[tuple[int, str, int], dict[int, _File]] = field(default_factory=dict)

    def add(self, store: StoreId, files: StoreFiles, refs: list[CheckpointRef]) -> None:
        """Remember the keys of each committed `ref`'s file (its changelog, else its snapshot)."""
        for ref in refs:
            kind = CHANGELOG if files.has_changelog(ref) else SNAPSHOT if files.has_snapshot(ref) else None
            if kind is None:
                continue
            try:
                hashes = _hashes(file_keys(files, ref, kind))
            except StatebedError:
                continue  # unreadable: the lineage check names it
            self.seen.setdefault((store.operator, store.store_name, ref.version), {})[store.partition] = _File(files, ref, kind, hashes)

    def anomalies(self) -> list[Anomaly]:
        out = []
        for (op, name, version), parts in sorted(self.seen.items()):
            if len(parts) < 2:
                continue
            ids = np.concatenate([f.hashes for f in parts.values()])
            values, counts = np.unique(ids, return_counts=True)
            shared = values[counts > 1]
            if len(shared):
                out.append(_anomaly(op, name, version, parts, set(shared.tolist())))
        return out


def _anomaly(op: int, name: str, version: int, parts: dict[int, _File], shared: set[int]) -> Anomaly:
    where = sorted(p for p, f in parts.items() if shared & set(f.hashes.tolist()))
    first = parts[where[0]]
    sample = [k for k in _as_bytes(file_keys(first.files, first.ref, first.kind)) if hash(k) in shared][:SAMPLE]
    label = "" if name == "default" else f"[store {name}] "
    return Anomaly(
        KIND,
        op,
        where[0],
        version,
        ids=[parts[p].ref.id for p in where],
        files=[parts[p].files.display(parts[p].ref, parts[p].kind) for p in where],
        keys=[k.hex() for k in sample],
        detail=f"{label}{len(shared)} key(s) are in the state of partitions {', '.join(map(str, where))} of operator {op} "
        f"at version {version}: a keyed operator puts each key in one partition (a file copied across partitions?)",
    )
