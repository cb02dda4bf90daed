"""Snapshot uploads: a background thread that never blocks a commit and never fails one.

Commit takes a local RocksDB checkpoint (hard links) and queues it; the uploader turns
every queued `(version, id)` into `SSTs/*.sst` + `<version>_<id>.zip` — all of them, not
only the newest, because it cannot know which attempt of a version the driver commits
(seed, "two snapshots" example). SSTs already in DFS for this RocksDB incarnation are
referenced, not re-uploaded. A failed upload is retried, then skipped with a warning:
V2 loads trace lineage past a missing snapshot, so a lost snapshot costs replay time only.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import failpoints
from .errors import StatebedError
from .lineage import CheckpointRef, Lineage
from .log import get_logger, kv
from .naming import SNAPSHOT, SST_DIR, StateFileName, StoreId
from .publish import publish_state_file
from .snapshot import ImmutableFile, SnapshotMetadata, build_zip
from .storage.base import Storage

__all__ = ["PendingSnapshot", "SnapshotUploader", "SstRegistry", "default_uploader", "upload_snapshot"]

log = get_logger("uploader")


class SstRegistry:
    """Local SST files of one RocksDB incarnation that already live in DFS, and their DFS names.

    RocksDB never reuses a file number within an incarnation, so `(name, size)` identifies
    content there; a reload starts a new registry. Files are registered only once a zip
    naming them is published, so every registered SST is referenced by some snapshot.
    """

    def __init__(self, known: Iterable[ImmutableFile] = ()) -> None:
        self._lock = threading.Lock()
        self._m: dict[tuple[str, int], str] = {(f.local, f.size): f.dfs for f in known}

    def lookup(self, local: str, size: int) -> str | None:
        with self._lock:
            return self._m.get((local, size))

    def add(self, files: Iterable[ImmutableFile]) -> None:
        with self._lock:
            for f in files:
                self._m[(f.local, f.size)] = f.dfs

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
    others: dict[str, bytes] = {}
    for f in sorted(p.checkpoint_dir.iterdir()):
        if not f.is_file():
            continue
        if f.suffix == ".sst":
            size = f.stat().st_size
            dfs = p.registry.lookup(f.name, size)
            if dfs is None:
                done = uploaded.get(f.name)
                if done is None or done.size != size:
                    dfs = f"{f.stem}-{uuid.uuid4()}.sst"
                    p.storage.write(f"{p.store.dir}/{SST_DIR}/{dfs}", f.read_bytes(), create_only=True)
                    uploaded[f.name] = ImmutableFile(f.name, dfs, size)
                dfs = uploaded[f.name].dfs
            ssts.append(ImmutableFile(f.name, dfs, size))
        elif f.name != "LOCK":
            others[f.name] = f.read_bytes()
    _check_complete(p, others)
    meta = SnapshotMetadata(
        sst_files=tuple(ssts),
        num_keys=p.num_keys,
        lineage=p.lineage,
        checkpoint_id=p.ref.id,
        version=p.ref.version,
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
    """One daemon thread draining a FIFO of pending snapshots."""

    def __init__(self) -> None:
        self._q: queue.Queue[PendingSnapshot | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.uploaded = 0
        self.skipped = 0
        self.failed = 0

    def submit(self, p: PendingSnapshot) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="statebed-snapshot-uploader", daemon=True)
                self._thread.start()
        self._q.put(p)

    def pending(self) -> int:
        return self._q.unfinished_tasks

    def drain(self, timeout_s: float = 60.0) -> bool:
        """Wait until every queued snapshot is handled; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self._q.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def _run(self) -> None:
        while True:
            p = self._q.get()
            try:
                if p is None:
                    return
                self._handle(p)
            finally:
                self._q.task_done()

    def _handle(self, p: PendingSnapshot) -> None:
        fields = dict(store=str(p.store), version=p.ref.version, id=p.ref.id)
        uploaded: dict[str, ImmutableFile] = {}
        try:
            for attempt in range(1, p.attempts + 1):
                try:
                    if upload_snapshot(p, uploaded):
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
            shutil.rmtree(p.checkpoint_dir, ignore_errors=True)


_DEFAULT: SnapshotUploader | None = None
_DEFAULT_LOCK = threading.Lock()


def default_uploader() -> SnapshotUploader:
    """The process-wide uploader (an executor's maintenance thread)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = SnapshotUploader()
        return _DEFAULT
