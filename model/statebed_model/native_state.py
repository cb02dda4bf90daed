"""Spark-native state, translated into the encoding statebed's workloads use.

Native mode runs each workload as a plain Spark query on Spark's own RocksDB store; its
state rows are UnsafeRows. Translating them into the `(key, value)` bytes the workload's
statebed state uses lets one `Workload.check` judge both stores. Pure: no Spark import.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator

from statebed_store.errors import UsageError
from statebed_store.unsaferow import decode_row

__all__ = ["NATIVE_STATE", "native_items"]

Items = Iterable[tuple[bytes, bytes]]


def _count(items: Items) -> Iterator[tuple[bytes, bytes]]:
    """groupBy(key).agg(count, sum(value)): key row (key), value row (count, sum)."""
    for k, v in items:
        (key,) = decode_row(k, ["long"], what="count state key")
        count, total = decode_row(v, ["long", "long"], what="count state value")
        yield key.to_bytes(8, "big"), struct.pack(">qq", count or 0, total or 0)


NATIVE_STATE: dict[str, Callable[[Items], Iterator[tuple[bytes, bytes]]]] = {"count": _count}


def native_items(workload: str, items: Items) -> Iterator[tuple[bytes, bytes]]:
    try:
        translate = NATIVE_STATE[workload]
    except KeyError:
        raise UsageError(f"native mode has no state reader for workload {workload!r} (supported: {', '.join(NATIVE_STATE)})") from None
    return translate(items)
