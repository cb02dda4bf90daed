"""State at committed batches, store by store, and the keys whose values differ between two.

What a user asks before and after a rewind: what did batch A hold, and what changed by
batch B. Each side is rebuilt with the loads' own code (`inspection.dump_state`), which
yields keys in RocksDB's byte order, so two states are compared in one merge pass without
holding either in memory. Read-only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from statebed_base.errors import UsageError

from .inspection import committed_ref, discover_stores, dump_state
from .lineage import CheckpointRef
from .naming import StoreId
from .storage.base import Storage

__all__ = ["diff_items", "diff_stores", "select_stores", "state_at_batch"]

Items = Iterable[tuple[bytes, bytes]]


def select_stores(storage: Storage, operator: int | None, partition: int | None, store_name: str | None) -> list[StoreId]:
    """Every store of the checkpoint, narrowed by whichever of operator / partition / store name is given."""
    stores = [
        s
        for s in discover_stores(storage)
        if (operator is None or s.operator == operator)
        and (partition is None or s.partition == partition)
        and (store_name is None or s.store_name == store_name)
    ]
    if not stores:
        raise UsageError(f"{storage.url}: no state store matches operator {operator} partition {partition} store {store_name}")
    return stores


def _siblings(storage: Storage, store: StoreId) -> list[str]:
    return [s.store_name for s in discover_stores(storage) if (s.operator, s.partition) == (store.operator, store.partition)]


def state_at_batch(storage: Storage, store: StoreId, batch: int) -> tuple[CheckpointRef, Iterator[tuple[bytes, bytes]]]:
    """The `(version, id)` committed batch `batch` names for `store`, and its state in key order."""
    ref = committed_ref(storage, store, _siblings(storage, store), batch)
    return ref, dump_state(storage, store, ref)


def diff_items(a: Items, b: Items) -> Iterator[tuple[bytes, bytes | None, bytes | None]]:
    """Keys whose values differ between two key-ordered states: (key, value in a or None, value in b or None)."""
    ia, ib = iter(a), iter(b)
    na, nb = next(ia, None), next(ib, None)
    while na is not None or nb is not None:
        if nb is None or (na is not None and na[0] < nb[0]):
            assert na is not None
            yield na[0], na[1], None
            na = next(ia, None)
        elif na is None or nb[0] < na[0]:
            yield nb[0], None, nb[1]
            nb = next(ib, None)
        else:
            if na[1] != nb[1]:
                yield na[0], na[1], nb[1]
            na, nb = next(ia, None), next(ib, None)


def diff_stores(storage: Storage, stores: list[StoreId], a: int, b: int) -> Iterator[tuple[StoreId, bytes, bytes | None, bytes | None]]:
    """`diff_items` between committed batches `a` and `b`, for each store in turn."""
    for store in stores:
        _, left = state_at_batch(storage, store, a)
        _, right = state_at_batch(storage, store, b)
        for key, va, vb in diff_items(left, right):
            yield store, key, va, vb
