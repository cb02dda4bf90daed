"""corrupt-row: change one value inside a committed changelog of Spark's store, and re-encode the
file so that every check but Spark's row checksums still passes: the LZ4 blocks (their xxhash),
Spark's `X.crc` CRC32C sidecar and Hadoop's hidden `.X.crc` are all written anew. Silent
corruption of this kind (a bit flipped before the file's own checksums were computed) is what
row checksums (SPARK-54106) are for.

The target is the newest changelog the load plan of the store's latest committed version replays
(operator 0, partition `partition`), so the restarted query's first load of that store reads it.
The change: in the first put record, the low byte of the value's last 8-byte word (a count's or a
sum's lowest byte in an UnsafeRow) is XORed with 1; with row checksums the frame is kept and its
recorded CRC32C left as it was, so only the row's checksum disagrees. The row still decodes: with
row checksums off, Spark serves it (statebed's state check sees the wrong value); with them on,
Spark's replay of the changelog verifies every row and fails the query.

When: as `corrupt-snapshot` (`restart: true`, the default: the driver is killed at the trigger and
the file is changed before the restart). Proven by Spark reading the changed file after the
change (the run's request log), with Spark's answer: its row checksum error, or a query that went
on. params: partition (default 0), restart (default true), wait_s (120).
Formats: Spark's own store with the plug-in (native-v1, native-v2), local disk or S3.
"""

from __future__ import annotations

from typing import Any, ClassVar

from statebed_base.errors import StatebedError, UsageError
from statebed_store import StoreFiles, lz4block
from statebed_store.changelog import parse_changelog
from statebed_store.checksum import hadoop_crc, resealed_sidecar
from statebed_store.inspection import committed_ref, discover_stores
from statebed_store.naming import CHANGELOG, StateFileName, hadoop_crc_name, sidecar_name
from statebed_store.plan import plan_load
from statebed_store.row_checksum import checkpoint_row_checksums
from statebed_store.storage.base import Storage

from .base import FaultSpec
from .corrupt_snapshot import CorruptSnapshot
from .process_faults import NoTarget

__all__ = ["FAULT", "ROW_CHECKSUM_FAILED", "CorruptRow", "changed_changelog", "target_changelog"]

ROW_CHECKSUM_FAILED = (
    "Row checksum verification failed"  # KeyValueChecksumVerifier's ERROR line (the task fails with CANNOT_LOAD_STATE_STORE)
)
_FRAME = 8  # a row checksum frame's crc and size, before the value


class CorruptRow(CorruptSnapshot):
    kind: ClassVar[str] = "corrupt-row"
    description: ClassVar[str] = "change one value in the changelog the next load replays, re-encoding the file and its checksums"
    fatal: ClassVar[tuple[str, ...]] = (ROW_CHECKSUM_FAILED,)

    def __init__(self, spec: FaultSpec) -> None:
        if "damage" in spec.params:
            raise UsageError(f"fault {spec.id} ({spec.kind}): has no damage param (it changes one value; see corrupt-snapshot)")
        super().__init__(spec)

    def target(self, storage: Storage) -> str:
        return target_changelog(storage, self.partition)

    def damage_file(self, storage: Storage, path: str, before: bytes) -> tuple[bytes, dict[str, Any]]:
        """The changed changelog; its sidecars are rewritten here (the changelog is written by the caller)."""
        framed = checkpoint_row_checksums(storage) is not None
        after, facts = changed_changelog(before, file=storage.display(path), framed=framed)
        _rewrite_sidecars(storage, path, after)
        return after, {**facts, "row_checksums": framed}


def target_changelog(storage: Storage, partition: int) -> str:
    """The newest changelog the next load of operator 0's store of `partition` replays."""
    stores = [s for s in discover_stores(storage) if (s.operator, s.partition) == (0, partition)]
    if not stores:
        raise NoTarget(f"{storage.display('state/0')}: no state of partition {partition}")
    store = stores[0]
    try:
        ref = committed_ref(storage, store, [s.store_name for s in stores])
        plan = plan_load(StoreFiles(storage, store), ref)
    except StatebedError as e:
        raise NoTarget(f"no load plan for {store}: {e}") from None
    if not plan.changelogs:
        raise NoTarget(f"the load of {store} at {ref} replays no changelog (a snapshot alone): nothing to change")
    last = plan.changelogs[-1]
    return store.path(StateFileName(last.version, last.id, CHANGELOG).name)


def changed_changelog(data: bytes, *, file: str, framed: bool) -> tuple[bytes, dict[str, Any]]:
    """`data` (a changelog) with one byte of its first put's value changed, LZ4-encoded anew; and
    what changed (the key, the byte's offset in the value). NoTarget when no put has a value to change."""
    cl = parse_changelog(data, file=file)
    pos = cl.header.records_offset
    head = (1 if cl.header.typed else 0) + 4
    for op, key, value in cl.records():
        record = head + len(key) + 4 + (len(value) if value is not None else 0)
        if value is not None and len(value) > (_FRAME if framed else 0):
            at = _changed_byte(value, framed)
            where = pos + head + len(key) + 4 + at
            payload = bytearray(cl.payload)
            payload[where] ^= 0x01
            return lz4block.compress(bytes(payload)), {"key": key.hex(), "op": op, "value_byte": at, "value_bytes": len(value)}
        pos += record
    raise NoTarget(f"{file}: no put record with a value to change")


def _changed_byte(value: bytes, framed: bool) -> int:
    """The low byte of the last 8-byte word of the (first) element: an UnsafeRow's last field."""
    start, size = (_FRAME, int.from_bytes(value[4:_FRAME], "little")) if framed else (0, len(value))
    return start + (size - 8 if size >= 8 else size - 1)


def _rewrite_sidecars(storage: Storage, path: str, data: bytes) -> None:
    """Spark's `X.crc` (CRC32C and size anew, its other fields kept) and Hadoop's hidden `.X.crc`
    files of both, where they exist: the changed file passes every file-level check."""
    side = sidecar_name(path)
    if storage.exists(side):
        sidecar = resealed_sidecar(storage.read(side), data, file=storage.display(path))
        storage.write(side, sidecar)
        _rewrite_hadoop_crc(storage, side, sidecar)
    _rewrite_hadoop_crc(storage, path, data)


def _rewrite_hadoop_crc(storage: Storage, path: str, data: bytes) -> None:
    directory, _, name = path.rpartition("/")
    hidden = f"{directory}/{hadoop_crc_name(name)}" if directory else hadoop_crc_name(name)
    if storage.exists(hidden):
        storage.write(hidden, hadoop_crc(data))


FAULT = CorruptRow
