"""The commit log, `commits/<batchId>`, in Spark's format (reads Spark's own too).

Line 1 is the format (`v1`, or `v2` for checkpoint format V2), line 2 JSON, e.g.
`{"nextBatchWatermarkMs":0,"stateUniqueIds":{"0":[["id-p0"],["id-p1"]]}}`:
operator id -> partition -> one id per store of the partition. Batch `b` commits state
version `b+1`, so a task of batch `b` loads `(b, ids of commits/<b-1>)`.
Writes are create-only: a second writer of the same batch gets CommitConflictError and
the first commit stays as it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from statebed_base.errors import (
    AlreadyExistsError,
    CommitConflictError,
    CorruptFileError,
    MissingFileError,
    StatebedError,
    UnknownFormatError,
)
from statebed_base.jsonsafe import loads_strict

from . import failpoints
from .naming import COMMITS_DIR, commit_path, is_valid_id, parse_batch_id, spark_batch_id
from .offset_conf import shuffle_partitions
from .storage.base import Storage

__all__ = [
    "CommitLog",
    "CommitRecord",
    "StateIds",
    "base_commit",
    "committed_id",
    "parse_commit",
    "render_commit",
    "with_offset_partitions",
]

StateIds = Mapping[int, Sequence[Sequence[str | None]]]


@dataclass(frozen=True)
class CommitRecord:
    batch_id: int
    format: int  # 1 or 2
    watermark_ms: int = 0
    state_ids: dict[int, tuple[tuple[str | None, ...], ...]] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    partitions: int | None = None  # V1: the count the batch's offset log entry records (`with_offset_partitions`)

    @property
    def version(self) -> int:
        """The state version this batch committed."""
        return self.batch_id + 1

    def partition_count(self, operator: int) -> int | None:
        """How many partitions this batch committed for `operator` (None: the operator absent, or a V1
        entry whose offset log entry is not known). A repartition (Spark 4.2+ `repartition`) changes
        it from one batch to the next."""
        if self.state_ids is None:
            return self.partitions
        parts = self.state_ids.get(operator)
        return None if parts is None else len(parts)

    def id_for(self, operator: int, partition: int, store_index: int = 0) -> str | None:
        """The committed id of one store, or None (V1 commit, or not recorded)."""
        if not self.state_ids:
            return None
        parts = self.state_ids.get(operator)
        if parts is None or partition >= len(parts) or store_index >= len(parts[partition]):
            return None
        return parts[partition][store_index]


def with_offset_partitions(storage: Storage, records: Mapping[int, CommitRecord]) -> dict[int, CommitRecord]:
    """The records, each V1 one with the partition count its batch's offset log entry records: a V1
    commit names no partitions, so Spark's offline repartition of a V1 query shows only there."""
    return {b: replace(r, partitions=shuffle_partitions(storage, b)) if r.state_ids is None else r for b, r in records.items()}


def render_commit(state_ids: StateIds | None, watermark_ms: int = 0) -> bytes:
    doc: dict[str, Any] = {"nextBatchWatermarkMs": watermark_ms}
    if state_ids is None:
        return b"v1\n" + json.dumps(doc, separators=(",", ":")).encode()
    doc["stateUniqueIds"] = {str(op): [list(p) for p in parts] for op, parts in sorted(state_ids.items())}
    return b"v2\n" + json.dumps(doc, separators=(",", ":")).encode()


COMMIT_LOG_VERSIONS = ("v1", "v2")  # the first line of a commit entry: Spark's log versions, a file header


def parse_commit(data: bytes, *, file: str, batch_id: int) -> CommitRecord:
    if not data:
        raise CorruptFileError(file, "commit log entry is empty")
    text = data.decode("utf-8", errors="replace")
    first, _, body = text.partition("\n")
    first = first.strip()
    if first not in COMMIT_LOG_VERSIONS:
        if first.startswith("v") and first[1:].isdigit():
            raise UnknownFormatError(file, f"unknown commit log format {first} (this reader knows v1 and v2)")
        raise CorruptFileError(file, f"commit log entry does not start with a version line (found {first[:20]!r})")
    doc = loads_strict(body, file=file, what="commit log entry") if body.strip() else {}
    if not isinstance(doc, dict):
        raise CorruptFileError(file, "commit log JSON is not an object")
    state_ids = None
    raw_ids = doc.get("stateUniqueIds")
    if raw_ids is not None:
        if not isinstance(raw_ids, dict):
            raise CorruptFileError(file, "stateUniqueIds is not an object")
        state_ids = {}
        for op, parts in raw_ids.items():
            if not (op.isascii() and op.isdigit() and len(op) <= 18) or not isinstance(parts, list):
                raise CorruptFileError(file, f"stateUniqueIds[{op!r}] is malformed")
            rows = []
            for p, stores in enumerate(parts):
                if not isinstance(stores, list):
                    raise CorruptFileError(file, f"stateUniqueIds[{op}][{p}] is not a list")
                for s in stores:
                    if s is not None and (not isinstance(s, str) or not is_valid_id(s)):
                        raise CorruptFileError(file, f"stateUniqueIds[{op}][{p}] holds a malformed id {s!r}")
                rows.append(tuple(stores))
            state_ids[int(op)] = tuple(rows)
    wm = doc.get("nextBatchWatermarkMs", 0)
    watermark_ms = int(wm) if isinstance(wm, (int, float)) else 0  # finite: loads_strict refuses inf and NaN
    return CommitRecord(
        batch_id=batch_id,
        format=int(first[1:]),
        watermark_ms=watermark_ms,
        state_ids=state_ids,
        extra={k: v for k, v in doc.items() if k not in ("nextBatchWatermarkMs", "stateUniqueIds")},
    )


