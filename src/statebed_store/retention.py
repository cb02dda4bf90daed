"""Which files a committed batch needs: the retained window, and the files its load plans read.

The one owner of "needed". `verify lineage` (what is checked, what is an orphan), `cleanup`
(what may be deleted) and the job's maintenance all ask this module, so that no file a
retained committed batch needs is ever called an orphan or proposed for deletion.

**The retained window.** The kept commit log runs from batch F to batch L. Every batch in
the window must load the version it committed (`b + 1`); below it nothing is required, and a
version there with no file is retention, not damage. Where the window starts:

* Spark's own checkpoint (`offsets/` beside `commits/`): `minBatchesToRetain` (M) is not
  recorded, so the window is inferred from what Spark left. The driver purges both logs
  below `batchId - M` when it writes batch `batchId`'s offsets (`MicroBatchExecution`,
  `purge` / `AsyncLogPurge.purgeAsync`; purge is exclusive), so F >= (last purging batch) - M.
  The executors' maintenance (`RocksDBFileManager.deleteOldVersions(M)`) deletes every file,
  of every id, with a version below `minVersionToRetain`, the newest snapshot version s with
  `s <= maxSnapshotVersionPresent - M + 1`. The newest snapshot is at most the version the
  running batch writes (`batchId + 1`, before its commit entry exists), so s <= F + 2 and
  retention can delete versions <= F + 1: the version the first kept entry committed (the log
  keeps one entry more than the state). So versions <= F + 1 may be gone; from F + 2 on every
  committed version must load.
* statebed's checkpoint: its cleanup (the job's maintenance and `statebed cleanup`) records the
  first batch it keeps loadable in `retention.json` *before* it deletes anything; the window
  starts at the later of F and that record. Without a record every kept entry is required.

**Needed files**: for every required `(version, id)`, the files its load plan reads (the
snapshot it starts from, which a load reads first where it exists, and the changelogs it
replays), the plan found by the loads' own loop (`plan.plan_with_fallback`), plus the SSTs
those snapshots name. Every other state file is not needed: an attempt the commit log did not
pick, a version below the window, or a committed changelog its own snapshot shadows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from statebed_base.errors import CheckpointFileError, CorruptFileError, MissingFileError, UnplannableError
from statebed_base.jsonsafe import loads_strict

from .commitlog import CommitRecord
from .lineage import CheckpointRef
from .naming import CHANGELOG, OFFSETS_DIR, SNAPSHOT, StateFileName
from .plan import LoadPlan, loadable_plan
from .storage.base import Storage
from .store_files import StoreFiles

RETENTION_MARKER = "retention.json"  # beside partitioner.json: the first batch statebed's cleanup keeps loadable

__all__ = [
    "RETENTION_MARKER",
    "KeptWindow",
    "kept_window",
    "needed_names",
    "needed_refs",
    "plan_names",
    "record_retention",
    "recorded_retention",
]


@dataclass(frozen=True)
class KeptWindow:
    """The committed batches whose versions must load: `first_batch`..`latest_batch`."""

    first_batch: int
    latest_batch: int
    why: str  # one line: how the start was found
    sparks: bool = False  # Spark's checkpoint: its retention, not statebed's record, drew the line

    @property
    def first_version(self) -> int:
        return self.first_batch + 1

    def required(self, version: int) -> bool:
        return self.first_version <= version <= self.latest_batch + 1

    def needs(self, version: int, present: bool) -> bool:
        """Whether a kept entry's `version` needs what its load plan reads: inside the window always;
        in Spark's checkpoint also the one version more (F + 1) while its files are there (a rewind to
        batch F still loads it; Spark's retention may delete it, so its absence is no anomaly). Below
        statebed's recorded retention nothing is needed: its cleanup released it before deleting."""
        return self.required(version) or (self.sparks and present)


def kept_window(storage: Storage, batches: list[int]) -> KeptWindow | None:
    """The retained window of a checkpoint whose kept commit entries are `batches` (sorted); None: no entries."""
    if not batches:
        return None
    first, latest = batches[0], batches[-1]
    if OFFSETS_DIR in storage.list_dirs(""):
        start = min(first + 1, latest)
        return KeptWindow(
            start, latest, f"Spark's commit log starts at batch {first}: its retention may have deleted versions up to {first + 1}", True
        )
    recorded = recorded_retention(storage)
    if recorded is not None and recorded > first:
        return KeptWindow(min(recorded, latest), latest, f"statebed's cleanup recorded batch {recorded} as the first it keeps loadable")
    return KeptWindow(first, latest, f"the commit log starts at batch {first}")


def recorded_retention(storage: Storage) -> int | None:
    """The first batch statebed's cleanup keeps loadable (`retention.json`), None when unrecorded.
    A record that cannot be read is an error naming the file: guessing could excuse a lost file."""
    try:
        raw = storage.read(RETENTION_MARKER)
    except MissingFileError:
        return None
    doc = loads_strict(raw, file=storage.display(RETENTION_MARKER), what="retention record")
    value = doc.get("firstRetainedBatch") if isinstance(doc, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CorruptFileError(storage.display(RETENTION_MARKER), 'expected {"firstRetainedBatch": <batch id >= 0>}')
    return value


def record_retention(storage: Storage, first_batch: int) -> None:
    """Record, before any delete, that batches below `first_batch` need not load (never lowered)."""
    if OFFSETS_DIR in storage.list_dirs(""):
        return  # Spark's checkpoint: its own retention, nothing of statebed's is written into it
    current = recorded_retention(storage)
    if current is not None and current >= first_batch:
        return
    storage.write(RETENTION_MARKER, json.dumps({"firstRetainedBatch": first_batch}).encode())


def plan_names(plan: LoadPlan) -> set[StateFileName]:
    """The state files a load following `plan` reads: its snapshot and its changelogs (a snapshot it
    planned around is damaged: reported by the verifier, garbage to cleanup, needed by no load)."""
    out = {StateFileName(r.version, r.id, CHANGELOG) for r in plan.changelogs}
    if plan.snapshot is not None:
        out.add(StateFileName(plan.snapshot.version, plan.snapshot.id, SNAPSHOT))
    return out


def needed_refs(window: KeptWindow | None, commits: Iterable[CommitRecord], files: StoreFiles, index: int) -> list[CheckpointRef]:
    """The `(version, id)` of `files`' store (its `index` among its partition's stores) whose load
    plans the kept commit entries need (`KeptWindow.needs`); a batch without the store (a
    repartition, a V2 entry that names no id for it) needs nothing of it."""
    store = files.store
    out = []
    for rec in commits:
        count = rec.partition_count(store.operator)
        if window is None or (count is not None and store.partition >= count):
            continue
        cid = rec.id_for(store.operator, store.partition, index)
        ref = CheckpointRef(rec.version, cid)
        if (cid is not None or rec.state_ids is None) and window.needs(ref.version, files.has_changelog(ref) or files.has_snapshot(ref)):
            out.append(ref)
    return out


def needed_names(files: StoreFiles, refs: Iterable[CheckpointRef]) -> set[StateFileName]:
    """The files the checked load plans of `refs` (`needed_refs`) read: what `verify lineage` never
    calls an orphan and `statebed ls --json` and the report's graph call needed. A ref with no plan
    needs nothing here: where it is required, the verifier reports it."""
    out: set[StateFileName] = set()
    for ref in refs:
        try:
            plan, _ = loadable_plan(files, ref)
        except (UnplannableError, CheckpointFileError):
            continue
        out |= plan_names(plan)
    return out
