"""The local engine: one RocksDB instance (rocksdict, raw bytes) per store.

Durability comes from changelogs in checkpoint storage. The WAL is on but never synced: it
lets an instance whose process died be reopened with every write that process made (a host
crash loses it, and the instance with its host). Whether such an instance is trusted is the
provider's call: only at the `(version, id)` the instance's own identity record proves
(`identity`, kept in the column family `IDENTITY_CF` by `set_identity` / `clear_identity`),
else it is rebuilt from storage. Measured here on 250k keys and 125k updates a batch: 1-3%
slower writes than with the WAL off.

Every write and read that RocksDB can fail (a full disk, an I/O error: rocksdict raises plain
exceptions) raises `LocalInstanceError` naming the instance's directory.

Batched access is key-sorted: every batched put, delete, get and changelog replay is
ordered by key first (a stable Arrow sort, so repeated keys keep their order). RocksDB's
memtable and block cache work far better on sorted runs; measured here on 500k random
keys: WriteBatch 1.22 s unsorted vs 0.84 s sorted (sort included), point reads 1.05 s vs
0.51 s. Reads use the binding's single `get` in a loop: rocksdict's multi-get measured
2.5x slower than that loop. rocksdict offers no bulk call below these, so a loop over
the batch inside one method is the floor; nothing else runs per row.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rocksdict import BlockBasedOptions, Cache, Checkpoint, ColumnFamily, Options, Rdict, RdictIter, WriteBatch, WriteOptions

from statebed_base.errors import CorruptFileError, LocalInstanceError, StatebedError, UnknownFormatError

__all__ = ["IDENTITY_CF", "Merge", "RocksEngine", "key_order"]

# The column family of the instance's identity record (`identity`): one key, never state. A loan's
# copy carries it; a snapshot's does not (`checkpoint`), so every snapshot is the default family alone.
IDENTITY_CF = "statebed-identity"
_IDENTITY_KEY = b"identity"


@dataclass(frozen=True)
class Merge:
    """How a replay folds merge records: `fold(existing or None, operand)`, `check(merged value)`."""

    put_op: int
    fold: Callable[[bytes | None, bytes], bytes]
    check: Callable[[bytes], None]


_WAL = re.compile(r"[0-9]+\.log")
_SORT_MIN = 64  # below this, sorting costs more than it saves


def key_order(keys: pa.Array) -> np.ndarray | None:
    """Stable sort order of a batch's keys (bytewise, RocksDB's comparator), or None if tiny."""
    if len(keys) < _SORT_MIN:
        return None
    return pc.sort_indices(keys).to_numpy()  # type: ignore[no-any-return]


_CACHE_LOCK = threading.Lock()
_BLOCK_CACHE: Cache | None = None


def _block_cache() -> Cache:
    """One block cache per process, shared by every instance (like Spark's bounded memory)."""
    global _BLOCK_CACHE
    with _CACHE_LOCK:
        if _BLOCK_CACHE is None:
            _BLOCK_CACHE = Cache(256 << 20)
        return _BLOCK_CACHE


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(_block_cache())
    opts.set_block_based_table_factory(table)
    opts.set_max_background_jobs(2)
    return opts


class RocksEngine:
    """A RocksDB directory opened for raw bytes; not thread-safe (one task at a time)."""

    def __init__(self, path: Path, origin: Mapping[str, str] | None = None) -> None:
        """`origin`: local SST name -> the checkpoint file it came from, so damage names that file."""
        self.path = Path(path)
        self.origin = dict(origin or {})
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            self._db: Rdict | None = Rdict(str(self.path), _options())
        except Exception as e:  # rocksdict raises plain Exception subclasses
            raise LocalInstanceError(f"{self.path}: cannot open RocksDB instance ({e})") from None
        wo = WriteOptions()
        wo.sync = False  # the WAL outlives the process, not the host (see above)
        self.db.set_write_options(wo)
        self._id_family: Rdict | None = None  # the identity family, opened on first use
        self._id_handle: ColumnFamily | None = None

    @contextlib.contextmanager
    def _io(self, what: str) -> Iterator[None]:
        """RocksDB's plain exceptions as one error naming this instance (ours pass through)."""
        try:
            yield
        except StatebedError:
            raise
        except Exception as e:
            raise LocalInstanceError(f"{self.path}: local RocksDB instance failed to {what} ({e})") from None

    # -- identity (see `identity`) ------------------------------------------------------
    def _identity_family(self, create: bool) -> tuple[Rdict, ColumnFamily] | None:
        if self._id_family is None or self._id_handle is None:
            try:
                self._id_family = self.db.get_column_family(IDENTITY_CF)
            except Exception:  # rocksdict: "column name ... does not exist"
                if not create:
                    return None
                self._id_family = self.db.create_column_family(IDENTITY_CF, _options())
            self._id_handle = self.db.get_column_family_handle(IDENTITY_CF)
        return self._id_family, self._id_handle

    def identity(self) -> bytes | None:
        """The identity record this instance holds, or None (never written, or deleted since)."""
        with self._io("read its identity record"):
            family = self._identity_family(create=False)
            if family is None:
                return None
            value = family[0].get(_IDENTITY_KEY)
        return value if isinstance(value, bytes) else None

    def set_identity(self, record: bytes) -> None:
        """Record what the instance holds now; WAL-ordered after every write before it."""
        with self._io("write its identity record"):
            family = self._identity_family(create=True)
            assert family is not None
            wb = WriteBatch(raw_mode=True)
            wb.put(_IDENTITY_KEY, record, family[1])
            self.db.write(wb)

    def clear_identity(self) -> None:
        """Delete the record before the instance changes: from here it proves nothing."""
        with self._io("delete its identity record"):
            family = self._identity_family(create=False)
            if family is None:
                return
            wb = WriteBatch(raw_mode=True)
            wb.delete(_IDENTITY_KEY, family[1])
            self.db.write(wb)

    # -- reads --------------------------------------------------------------------------
    def get_many(self, keys: pa.Array) -> list[bytes | None]:
        """Values of `keys` (None where absent), in the order of `keys`; looked up sorted."""
        get = self.db.get
        order = key_order(keys)
        with self._io("read"):
            if order is None:
                return list(map(get, keys.to_pylist()))
            found = np.empty(len(keys), dtype=object)
            found[order] = list(map(get, keys.take(order).to_pylist()))
        return found.tolist()

    def items(
        self, start: bytes | None = None, end: bytes | None = None, prefix: bytes | None = None
    ) -> Generator[tuple[bytes, bytes], None, None]:
        """Ordered `(key, value)` from `start` (or `prefix`) up to `end` exclusive."""
        it = self.db.iter()
        first = prefix if prefix is not None else start
        if first is None:
            it.seek_to_first()
        else:
            it.seek(first)
        while it.valid():
            k = it.key()
            if prefix is not None and not k.startswith(prefix):
                return
            if end is not None and k >= end:
                return
            yield k, it.value()
            it.next()
        error = self._failure(it)
        del it  # a live iterator keeps the instance (and its LOCK) open: drop it before raising
        if error is not None:
            raise error

    def verify(self) -> int:
        """Read every entry, checking every block's checksum; the number of entries.

        RocksDB reports a damaged block only through the iterator's status (the scan just
        stops early), so a scan that is not checked would silently drop the rest of the state.
        """
        it = self.db.iter()
        it.seek_to_first()
        n = 0
        while it.valid():
            n += 1
            it.next()
        error = self._failure(it)
        del it
        if error is not None:
            raise error
        return n

    def _failure(self, it: RdictIter) -> CorruptFileError | UnknownFormatError | None:
        """The error naming the damaged SST (its checkpoint file when known) if the scan failed."""
        try:
            it.status()
        except Exception as e:  # rocksdict raises plain Exception with RocksDB's status text
            msg = str(e)
            local = re.search(r"(\d+\.sst)", msg)
            name = local.group(1) if local else None
            where = self.origin.get(name, str(self.path / name)) if name else str(self.path)
            if "merge_operator" in msg:  # an unmerged operand, and the checkpoint names no merge operator
                return UnknownFormatError(where, f"holds RocksDB merge operands this reader cannot fold ({msg})")
            return CorruptFileError(where, f"RocksDB read failed, state is damaged ({msg})")
        return None

    def num_keys_estimate(self) -> int:
        return int(self.db.property_int_value("rocksdb.estimate-num-keys") or 0)

    # -- writes -------------------------------------------------------------------------
    def put_many(self, keys: pa.Array, values: pa.Array) -> None:
        """One WriteBatch for the batch, in key order (later duplicates still win)."""
        order = key_order(keys)
        if order is not None:
            keys, values = keys.take(order), values.take(order)
        wb = WriteBatch(raw_mode=True)
        put = wb.put
        for k, v in zip(keys.to_pylist(), values.to_pylist()):
            put(k, v)
        with self._io("write"):
            self.db.write(wb)

    def delete_many(self, keys: pa.Array) -> None:
        order = key_order(keys)
        wb = WriteBatch(raw_mode=True)
        delete = wb.delete
        for k in (keys.take(order) if order is not None else keys).to_pylist():
            delete(k)
        with self._io("write"):
            self.db.write(wb)

    def apply(
        self,
        ops: Sequence[int],
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        delete_op: int,
        batch: int = 200_000,
        merge: Merge | None = None,
    ) -> int:
        """Replay changelog records (parallel lists, in write order) in key order, stably.

        Merge records (any op other than `delete_op` and `merge.put_op`) are folded into the
        key's value with `merge` (RocksDB's operator as the writer configured it), never put.
        """
        order = key_order(pa.array(keys, pa.binary()))
        idx = order.tolist() if order is not None else list(range(len(keys)))
        with self._io("replay a changelog"):
            if merge is not None:
                return self._apply_merging(ops, keys, values, delete_op, idx, merge)
            return self._apply_plain(ops, keys, values, delete_op, idx, batch)

    def _apply_plain(
        self, ops: Sequence[int], keys: Sequence[bytes], values: Sequence[bytes | None], delete_op: int, idx: list[int], batch: int
    ) -> int:
        wb = WriteBatch(raw_mode=True)
        pending = 0
        for i in idx:
            if ops[i] == delete_op:
                wb.delete(keys[i])
            else:
                wb.put(keys[i], values[i])
            pending += 1
            if pending >= batch:
                self.db.write(wb)
                wb, pending = WriteBatch(raw_mode=True), 0
        if pending:
            self.db.write(wb)
        return len(keys)

    def _apply_merging(
        self, ops: Sequence[int], keys: Sequence[bytes], values: Sequence[bytes | None], delete_op: int, idx: list[int], merge: Merge
    ) -> int:
        """Key by key (the stable sort keeps each key's records together, in write order): the final value."""
        wb = WriteBatch(raw_mode=True)
        unset = object()
        i = 0
        while i < len(idx):
            key, cur, merged = keys[idx[i]], unset, False
            while i < len(idx) and keys[idx[i]] == key:
                op, value = ops[idx[i]], values[idx[i]]
                if op == delete_op:
                    cur = None
                elif op == merge.put_op:
                    cur = value
                else:
                    assert value is not None
                    base = self.db.get(key) if cur is unset else cur
                    cur, merged = merge.fold(base, value), True  # type: ignore[arg-type]
                i += 1
            if merged:
                merge.check(cur)  # type: ignore[arg-type]
            if cur is None:
                wb.delete(key)
            else:
                wb.put(key, cur)
        self.db.write(wb)
        return len(keys)

    # -- files --------------------------------------------------------------------------
    def checkpoint(self, dest: Path, *, parents: bool = True, identity: bool = False) -> None:
        """A consistent copy of the current state in `dest` (SSTs hard-linked, memtables flushed).
        The copy has no WAL: after the flush every write is in the SSTs (no write runs beside a
        checkpoint; what a WAL may still hold, e.g. an empty batch, changes nothing), so the copy,
        and a snapshot made of it, holds what it would with the WAL off.

        `identity=False` (a snapshot): the copy holds the default family alone, as every snapshot
        does; the identity family is dropped from the instance first, so it proves nothing until
        its next `set_identity`. `identity=True` (a loan): the copy carries the record, and proves
        itself to its borrower. `parents=False`: `dest`'s directory must exist (a loan never
        recreates a borrower's directory that was removed)."""
        if dest.exists():
            shutil.rmtree(dest)
        if parents:
            dest.parent.mkdir(parents=True, exist_ok=True)
        elif not dest.parent.is_dir():
            raise LocalInstanceError(f"{dest.parent}: no such directory; no checkpoint taken")
        with self._io("take a local checkpoint"):
            family = self._identity_family(create=False)
            if family is not None and not identity:
                del family
                self._id_family = self._id_handle = None
                self.db.drop_column_family(IDENTITY_CF)
            elif family is not None:
                family[0].flush(True)
            self.db.flush(True)
            Checkpoint(self.db).create_checkpoint(str(dest))
        for wal in dest.iterdir():
            if _WAL.fullmatch(wal.name):
                wal.unlink()

    @property
    def db(self) -> Rdict:
        if self._db is None:
            raise StatebedError(f"{self.path}: RocksDB instance is closed")
        return self._db

    def close(self) -> None:
        """Close the instance; the handles go first (each keeps the database, and its LOCK, open)."""
        self._id_family = self._id_handle = None
        db, self._db = self._db, None
        if db is not None:
            with self._io("close"):
                db.close()

    @staticmethod
    def clear_dir(path: Path) -> None:
        """Make `path` an empty directory (a fresh instance or a snapshot to unpack)."""
        if path.exists():
            shutil.rmtree(path)
        os.makedirs(path, exist_ok=True)
