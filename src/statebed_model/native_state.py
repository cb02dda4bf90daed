"""Spark-native state, translated into the encoding statebed's workloads use.

Native mode runs each workload as a plain Spark query on Spark's own RocksDB store; its
state rows are UnsafeRows. Translating them into the `(key, value)` bytes the workload's
statebed state uses lets one `Workload.check` judge both stores. Pure: no Spark import.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from statebed_base.errors import CorruptFileError, MissingFileError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_store.column_families import column_family_ids
from statebed_store.naming import StoreId
from statebed_store.storage import Storage
from statebed_store.unsaferow import decode_row

from .rundir import RunDir

__all__ = [
    "NATIVE_STATE",
    "NATIVE_WORKLOADS",
    "READERS_FILE",
    "ReaderCheck",
    "collect_list_ids",
    "column_families",
    "encode_bucket",
    "encode_count",
    "encode_sample",
    "native_items",
    "native_state_items",
    "read_reader_check",
    "write_reader_check",
]

Items = Iterable[tuple[bytes, bytes]]
_ROW_VERSION = b"\x00"  # the version byte Spark's state encoding puts before each UnsafeRow (decode_row wants it)


# -- the workloads' statebed encodings (both readers of native state translate into these) ---------
def encode_count(key: int, count: int | None, total: int | None) -> tuple[bytes, bytes]:
    """count: key (8-byte big-endian) -> (count, sum)."""
    return key.to_bytes(8, "big", signed=True), struct.pack(">qq", count or 0, total or 0)


def encode_bucket(bucket: int, ids: Iterable[int]) -> tuple[bytes, bytes]:
    """bucket-collect: bucket -> the ids it collected (big-endian int64s, in list order)."""
    ids = list(ids)
    return bucket.to_bytes(8, "big", signed=True), struct.pack(f">{len(ids)}q", *ids)


def encode_sample(key: int, sample: Iterable[int], seen: int | None) -> Iterator[tuple[bytes, bytes]]:
    """sample3: `key . 0x00 . id -> ""` per element, `key . 0x01 -> seen` (seen absent: no entry)."""
    kb = key.to_bytes(8, "big", signed=True)
    for rid in sample:
        yield kb + b"\x00" + rid.to_bytes(8, "big", signed=True), b""
    if seen is not None:
        yield kb + b"\x01", seen.to_bytes(8, "big", signed=True)


def collect_list_ids(buffer: bytes, what: str = "collect_list buffer") -> list[int]:
    """A `collect_list` aggregation buffer as Spark serializes it (`TypedImperativeAggregate`):
    an UnsafeRow (without the state encoding's version byte) of one array<long>."""
    (ids,) = decode_row(_ROW_VERSION + buffer, ["array<long>"], what=what)
    if ids is None or any(i is None for i in ids):
        raise CorruptFileError(what, "null in a collect_list of record ids")
    return [int(i) for i in ids]


# -- statebed's reader of Spark's store: raw RocksDB entries -> the encodings above ---------------
def _count(items: Items) -> Iterator[tuple[bytes, bytes]]:
    """groupBy(key).agg(count, sum(value)): key row (key), value row (count, sum)."""
    for k, v in items:
        (key,) = decode_row(k, ["long"], what="count state key")
        count, total = decode_row(v, ["long", "long"], what="count state value")
        yield encode_count(key, count, total)


def _bucket_collect(items: Items) -> Iterator[tuple[bytes, bytes]]:
    """groupBy(bucket).agg(collect_list(id)): key row (bucket), value row (the serialized buffer)."""
    for k, v in items:
        (bucket,) = decode_row(k, ["long"], what="bucket-collect state key")
        (buffer,) = decode_row(v, ["binary"], what="bucket-collect state value")
        if bucket is None or buffer is None:
            raise CorruptFileError("bucket-collect state", "a null bucket or buffer")
        yield encode_bucket(bucket, collect_list_ids(buffer))


def _sample3(items: Items, families: Families) -> Iterator[tuple[bytes, bytes]]:
    """transformWithState: ListState `sample` (rows (id)), ValueState `seen`, and Spark's own
    `$rowCounter_sample` (each list's length: checked against the list, a free cross-check)."""
    by_family: dict[str, list[tuple[bytes, bytes]]] = {}
    for k, v in items:
        name = families.get(int.from_bytes(k[:2], "little"))
        if name is None:
            raise CorruptFileError("sample3 state", f"key of unknown column family {k[:2].hex()} (known: {families})")
        by_family.setdefault(name, []).append((k[2:], v))
    samples = {_long_key(k): _list_values(v) for k, v in by_family.get(SAMPLE_FAMILY, [])}
    seen = {_long_key(k): _long_value(v) for k, v in by_family.get(SEEN_FAMILY, [])}
    for k, v in by_family.get(ROW_COUNTER_FAMILY, []):
        key, n = _long_key(k), _long_value(v)
        if n != len(samples.get(key, [])):
            raise CorruptFileError("sample3 state", f"key {key}: {ROW_COUNTER_FAMILY} says {n} elements, the list holds {samples.get(key)}")
    for key in sorted(samples.keys() | seen.keys()):
        yield from encode_sample(key, samples.get(key, []), seen.get(key))


def _long_key(k: bytes) -> int:
    (key,) = decode_row(k, ["long"], what="sample3 state key")
    if key is None:
        raise CorruptFileError("sample3 state", "a null key")
    return int(key)


def _long_value(v: bytes) -> int:
    (n,) = decode_row(v, ["long"], what="sample3 state value")
    if n is None:
        raise CorruptFileError("sample3 state", "a null value")
    return int(n)


def _list_values(value: bytes) -> list[int]:
    """A ListState value: `[length:4 LE][row]` per element, no delimiter (mergeOperatorVersion 2)."""
    out, pos = [], 0
    while pos < len(value):
        if pos + 4 > len(value):
            raise CorruptFileError("sample3 list", f"a truncated element length at byte {pos} of {len(value)}")
        n = int.from_bytes(value[pos : pos + 4], "little")
        if n <= 0 or pos + 4 + n > len(value):
            raise CorruptFileError("sample3 list", f"element length {n} at byte {pos} does not fit the {len(value)}-byte list")
        out.append(_long_value(value[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    return out


Families = Mapping[int, str]  # column family id -> state variable (Spark's columnFamilyMapping)
SAMPLE_FAMILY, SEEN_FAMILY = "sample", "seen"  # the names native sample3's processor gives them
ROW_COUNTER_FAMILY = f"$rowCounter_{SAMPLE_FAMILY}"
NATIVE_STATE: dict[str, Callable[[Items], Iterator[tuple[bytes, bytes]]]] = {"count": _count, "bucket-collect": _bucket_collect}
FAMILY_STATE: dict[str, Callable[[Items, Families], Iterator[tuple[bytes, bytes]]]] = {"sample3": _sample3}
NATIVE_WORKLOADS = (*NATIVE_STATE, *FAMILY_STATE)


def native_items(workload: str, items: Items, families: Families | None = None) -> Iterator[tuple[bytes, bytes]]:
    """Raw entries of a native store -> the workload's statebed encoding (`families`: for
    transformWithState stores, whose keys start with a 2-byte column family id)."""
    if workload in FAMILY_STATE:
        if families is None:
            raise UsageError(f"reading native {workload} state needs the store's column families")
        return FAMILY_STATE[workload](items, families)
    try:
        translate = NATIVE_STATE[workload]
    except KeyError:
        raise UsageError(f"native mode has no state reader for workload {workload!r} (supported: {', '.join(NATIVE_WORKLOADS)})") from None
    return translate(items)


def column_families(storage: Storage, store: StoreId, partitions: int) -> dict[int, str]:
    """The store's column family ids (Spark records them only in snapshot metadata; any snapshot
    of the operator names them: `statebed_store.column_families`). None recorded yet: a clear error."""
    stores = [StoreId(store.operator, p, store.store_name) for p in range(partitions)]
    ids = column_family_ids(storage, store, stores)
    if not ids:
        raise MissingFileError(storage.display(store.dir), "no snapshot of the operator names its column families yet")
    return {i: name for name, i in ids.items()}


def native_state_items(storage: Storage, store: StoreId, workload: str, items: Items, partitions: int) -> Iterator[tuple[bytes, bytes]]:
    """`native_items` with the store's column families looked up where the workload needs them."""
    return native_items(workload, items, column_families(storage, store, partitions) if workload in FAMILY_STATE else None)


# -- the two readers compared (statebed_job.native_reader writes it, the state verifier reads it) --
READERS_FILE = "readers.json"


@dataclass
class ReaderCheck:
    """statebed's reader and Spark's state data source on one committed version of a native run:
    `agree` None when a reader failed (`error`), so undecided is never taken for agreement."""

    batch: int | None
    agree: bool | None = None
    entries: dict[str, int] = field(default_factory=dict)
    only_statebed: list[str] = field(default_factory=list)  # keys (hex) of entries only statebed's reader served
    only_spark: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


def write_reader_check(run: RunDir, check: ReaderCheck) -> None:
    run.storage.write(READERS_FILE, json.dumps(asdict(check), indent=2).encode() + b"\n")


def read_reader_check(run: RunDir) -> ReaderCheck | None:
    """The run's reader comparison, None when there is none (e.g. the last driver did not finish)."""
    if not run.storage.exists(READERS_FILE):
        return None
    doc: Any = loads_strict(run.storage.read(READERS_FILE), file=run.display(READERS_FILE), what="reader comparison")
    try:
        return ReaderCheck(**doc)
    except TypeError as e:
        raise CorruptFileError(run.display(READERS_FILE), f"not a reader comparison ({e})") from None
