"""The cross-partition key invariant: no key is in two partitions of one store at one version.

Whatever the partitioner (known, unknown, or changed by a repartition batch), a keyed
operator routes each key to exactly one partition of a batch, so the keys a committed file
of version v touches (a changelog's puts and deletes) or holds (a snapshot) are never in
another partition's committed file of the same operator, store and version; nor is a key of
partition p's loaded state at version v in another partition's state at v. A file copied
from one partition into another breaks it without any hash being known. Only partitions of
the same version are compared: the partition count may change at a repartition batch. No
column family is excluded: every family Spark 4.3 writes into these stores (aggregation,
dedup, join, transformWithState) is keyed by the grouping key.

One owner for both verifiers: `verify lineage` adds each committed file's keys
(`CrossPartitionKeys.add`), `verify state` each partition's final state
(`CrossPartitionKeys.add_keys`); `anomalies()` compares them.

Cost: one 64-bit hash per key (Python's `hash` of the key bytes, stable within a process),
held per (store, version, partition) as a sorted numpy array of distinct hashes; a store's
version is compared with one sort over its partitions' hashes (`benchmarks/cross_partition.py`:
0.2 s for 1M keys over 4 partitions). Only when hashes meet are the keys read again: the
partitions holding a shared hash are compared key by key, so a hash collision alone is never
reported, and the anomaly names up to 5 of the keys really shared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from statebed_base.errors import StatebedError
from statebed_store import CheckpointRef, StoreFiles, StoreId
from statebed_store.naming import CHANGELOG, DEFAULT_STORE, SNAPSHOT
from statebed_store.partition_check import file_keys
from statebed_store.partitioner import Keys

from .result import Anomaly

__all__ = ["KIND", "CrossPartitionKeys", "PartitionKeys", "cross_partition_anomaly", "key_hashes"]

KIND = "cross-partition-key"
SAMPLE = 5


def _as_bytes(keys: Keys) -> Iterable[bytes]:
    """Each key as bytes: an (n, width) array's rows (a changelog's equal-width keys) hash as the same bytes in a list."""
    if isinstance(keys, np.ndarray):
        blob, width = np.ascontiguousarray(keys).tobytes(), keys.shape[1]
        return (blob[i : i + width] for i in range(0, len(blob), width))
    return keys


def _distinct(values: np.ndarray) -> np.ndarray:
    """`values` sorted, each once. Not `np.unique`: without counts numpy 2.4 takes a hash-based path, measured here
    at 0.24 s for 250,000 int64s where a sort takes 0.004 s."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values


def key_hashes(keys: Keys) -> np.ndarray:
    """The distinct 64-bit hashes of `keys`, sorted (Python's `hash` of each key's bytes)."""
    return _distinct(np.fromiter(map(hash, _as_bytes(keys)), dtype=np.int64, count=len(keys)))


@dataclass(frozen=True)
class PartitionKeys:
    """One partition's keys at one version: their hashes, where they came from, how to read them again."""

    ref: CheckpointRef
    shown: str  # the file (lineage) or the store directory (state) the keys are of
    hashes: np.ndarray
    read: Callable[[], Keys]  # the keys again: called only when this partition holds a shared hash

    @classmethod
    def of(cls, ref: CheckpointRef, shown: str, keys: Keys, read: Callable[[], Keys] | None = None) -> PartitionKeys:
        """Hash `keys` now; keep `read` (default: `keys` themselves) to name them if they meet another partition's."""
        return cls(ref, shown, key_hashes(keys), read if read is not None else lambda: keys)


@dataclass
class CrossPartitionKeys:
    """Collects each partition's key hashes per (operator, store, version), then reports keys found in two partitions."""

    seen: dict[tuple[int, str, int], dict[int, PartitionKeys]] = field(default_factory=dict)

    def add(self, store: StoreId, files: StoreFiles, refs: list[CheckpointRef]) -> None:
        """Remember the keys of each committed `ref`'s file (its changelog, else its snapshot); the keys are not kept."""
        for ref in refs:
            kind = CHANGELOG if files.has_changelog(ref) else SNAPSHOT if files.has_snapshot(ref) else None
            if kind is None:
                continue
            try:
                keys = file_keys(files, ref, kind)
            except StatebedError:
                continue  # unreadable: the lineage check names it
            self._put(store, PartitionKeys.of(ref, files.display(ref, kind), keys, partial(file_keys, files, ref, kind)))

    def add_keys(self, store: StoreId, ref: CheckpointRef, shown: str, keys: Keys) -> None:
        """Remember the keys of `store`'s state at `ref` (loaded whole: they are kept to name a collision)."""
        self._put(store, PartitionKeys.of(ref, shown, keys))

    def _put(self, store: StoreId, keys: PartitionKeys) -> None:
        self.seen.setdefault((store.operator, store.store_name, keys.ref.version), {})[store.partition] = keys

    def anomalies(self) -> list[Anomaly]:
        out = []
        for (op, name, version), parts in sorted(self.seen.items()):
            found = cross_partition_anomaly(op, name, version, parts)
            if found is not None:
                out.append(found)
        return out


def cross_partition_anomaly(operator: int, store_name: str, version: int, parts: Mapping[int, PartitionKeys]) -> Anomaly | None:
    """The `cross-partition-key` anomaly of one store at one version (None: every key is in one partition)."""
    if len(parts) < 2:
        return None
    every = np.sort(np.concatenate([k.hashes for k in parts.values()]))  # each partition's hashes are distinct
    shared = _distinct(every[1:][every[1:] == every[:-1]])
    if not len(shared):
        return None
    wanted = set(shared.tolist())
    holders: dict[bytes, set[int]] = {}
    for p in sorted(parts):
        if np.isin(parts[p].hashes, shared, assume_unique=True).any():
            for k in _as_bytes(parts[p].read()):
                if hash(k) in wanted:
                    holders.setdefault(k, set()).add(p)
    keys = sorted(k for k, ps in holders.items() if len(ps) > 1)
    if not keys:
        return None  # only hashes met: no key is in two partitions
    where = sorted({p for k in keys for p in holders[k]})
    label = "" if store_name == DEFAULT_STORE else f"[store {store_name}] "
    return Anomaly(
        KIND,
        operator,
        where[0],
        version,
        ids=[parts[p].ref.id for p in where],
        files=[parts[p].shown for p in where],
        keys=[k.hex() for k in keys[:SAMPLE]],
        detail=f"{label}{len(keys)} key(s) are in the state of partitions {', '.join(map(str, where))} of operator {operator} "
        f"at version {version}: a keyed operator puts each key in one partition (a file copied across partitions?)",
    )
