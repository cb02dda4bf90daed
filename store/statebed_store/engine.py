"""The local engine: one RocksDB instance (rocksdict, raw bytes) per store.

The WAL is off: durability comes from changelogs in checkpoint storage, and a local
instance whose process died is never trusted again (it is rebuilt from storage). Writes
go through one WriteBatch per batched call and reads through one multi-get, so the
Python cost per Arrow batch is a loop inside the binding, not a call per row.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from rocksdict import BlockBasedOptions, Cache, Checkpoint, Options, Rdict, WriteBatch, WriteOptions

from .errors import StatebedError

__all__ = ["RocksEngine"]

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

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            self.db = Rdict(str(self.path), _options())
        except Exception as e:  # rocksdict raises plain Exception subclasses
            raise StatebedError(f"{self.path}: cannot open RocksDB instance ({e})") from None
        wo = WriteOptions()
        wo.disable_wal = True
        self.db.set_write_options(wo)

    # -- reads --------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        return self.db.get(key)  # type: ignore[no-any-return]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        return self.db.get(list(keys))  # type: ignore[no-any-return]

    def items(self, start: bytes | None = None, end: bytes | None = None, prefix: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
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

    def num_keys_estimate(self) -> int:
        return int(self.db.property_int_value("rocksdb.estimate-num-keys") or 0)

    # -- writes -------------------------------------------------------------------------
    def write(self, puts: tuple[Sequence[bytes], Sequence[bytes]] | None = None, deletes: Sequence[bytes] | None = None) -> None:
        """Apply puts then deletes atomically in one WriteBatch."""
        wb = WriteBatch(raw_mode=True)
        if puts is not None:
            put = wb.put
            for k, v in zip(*puts):
                put(k, v)
        if deletes is not None:
            delete = wb.delete
            for k in deletes:
                delete(k)
        self.db.write(wb)

    def apply(self, ops: Iterator[tuple[int, bytes, bytes | None]], delete_op: int, batch: int = 100_000) -> int:
        """Replay `(op, key, value)` records in order, a WriteBatch per `batch` records."""
        n = 0
        wb = WriteBatch(raw_mode=True)
        pending = 0
        for op, key, value in ops:
            if op == delete_op:
                wb.delete(key)
            else:
                wb.put(key, value)
            pending += 1
            if pending >= batch:
                self.db.write(wb)
                n += pending
                wb, pending = WriteBatch(raw_mode=True), 0
        if pending:
            self.db.write(wb)
            n += pending
        return n

    # -- files --------------------------------------------------------------------------
    def checkpoint(self, dest: Path) -> None:
        """A consistent copy of the current state in `dest` (SSTs hard-linked, memtable flushed)."""
        self.db.flush(True)
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        Checkpoint(self.db).create_checkpoint(str(dest))

    def close(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            db.close()

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)

    @staticmethod
    def clear_dir(path: Path) -> None:
        """Make `path` an empty directory (a fresh instance or a snapshot to unpack)."""
        if path.exists():
            shutil.rmtree(path)
        os.makedirs(path, exist_ok=True)