class CommitLog:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @staticmethod
    def path(batch_id: int) -> str:
        return commit_path(batch_id)

    def batch_ids(self) -> list[int]:
        """Every batch with an entry, whatever the entry is: a directory, FIFO or symlink loop named
        like a batch is listed too (its `read` then names it), never skipped."""
        names = [f.name for f in self.storage.list(COMMITS_DIR)] + self.storage.list_dirs(COMMITS_DIR)
        return sorted({b for b in map(parse_batch_id, names) if b is not None})

    def entries(self) -> list[tuple[int, int]]:
        """(batch, bytes) of every regular entry, oldest first (directories named like a batch are
        not entries a trim may delete: `batch_ids` lists them for the verifiers)."""
        return sorted((b, f.size) for f in self.storage.list(COMMITS_DIR) if (b := parse_batch_id(f.name)) is not None)

    def delete(self, batch_ids: Sequence[int]) -> None:
        """Delete entries: maintenance's trim of batches below every retained version (never the
        latest: the next batch builds on it), as Spark's own log keeps `minBatchesToRetain`."""
        self.storage.delete([self.path(b) for b in batch_ids])

    def strays(self) -> list[str]:
        """Notes on entries Spark would read as batch ids (Java's `Long.parseLong`: `+5`, `-1`) but this
        log does not: listed so a user can see them, never silently passed over."""
        names = [f.name for f in self.storage.list(COMMITS_DIR)] + self.storage.list_dirs(COMMITS_DIR)
        return [
            f"{self.storage.display(f'{COMMITS_DIR}/{n}')}: Spark reads it as batch {spark_batch_id(n)}, statebed does not (not checked)"
            for n in sorted(names)
            if parse_batch_id(n) is None and spark_batch_id(n) is not None
        ]

    def read(self, batch_id: int) -> CommitRecord | None:
        """The commit of `batch_id`, or None if that batch is not committed.

        NotRegularFileError naming it when the entry is a directory, FIFO or symlink loop."""
        if batch_id < 0:
            return None
        path = self.path(batch_id)
        try:
            data = self.storage.read(path)
        except MissingFileError:
            return None
        return parse_commit(data, file=self.storage.display(path), batch_id=batch_id)

    def latest(self) -> CommitRecord | None:
        ids = self.batch_ids()
        return self.read(ids[-1]) if ids else None

    def write(self, batch_id: int, state_ids: StateIds | None, watermark_ms: int = 0) -> None:
        """Commit a batch, create-only. `state_ids` None writes a V1 entry."""
        if failpoints.hit("commitlog.write.before"):
            return
        path = self.path(batch_id)
        try:
            self.storage.write(path, render_commit(state_ids, watermark_ms), create_only=True)
        except AlreadyExistsError:
            raise CommitConflictError(self.storage.display(path)) from None


def base_commit(log: CommitLog, batch_id: int) -> CommitRecord | None:
    """The commit tasks of `batch_id` build on: that of `batch_id - 1` (None for batch 0); it must exist."""
    if batch_id == 0:
        return None
    rec = log.read(batch_id - 1)
    if rec is None:
        raise StatebedError(f"batch {batch_id - 1} is not committed in {log.storage.display(COMMITS_DIR)}; cannot run batch {batch_id}")
    return rec


def committed_id(log: CommitLog, batch_id: int, operator: int, partition: int, store_index: int = 0) -> str | None:
    """Base id for a task of `batch_id`: the id committed by `batch_id - 1` (None for batch 0)."""
    rec = base_commit(log, batch_id)
    return rec.id_for(operator, partition, store_index) if rec else None
