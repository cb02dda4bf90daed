"""Snapshot uploads: a background thread that never blocks a commit and never fails one.

Commit takes a local RocksDB checkpoint (hard links) and queues it; the uploader turns
every queued `(version, id)` into `SSTs/*.sst` + `<version>_<id>.zip` — all of them, not
only the newest, because it cannot know which attempt of a version the driver commits
(seed, "two snapshots" example). SSTs already in DFS for this RocksDB incarnation are
referenced, not re-uploaded. A failed upload is retried, then skipped with a warning:
V2 loads trace lineage past a missing snapshot, so a lost snapshot costs replay time only.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statebed_base.errors import StatebedError, UsageError
from statebed_base.localfs import remove_tree
from statebed_base.log import get_logger, kv

from . import failpoints
from .checksum import crc32c
from .lineage import CheckpointRef, Lineage
from .local_dirs import read_checkpoint_dir
from .naming import SNAPSHOT, SST_DIR, StateFileName, StoreId, new_sst_name
from .publish import publish_state_file
from .snapshot import ImmutableFile, SnapshotMetadata, build_zip
from .storage.base import Storage

__all__ = ["PendingSnapshot", "SnapshotUploader", "SstRegistry", "default_uploader", "upload_snapshot"]

log = get_logger("uploader")
DEFAULT_MAX_PENDING = 16  # snapshots waiting per process (each a local RocksDB checkpoint)


class SstRegistry:
    """Local SST files of one RocksDB incarnation that already live in DFS, and their DFS names.

    RocksDB never reuses a file number within an incarnation, so `(name, size)` identifies
    content there; a reload starts a new registry. Files are registered only once a zip
    naming them is published, so every registered SST is referenced by some snapshot.
    """

    def __init__(self, known: Iterable[ImmutableFile] = ()) -> None:
        self._lock = threading.Lock()
        self._m: dict[tuple[str, int], ImmutableFile] = {(f.local, f.size): f for f in known}

    def lookup(self, local: str, size: int) -> ImmutableFile | None:
        with self._lock:
            return self._m.get((local, size))

    def add(self, files: Iterable[ImmutableFile]) -> None:
        with self._lock:
            for f in files:
                self._m[(f.local, f.size)] = f

    def files(self) -> tuple[ImmutableFile, ...]:
        with self._lock:
            return tuple(self._m.values())

    def __len__(self) -> int:
        return len(self._m)


@dataclass
class PendingSnapshot:
    storage: Storage
    store: StoreId
    ref: CheckpointRef
    lineage: Lineage | None  # None in V1
    checkpoint_dir: Path  # local RocksDB checkpoint, removed once handled
    registry: SstRegistry
    num_keys: int
    checksums: bool = True
    creator: dict[str, Any] = field(default_factory=dict)
    attempts: int = 3
    backoff_s: float = 0.5
    queued_at: float = field(default_factory=time.monotonic)
    # The queuing thread's context: the upload's failpoints see the task (batch, partition,
    # attempt) that queued the snapshot, so a chaos fault can aim at one attempt's snapshot.
    context: contextvars.Context = field(default_factory=contextvars.copy_context)

    @property
    def path(self) -> str:
        return self.store.path(StateFileName(self.ref.version, self.ref.id, SNAPSHOT).name)


def upload_snapshot(p: PendingSnapshot, uploaded: dict[str, ImmutableFile] | None = None) -> bool:
    """Publish one snapshot; returns False if a failpoint dropped it. Raises on storage errors.

    `uploaded` carries SSTs already sent by an earlier try of the same snapshot.
    """
    if failpoints.hit("snapshot.upload.before"):
        log.info("snapshot dropped by failpoint", extra=kv(store=str(p.store), version=p.ref.version, id=p.ref.id))
        return False
    uploaded = {} if uploaded is None else uploaded
    ssts: list[ImmutableFile] = []
    local_ssts, others = read_checkpoint_dir(p.checkpoint_dir)
    for f in local_ssts:
        size = f.stat().st_size
        known = p.registry.lookup(f.name, size)
        if known is None:
            done = uploaded.get(f.name)
            if done is None or done.size != size:
                data = f.read_bytes()
                dfs = new_sst_name(f.name)
                p.storage.write(p.store.path(f"{SST_DIR}/{dfs}"), data, create_only=True)
                uploaded[f.name] = ImmutableFile(f.name, dfs, size, crc32c(data))  # readers check SST contents with it
            known = uploaded[f.name]
        ssts.append(known)
    _check_complete(p, others)
    meta = SnapshotMetadata(
        sst_files=tuple(ssts),
        num_keys=p.num_keys,
        lineage=p.lineage,
        checkpoint_id=p.ref.id,
        version=p.ref.version,
        store=p.store,
        extra={"writer": "statebed"},
    )
    publish_state_file(
        p.storage, p.path, build_zip(others, meta), create_only=p.ref.id is not None, checksums=p.checksums, creator=p.creator
    )
    p.registry.add(uploaded.values())
    failpoints.hit("snapshot.upload.after")
    return True


def _check_complete(p: PendingSnapshot, others: dict[str, bytes]) -> None:
    """Never publish a local checkpoint that lost files (e.g. its directory was being removed):
    a zip without CURRENT or the MANIFEST it names would not open, and could stand in for changelogs."""
    manifest = others.get("CURRENT", b"").decode(errors="replace").strip()
    if not manifest.startswith("MANIFEST-") or manifest not in others:
        raise StatebedError(
            f"{p.checkpoint_dir}: local checkpoint of {p.store} version {p.ref.version} is incomplete "
            f"(CURRENT names {manifest or 'nothing'!r}, files: {sorted(others)}); not uploading it"
        )


class SnapshotUploader:
    """One daemon thread draining a bounded FIFO of pending snapshots.

    At most `max_pending` snapshots wait (each holds a local RocksDB checkpoint on disk).
    When the queue is full, the oldest waiting snapshot of the same store (else the oldest
    waiting one) is dropped and counted in `dropped`: V2 loads trace lineage past a missing
    snapshot, so a dropped snapshot costs replay time, never correctness.
    """

    def __init__(self, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if not isinstance(max_pending, int) or isinstance(max_pending, bool) or max_pending < 1:
            raise UsageError(f"max_pending must be an integer >= 1, got {max_pending!r}")
        self.max_pending = max_pending
        self._cond = threading.Condition()
        self._queue: deque[PendingSnapshot] = deque()
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self.uploaded = 0
        self.skipped = 0
        self.failed = 0
        self.dropped = 0

    def submit(self, p: PendingSnapshot) -> None:
        victim = None
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="statebed-snapshot-uploader", daemon=True)
                self._thread.start()
            if len(self._queue) >= self.max_pending:
                victim = next((q for q in self._queue if q.store == p.store), self._queue[0])
                self._queue.remove(victim)
                self.dropped += 1
            self._queue.append(p)
            self._cond.notify_all()
        if victim is not None:
            remove_tree(victim.checkpoint_dir)
            log.warning(
                "snapshot queue full; dropped the oldest waiting snapshot (loads replay changelogs instead)",
                extra=kv(store=str(victim.store), version=victim.ref.version, id=victim.ref.id, max_pending=self.max_pending),
            )

    def pending(self) -> int:
        """Snapshots queued or being uploaded."""
        with self._cond:
            return len(self._queue) + self._in_flight

    def drain(self, timeout_s: float = 60.0) -> bool:
        """Wait until every queued snapshot is handled; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._in_flight, timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue))
                p = self._queue.popleft()
                self._in_flight += 1
            try:
                self._handle(p)
            finally:
                with self._cond:
                    self._in_flight -= 1
                    self._cond.notify_all()

    def _handle(self, p: PendingSnapshot) -> None:
        fields = dict(store=str(p.store), version=p.ref.version, id=p.ref.id)
        uploaded: dict[str, ImmutableFile] = {}
        try:
            for attempt in range(1, p.attempts + 1):
                try:
                    if p.context.run(upload_snapshot, p, uploaded):
                        self.uploaded += 1
                        log.info(
                            "snapshot uploaded", extra=kv(**fields, ssts=len(uploaded), queued_s=round(time.monotonic() - p.queued_at, 3))
                        )
                    else:
                        self.skipped += 1
                    return
                except (StatebedError, OSError) as e:
                    if attempt == p.attempts:
                        self.failed += 1
                        log.warning(
                            "snapshot upload failed; skipped (loads replay changelogs instead)",
                            extra=kv(**fields, attempts=attempt, error=str(e)),
                        )
                        return
                    log.info("snapshot upload failed; retrying", extra=kv(**fields, attempt=attempt, error=str(e)))
                    time.sleep(p.backoff_s * attempt)
                except Exception as e:  # never let the maintenance thread die
                    self.failed += 1
                    log.error("snapshot upload crashed; skipped", extra=kv(**fields, error=repr(e)), exc_info=True)
                    return
        finally:
            remove_tree(p.checkpoint_dir)


_DEFAULT: SnapshotUploader | None = None
_DEFAULT_LOCK = threading.Lock()


def default_uploader() -> SnapshotUploader:
    """The process-wide uploader (an executor's maintenance thread)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = SnapshotUploader()
        return _DEFAULT
