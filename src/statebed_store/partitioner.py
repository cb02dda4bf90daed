"""Which state partition a key belongs to: the invariant every store keeps, whatever its files say.

Every key in partition p's state was routed to p by the partitioner that wrote it. A
changelog copied from partition 1 over partition 0's (with an old sidecar that does not
name its store) passes every check of names, sidecars and lineage at version 1; its keys
do not pass this one. The partitioner comes from the checkpoint itself:

* `partitioner.json` at the root, written by `statebed run`: Spark's `repartition(P, key)`
  (Murmur3 of the long `key` column, the first 8 bytes of a state key, big-endian) or, for
  bucket-collect, `bucket % P`;
* `demo.json`'s `partitioner`, written by `statebed demo` (blake2b of the key);
* a native Spark checkpoint's operator metadata (`state/<op>/_metadata/metadata`: operator,
  stores, number of partitions) and key schema (`state/<op>/0/[<store>/]_metadata/schema`):
  Murmur3 of the operator's partitioning key, which for aggregations and deduplication is
  the whole state key and for a stream-stream join the join keys (keyWithIndexToValue's key
  ends with an `index` column that is not hashed).

Anything else is unknown, and callers say the check was not made. Pure and read-only,
apart from `record_partitioner`, which the run calls once when it creates its checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from statebed_base.errors import CorruptFileError, MisplacedKeyError, MissingFileError, StatebedError, UsageError
from statebed_base.jsonsafe import loads_strict

from .murmur3 import SparkType, hash_longs, hash_values, parse_type
from .naming import DEFAULT_STORE, METADATA_DIR, STATE_DIR, StoreId, parse_index
from .spark_schema import DEFAULT_FAMILY, parse_schema_file
from .storage.base import Storage

__all__ = [
    "DEMO_MARKER",
    "MARKER",
    "Partitioner",
    "Partitioning",
    "check_keys",
    "checkpoint_partitioning",
    "record_partitioner",
]

MARKER = "partitioner.json"
DEMO_MARKER = "demo.json"
SAMPLE = 5  # misplaced keys named per finding
Keys = Sequence[bytes] | np.ndarray
_JOIN_INDEXED = ("left-keyWithIndexToValue", "right-keyWithIndexToValue")
_WHOLE_KEY_OPERATORS = ("stateStoreSave", "dedupe")  # aggregation, dropDuplicates: the state key is the shuffle key


@dataclass(frozen=True)
class Partitioner:
    """How a key was routed: `scheme` over `key`, modulo `partitions`.

    scheme: "spark-murmur3" (Spark's hash partitioning), "modulo" (the key's long value mod P),
    "blake2b32" (the demo's: blake2b-32 of the whole key, big-endian, mod P).
    key: "i64be" (the key starts with a big-endian long), "bytes" (the whole key) or
    "unsaferow" (Spark's `<version byte><UnsafeRow>` with `row_fields` fields; the first
    `len(fields)` of them are hashed).
    """

    scheme: str
    partitions: int
    key: str
    fields: tuple[SparkType, ...] = ()
    row_fields: int = 0
    origin: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "partitions": self.partitions, "key": self.key}

    def with_partitions(self, count: int | None) -> Partitioner:
        """The same routing over `count` partitions (None: as recorded): a batch after a repartition."""
        return self if count is None or count == self.partitions else replace(self, partitions=count)

    @classmethod
    def from_json(cls, doc: Any, *, file: str, origin: str) -> Partitioner:
        """The partitioner a marker records; CorruptFileError naming `file` for anything else."""
        ok = {("spark-murmur3", "i64be"), ("modulo", "i64be"), ("blake2b32", "bytes")}
        if not isinstance(doc, dict) or (doc.get("scheme"), doc.get("key")) not in ok:
            raise CorruptFileError(file, f"partitioner must be one of {sorted(ok)} as scheme/key, not {doc!r}")
        parts = doc.get("partitions")
        if not isinstance(parts, int) or isinstance(parts, bool) or not 1 <= parts <= 1_000_000:
            raise CorruptFileError(file, f"partitioner partitions must be an integer in 1..1000000, not {parts!r}")
        return cls(doc["scheme"], parts, doc["key"], origin=origin)

    def partitions_of(self, keys: Keys) -> np.ndarray:
        """The partition of every key; -1 for a key this partitioner cannot have routed (undecodable).

        `keys`: bytes, or an (n, width) uint8 array of equal-width keys (a changelog's fast path)."""
        if self.key == "i64be":
            if isinstance(keys, np.ndarray):
                ok = np.full(len(keys), keys.shape[1] >= 8)
                longs = (
                    np.ascontiguousarray(keys[:, :8]).view(">i8").ravel().astype(np.int64) if ok.all() else np.zeros(len(keys), np.int64)
                )
            else:
                ok, longs = _leading_longs(keys)
            parts = (hash_longs(longs).astype(np.int64) if self.scheme == "spark-murmur3" else longs) % self.partitions
            return np.where(ok, parts, -1)
        if isinstance(keys, np.ndarray):
            keys = [row.tobytes() for row in keys]
        if self.key == "bytes":
            return np.array([int.from_bytes(hashlib.blake2b(k, digest_size=4).digest(), "big") % self.partitions for k in keys], np.int64)
        return np.array([self._row_partition(k) for k in keys], dtype=np.int64)

    def _row_partition(self, key: bytes) -> int:
        try:
            values = row_values(key, self.fields, self.row_fields)
        except (ValueError, struct.error):
            return -1
        return hash_values(values, self.fields) % self.partitions

    def describe(self, key: bytes) -> Any:
        """A key as an anomaly shows it (JSON-able): the long, the hashed columns, or the bytes."""
        if self.key == "i64be" and len(key) >= 8:
            return int.from_bytes(key[:8], "big", signed=True)
        if self.key == "unsaferow":
            try:
                return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in row_values(key, self.fields, self.row_fields)]
            except (ValueError, struct.error):
                pass
        text = key.decode("utf-8", "replace")
        return text if text.isprintable() else key.hex()


def _leading_longs(keys: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(has 8 bytes, the big-endian long they start with) per key, gathered from one joined buffer."""
    lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    flat = np.frombuffer(b"".join(keys) + bytes(8), dtype=np.uint8)
    starts = np.cumsum(lens) - lens
    ok = lens >= 8
    rows = flat[np.where(ok, starts, 0)[:, None] + np.arange(8)]
    return ok, rows.view(">i8").ravel().astype(np.int64)


def row_values(stored: bytes, types: Sequence[SparkType], width: int) -> list[Any]:
    """The first `len(types)` fields of a stored key `<version 0><UnsafeRow of width fields>`."""
    if not stored or stored[0] != 0:
        raise ValueError("not a version-0 encoded UnsafeRow")
    return _fields(stored[1:], types, width)


def _fields(row: bytes, types: Sequence[SparkType], width: int) -> list[Any]:
    bits = (width + 63) // 64 * 8
    if len(row) < bits + 8 * width:
        raise ValueError(f"{len(row)} bytes is too short for {width} fields")
    nulls = int.from_bytes(row[:bits], "little")
    return [None if nulls >> i & 1 else _field(row, row[bits + 8 * i : bits + 8 * i + 8], t) for i, t in enumerate(types)]


_FIXED = {"boolean": "<?", "byte": "<b", "short": "<h", "integer": "<i", "date": "<i", "float": "<f", "double": "<d"}


def _field(row: bytes, word: bytes, typ: SparkType) -> Any:
    if typ in _FIXED:
        return struct.unpack_from(_FIXED[typ], word)[0]  # type: ignore[index]
    if typ in ("long", "timestamp", "timestamp_ntz") or (isinstance(typ, str) and typ.startswith("decimal(") and _precision(typ) <= 18):
        return int.from_bytes(word, "little", signed=True)
    w = int.from_bytes(word, "little")
    offset, size = w >> 32, w & 0xFFFFFFFF
    if offset + size > len(row):
        raise ValueError(f"field points past the end of the row ({offset}+{size} > {len(row)})")
    data = row[offset : offset + size]
    if isinstance(typ, tuple):
        return _fields(data, typ, len(typ))
    return data if typ in ("string", "binary") else int.from_bytes(data, "big", signed=True)  # a big decimal's unscaled value


def _precision(typ: str) -> int:
    return int(typ[8:-1].partition(",")[0])


def check_keys(partitioner: Partitioner, store: StoreId, keys: Keys, *, where: str, version: int | None) -> None:
    """MisplacedKeyError naming `where` (a file, or the store) when a key of `store` belongs elsewhere."""
    if not len(keys):
        return
    parts = partitioner.partitions_of(keys)
    bad = np.flatnonzero(parts != store.partition)
    if not len(bad):
        return
    sample = [bytes(keys[i]) for i in bad[:SAMPLE].tolist()]
    homes = sorted({int(parts[i]) for i in bad.tolist()})
    said = ", ".join("none (undecodable)" if h < 0 else str(h) for h in homes[:10])
    at = "" if version is None else f" at version {version}"
    raise MisplacedKeyError(
        where,
        f"{len(bad)} of {len(keys)} key(s){at} of operator {store.operator} partition {store.partition} belong to partition(s) "
        f"{said} under {partitioner.scheme} over {partitioner.partitions} partitions ({partitioner.origin}), "
        f"e.g. {[partitioner.describe(k) for k in sample]}: state copied in from another partition?",
        keys=[partitioner.describe(k) for k in sample],
    )


@dataclass
class Partitioning:
    """A checkpoint's partitioners per (operator, store name); `why` says why one is unknown."""

    known: dict[tuple[int, str], Partitioner] = field(default_factory=dict)
    per_operator: dict[int, Partitioner] = field(default_factory=dict)  # every store of the operator
    unknown: dict[int, str] = field(default_factory=dict)  # operator -> why its partitioner is unknown
    why: str = ""  # why none is known at all (no record of any kind)

    def get(self, store: StoreId) -> Partitioner | None:
        return self.known.get((store.operator, store.store_name)) or self.per_operator.get(store.operator)

    def reason(self, store: StoreId) -> str:
        return (
            self.unknown.get(store.operator)
            or self.why
            or f"operator {store.operator} store {store.store_name!r} has no recorded partitioner"
        )

    def unchecked_notes(self, stores: Sequence[StoreId]) -> list[str]:
        """One note per reason some of `stores` cannot have their keys checked (none when all can)."""
        return [f"partition check not made: {why}" for why in sorted({self.reason(s) for s in stores if self.get(s) is None})]


def record_partitioner(storage: Storage, partitioner: Partitioner, *, operator: int = 0) -> None:
    """Write `partitioner.json` into a new checkpoint, or check the one there (a resumed run)."""
    doc = {"schema": 1, "operators": {str(operator): partitioner.to_json()}}
    try:
        found = loads_strict(storage.read(MARKER), file=storage.display(MARKER), what="partitioner record")
    except MissingFileError:
        storage.write(MARKER, json.dumps(doc).encode(), create_only=True)
        return
    if found != doc:
        raise UsageError(f"{storage.display(MARKER)} records {found}, but this run partitions as {doc}: a checkpoint of another run?")


def checkpoint_partitioning(storage: Storage) -> Partitioning:
    """The partitioners a checkpoint records (see the module doc); never raises for a missing or bad record."""
    try:
        if storage.exists(MARKER):
            return _marker(storage)
        if storage.exists(DEMO_MARKER):
            return _demo(storage)
        return _spark(storage)
    except StatebedError as e:
        return Partitioning(why=f"its partitioner record cannot be read: {e}")


def _marker(storage: Storage) -> Partitioning:
    shown = storage.display(MARKER)
    doc = loads_strict(storage.read(MARKER), file=shown, what="partitioner record")
    ops = doc.get("operators") if isinstance(doc, dict) else None
    if not isinstance(ops, dict) or not all(parse_index(k) is not None for k in ops):
        raise CorruptFileError(shown, 'expected {"operators": {"<operator id>": {...}}}')
    return Partitioning(per_operator={int(op): Partitioner.from_json(spec, file=shown, origin=MARKER) for op, spec in ops.items()})


def _demo(storage: Storage) -> Partitioning:
    shown = storage.display(DEMO_MARKER)
    doc = loads_strict(storage.read(DEMO_MARKER), file=shown, what="demo marker")
    if not isinstance(doc, dict) or "partitioner" not in doc:
        return Partitioning(why=f"{shown} records no partitioner (written by an older statebed demo)")
    return Partitioning(per_operator={0: Partitioner.from_json(doc["partitioner"], file=shown, origin=DEMO_MARKER)})


def _spark(storage: Storage) -> Partitioning:
    out = Partitioning()
    for name in storage.list_dirs(STATE_DIR):
        op = parse_index(name)
        if op is None:
            continue
        path = f"{STATE_DIR}/{name}/{METADATA_DIR}/metadata"
        if not storage.exists(path):
            out.unknown[op] = f"no Spark operator metadata {storage.display(path)}"
            continue
        try:
            _spark_operator(storage, op, path, out)
        except (CorruptFileError, MissingFileError) as e:
            out.unknown[op] = f"Spark's operator metadata cannot be read: {e}"
    if not out.known and all(why.startswith("no Spark operator metadata") for why in out.unknown.values()):
        out.unknown.clear()  # not a Spark checkpoint at all (or one from before operator metadata): one reason says it
        out.why = f"the checkpoint records no partitioner (no {MARKER}, {DEMO_MARKER} or Spark operator metadata)"
    return out


_OPERATOR_METADATA_VERSION = "v1"  # the first line of Spark's operator metadata file this reads


def _spark_operator(storage: Storage, op: int, path: str, out: Partitioning) -> None:
    shown = storage.display(path)
    head, _, body = storage.read(path).decode("utf-8", "replace").partition("\n")
    doc = loads_strict(body, file=shown, what="operator metadata") if head.strip() == _OPERATOR_METADATA_VERSION else None
    if not isinstance(doc, dict):
        raise CorruptFileError(shown, f"operator metadata {head.strip()!r} is not the v1 format this check reads")
    name = str((doc.get("operatorInfo") or {}).get("operatorName"))
    infos = doc.get("stateStoreInfo")
    if name not in (*_WHOLE_KEY_OPERATORS, "symmetricHashJoin") or not isinstance(infos, list):
        out.unknown[op] = f"Spark operator {name!r}: its partitioning key is not known to this check"
        return
    for info in infos:
        store = str(info.get("storeName", DEFAULT_STORE))
        parts, prefix = info.get("numPartitions"), info.get("numColsPrefixKey", 0)
        if not isinstance(parts, int) or parts < 1 or prefix != 0:
            out.unknown[op] = f"Spark operator {name!r} store {store!r}: numPartitions {parts!r}, numColsPrefixKey {prefix!r} not supported"
            return
        where = f"{STATE_DIR}/{op}/0" + ("" if store == DEFAULT_STORE else f"/{store}") + f"/{METADATA_DIR}/schema"
        try:
            key_types = _key_schema(storage, where)
        except ValueError as e:
            out.unknown[op] = f"{storage.display(where)}: {e}"
            return
        hashed = key_types[:-1] if name == "symmetricHashJoin" and store in _JOIN_INDEXED else key_types
        origin = f"Spark {name}, {storage.display(where)}"
        out.known[(op, store)] = Partitioner("spark-murmur3", parts, "unsaferow", tuple(hashed), len(key_types), origin=origin)


def _key_schema(storage: Storage, path: str) -> list[SparkType]:
    """The key schema of Spark's v1/v2 schema file (`spark_schema`)."""
    schema = parse_schema_file(storage.read(path))
    if DEFAULT_FAMILY not in schema.families or len(schema.families) != 1:
        raise ValueError(f"schema format {schema.version!r} is not read by this check")
    types = parse_type(schema.families[DEFAULT_FAMILY][0])
    if not isinstance(types, tuple) or not types:
        raise ValueError("key schema is not a non-empty struct")
    return list(types)
