"""RocksDB merge in Spark's state store: how ListState appends join, so a reader rebuilds them byte for byte.

transformWithState's ListState appends with RocksDB `merge` under the
`StringAppendOperator` Spark configures: `mergeOperatorVersion` 1 joins operands with `,`,
version 2 (recorded in the offset log's conf) with nothing, each element being
length-prefixed (`<int32 little-endian size><element>`). A changelog carries merge records
and a snapshot's SSTs can hold unmerged operands, so both the replay and the RocksDB
instance that opens a snapshot must apply the same operator: replaying a merge as a put
keeps only the last append, and the snapshot's own OPTIONS file names the operator
without its delimiter (RocksDB then uses `,`). Where the operator cannot be told, a merge
is an error, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from statebed_base import localfs
from statebed_base.errors import CorruptFileError, UnknownFormatError

from .changelog import PUT
from .engine import Merge
from .offset_conf import OffsetConf, offset_conf
from .storage.base import Storage

__all__ = [
    "MERGE_VERSION_CONF",
    "MergeOperator",
    "checkpoint_merge_operator",
    "configure_snapshot_options",
    "merge_operator_of",
    "replay_merge",
]

MERGE_VERSION_CONF = "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion"
_DELIMITERS = {1: b",", 2: b""}
_OPTIONS_LINE = re.compile(rb"^(\s*merge_operator=).*$", re.MULTILINE)


@dataclass(frozen=True)
class MergeOperator:
    """Spark's StringAppendOperator for one checkpoint; `version` None when the checkpoint does not say."""

    version: int | None
    source: str  # the file the version was read from (named in errors)

    @property
    def delimiter(self) -> bytes | None:
        """What joins a list's elements (None: the version is unknown)."""
        return _DELIMITERS.get(self.version) if self.version is not None else None

    def merge(self, existing: bytes | None, operand: bytes, *, file: str) -> bytes:
        """RocksDB's result of merging `operand` into `existing` (None: no value yet)."""
        if self.version not in _DELIMITERS:
            raise UnknownFormatError(file, f"holds RocksDB merge records but {self.source} records no known {MERGE_VERSION_CONF}")
        if existing is None:
            return operand
        return existing + _DELIMITERS[self.version] + operand

    def check(self, value: bytes, *, file: str) -> None:
        """A version-2 list value must be whole length-prefixed elements: anything else is not served."""
        if self.version != 2:
            return
        pos, n = 0, len(value)
        while pos < n:
            if pos + 4 > n:
                raise CorruptFileError(file, f"merged list value breaks off inside an element size at byte {pos}")
            size = int.from_bytes(value[pos : pos + 4], "little", signed=True)
            if size < 0 or pos + 4 + size > n:
                raise CorruptFileError(file, f"merged list value has element size {size} at byte {pos}, past its {n} bytes")
            pos += 4 + size

    def options_entry(self) -> bytes:
        """The `merge_operator=` value for a RocksDB OPTIONS file (none when the version is unknown)."""
        if self.version not in _DELIMITERS:
            return b"nullptr"
        return b"{id=StringAppendOperator;delimiter=" + _DELIMITERS[self.version] + b";}"


def checkpoint_merge_operator(storage: Storage) -> MergeOperator:
    """The merge operator the newest offset log entry's conf records (Spark reads it from there on restart)."""
    return merge_operator_of(offset_conf(storage))


def merge_operator_of(found: OffsetConf) -> MergeOperator:
    """The merge operator an offset log entry's conf records."""
    raw = found.conf.get(MERGE_VERSION_CONF)
    return MergeOperator(int(raw) if raw is not None and raw.isdigit() else None, found.source)


def _names_operator(text: bytes) -> bool:
    return bool(_OPTIONS_LINE.search(text)) and not re.search(rb"^\s*merge_operator=nullptr\s*$", text, re.MULTILINE)


def configure_snapshot_options(db_dir: Path, operator: Callable[[], MergeOperator], *, file: str) -> None:
    """Point an unpacked snapshot's OPTIONS files at the checkpoint's merge operator when they name
    one (Spark's do; statebed's name none, and then `operator` is never asked). `db_dir` is the
    reader's own local copy of snapshot `file`. An unknown operator is set to none: a store that never
    merged (an aggregation) reads as before, and an operand in an SST fails the read (`engine`)."""
    texts = {f: localfs.read_regular(f) for f in sorted(db_dir.glob("OPTIONS-*"))}
    named = {f: t for f, t in texts.items() if _names_operator(t)}
    if not named:
        return
    entry = operator().options_entry()
    for f, text in named.items():
        localfs.atomic_write(f, _OPTIONS_LINE.sub(lambda m: m.group(1) + entry, text))


def replay_merge(storage: Storage, file: str, *, framed: bool = False) -> Merge:
    """How the replay of changelog `file` folds its merge records (the checkpoint's operator; an
    error at the first merge when the checkpoint does not record one). `framed`: the values carry
    Spark's row checksums, each operand verified as its own frame (`row_checksum`), so the merged
    value is whole frames and the length-prefix check does not apply."""
    op = checkpoint_merge_operator(storage)
    if op.version not in _DELIMITERS:
        raise UnknownFormatError(file, f"holds RocksDB merge records but {op.source} records no known {MERGE_VERSION_CONF}")
    return Merge(
        put_op=PUT,
        fold=lambda existing, operand: op.merge(existing, operand, file=file),
        check=(lambda value: None) if framed else (lambda value: op.check(value, file=file)),
    )
