"""Spark's row checksums (SPARK-54106): how a checkpoint that has them frames its rows, read and verified.

With `spark.sql.streaming.stateStore.rowChecksum.enabled` recorded in the offset log, Spark's
RocksDB store writes every value, in its RocksDB instance and in its changelogs alike, as
frames `[int32 LE crc][int32 LE size][element]`: one frame for a single value, one per element
for a list (joined by the merge operator's delimiter: `,` under mergeOperatorVersion 1, nothing
under 2). The CRC32C covers the full key (a column family's 2-byte prefix included) and then the
element. A changelog's delete record carries `[int32 LE crc][key]`, the CRC32C of the key alone.
Keys in RocksDB are plain. (Read from pyspark 4.3.0's `KeyValueChecksumEncoder` and checked
against checkpoints it wrote.) A reader verifies every frame and serves the value as it reads
without checksums; a mismatch names the file and the key, and nothing of that row is served.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from statebed_base.errors import CorruptFileError, UnknownFormatError

from .checksum import crc32c
from .merge import MERGE_VERSION_CONF, merge_operator_of
from .offset_conf import ROW_CHECKSUM_CONF, offset_conf
from .storage.base import Storage

__all__ = ["RowChecksumError", "RowChecksums", "checkpoint_row_checksums"]

_HEAD = 8  # crc + size
_SHOWN_KEY = 32  # bytes of a key shown in an error


class RowChecksumError(CorruptFileError):
    """A row whose recorded checksum does not match its key and value: `key` is the row's key."""

    def __init__(self, file: str, key: bytes, detail: str) -> None:
        self.key = key
        shown = key[:_SHOWN_KEY].hex() + ("…" if len(key) > _SHOWN_KEY else "")
        super().__init__(file, f"row checksum mismatch for key 0x{shown}: {detail}")


def _crc(key: bytes, element: bytes | memoryview) -> int:
    return crc32c(key + bytes(element))


@dataclass(frozen=True)
class RowChecksums:
    """One checkpoint's row framing. `delimiter` joins a list's elements (None: the checkpoint
    records no known merge operator, so a value of several frames cannot be told apart)."""

    delimiter: bytes | None
    source: str  # the offset log entry the settings were read from (named in errors)

    def unframe(self, key: bytes, value: bytes, *, file: str, verify: bool = True) -> bytes:
        """The value as Spark serves it (the elements, joined as without checksums), every frame
        verified; RowChecksumError naming `file` and `key` at the first one that does not match.
        `verify=False`: the frames only, for a value whose rows a load has verified already."""
        view, pos, n, out = memoryview(value), 0, len(value), []
        while True:
            if pos + _HEAD > n:
                raise RowChecksumError(file, key, f"a frame breaks off at byte {pos} of the {n}-byte value")
            crc = int.from_bytes(view[pos : pos + 4], "little")
            size = int.from_bytes(view[pos + 4 : pos + _HEAD], "little", signed=True)
            if size < 0 or pos + _HEAD + size > n:
                raise RowChecksumError(file, key, f"frame size {size} at byte {pos} runs past the {n}-byte value")
            element = view[pos + _HEAD : pos + _HEAD + size]
            if verify and (got := _crc(key, element)) != crc:
                raise RowChecksumError(file, key, f"recorded crc32c {crc:08x}, the row's is {got:08x} (frame at byte {pos})")
            out.append(bytes(element))
            pos += _HEAD + size
            if pos == n:
                return out[0] if len(out) == 1 else self._join(out, file)
            pos += self._skip_delimiter(view, pos, key, file)

    def _skip_delimiter(self, view: memoryview, pos: int, key: bytes, file: str) -> int:
        if self.delimiter is None:
            raise UnknownFormatError(
                file, f"a value of several checksummed elements, but {self.source} records no known {MERGE_VERSION_CONF}"
            )
        d = len(self.delimiter)
        if bytes(view[pos : pos + d]) != self.delimiter:
            raise RowChecksumError(file, key, f"no list delimiter {self.delimiter!r} after the frame ending at byte {pos}")
        return d

    def _join(self, elements: list[bytes], file: str) -> bytes:
        assert self.delimiter is not None  # _skip_delimiter raised otherwise
        return self.delimiter.join(elements)

    def deleted_key(self, framed: bytes, *, file: str) -> bytes:
        """The key of a changelog delete record (`[crc][key]`), its checksum verified."""
        if len(framed) < 4:
            raise RowChecksumError(file, framed, f"a {len(framed)}-byte delete key has no room for its checksum")
        crc, key = int.from_bytes(framed[:4], "little"), framed[4:]
        if (got := crc32c(key)) != crc:
            raise RowChecksumError(file, key, f"delete record: recorded crc32c {crc:08x}, the key's is {got:08x}")
        return key

    def replay_columns(
        self, ops: Sequence[int], keys: list[bytes], values: Sequence[bytes | None], delete_op: int, *, file: str
    ) -> list[bytes]:
        """A changelog's keys as the store applies them (delete keys without their checksum), after
        verifying every record: values stay framed, as Spark keeps them in RocksDB."""
        out = list(keys)
        for i, (op, key, value) in enumerate(zip(ops, keys, values, strict=True)):
            if op == delete_op or value is None:
                out[i] = self.deleted_key(key, file=file)
            else:
                self.unframe(key, value, file=file)
        return out


def checkpoint_row_checksums(storage: Storage) -> RowChecksums | None:
    """The checkpoint's row framing, as its newest offset log entry records it (None: rows are plain)."""
    found = offset_conf(storage)
    if found.conf.get(ROW_CHECKSUM_CONF, "false").strip().lower() != "true":
        return None
    return RowChecksums(merge_operator_of(found).delimiter, found.source)
