"""Spark's virtual column families: several state variables in one RocksDB instance, told apart by a key prefix.

transformWithState keeps every state variable of a partition (and its `$rowCounter_<list>`,
`$eventTimers_*` / `$procTimers_*`, TTL index families) in one RocksDB instance; each key
starts with its family's 2-byte id (little-endian, as Spark's `Platform.putShort` writes
it). The name -> id map is recorded only in snapshot metadata (`columnFamilyMapping`); ids
are assigned in registration order and never reused, so any snapshot of the operator
that records a family names its id.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from statebed_base.errors import StatebedError, UsageError

from .naming import StoreId
from .storage.base import Storage
from .store_files import StoreFiles

__all__ = ["column_family_ids", "column_family_names_at", "in_family", "select_column_family"]

_ID_BYTES = 2


def _mapping(files: StoreFiles, version: int | None = None) -> dict[str, int]:
    """The newest readable snapshot metadata's mapping in one store, of a version up to `version`
    when given ({} when none records one)."""
    snapshots = [r for r in files.refs() if files.has_snapshot(r) and (version is None or r.version <= version)]
    for ref in sorted(snapshots, key=lambda r: r.version, reverse=True):
        try:
            raw = files.snapshot_metadata(ref).extra.get("columnFamilyMapping")
        except StatebedError:
            continue  # a damaged snapshot names nothing; another may
        if isinstance(raw, dict) and all(isinstance(k, str) and isinstance(v, int) for k, v in raw.items()):
            return dict(raw)
    return {}


def column_family_ids(storage: Storage, store: StoreId, stores: Iterable[StoreId]) -> dict[str, int]:
    """Name -> id of every column family Spark recorded for `store`'s operator (its own snapshots first)."""
    same_op = [s for s in stores if s.operator == store.operator and s.store_name == store.store_name and s != store]
    for s in [store, *same_op]:
        found = _mapping(StoreFiles(storage, s))
        if found:
            return found
    return {}


def column_family_names_at(files: StoreFiles, version: int) -> dict[int, str]:
    """Id -> name of the families in force at `version` of one store: the mapping of its newest
    snapshot up to that version. Spark's offline repartition writes the new partitions' snapshots
    with ids assigned afresh, so one store's ids can mean other families before and after it."""
    return {v: k for k, v in _mapping(files, version).items()}


def select_column_family(storage: Storage, store: StoreId, stores: Iterable[StoreId], name: str) -> bytes:
    """The key prefix of column family `name` in `store`; UsageError naming the families there are."""
    ids = column_family_ids(storage, store, stores)
    if not ids:
        raise UsageError(
            f"{storage.display(store.dir)}: no snapshot of operator {store.operator} records column families "
            "(only transformWithState stores have them, named once a snapshot is uploaded)"
        )
    if name not in ids:
        raise UsageError(f"{storage.display(store.dir)}: no column family {name!r}; there are: {', '.join(sorted(ids))}")
    return ids[name].to_bytes(_ID_BYTES, "little")


def in_family(items: Iterable[tuple[bytes, bytes]], prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The entries of one family, keys without the family id (the state variable's own key bytes)."""
    for key, value in items:
        if key[:_ID_BYTES] == prefix:
            yield key[_ID_BYTES:], value
