"""Cleanup: keep the last N committed versions loadable, delete everything else that is safe.

Why each delete is safe:

* Only files at versions <= the latest committed version are candidates. Higher versions
  belong to batches still running (their attempts may yet be committed).
* For every retained committed `(version, id)` the load plan is computed (`plan_load`);
  every file on those plans, and each retained version's own changelog and snapshot, is
  kept. Any other state file at a decided version is either below every plan (history
  nobody can load any more) or an attempt the commit log did not pick (an orphan): no
  retained version can reach it, because loads follow lineage, never names.
* SSTs referenced by a kept snapshot, or by any snapshot of a not-yet-decided version,
  are kept; an unreferenced SST is deleted only once older than `sst_orphan_grace_s`,
  because an upload in flight publishes its SSTs before the zip that names them.
* Each retained version is planned with the loads' own loop (`plan.plan_with_fallback`):
  a snapshot is relied on only if its metadata reads and every SST it names is listed with
  its size; one that is not (an upload that lost a race with an earlier cleanup, damage)
  is planned around, so the changelogs a load would fall back to are kept. The snapshot
  the oldest retained version would load from is also checked against each SST's recorded
  CRC32C (once per header cache): it is the one whose fallback needs the changelogs before
  it. Newer retained versions' snapshots need no such read: every retained version's own
  changelog is kept, so a load of any of them can fall back to that base.
* If a retained version cannot be planned, nothing is deleted: cleanup never turns a
  damaged checkpoint into a lost one.
* Deletes go out in batches, state files before their sidecars and SSTs last; a process
  killed between two batches (failpoint `cleanup.delete.between`) leaves only files no
  retained plan needs, which the next pass deletes (a sidecar whose main file is gone is
  an orphan sidecar).

Cost: one LIST of the store directory, one of its `SSTs/`, one header read per retained
changelog not yet in the header cache, one zip metadata read per kept snapshot not yet
cached, one read per SST of the oldest retained version's base not yet checked, one
batched delete. In steady state that is flat in the length of the history.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from statebed_base.errors import CheckpointFileError, StatebedError, UnplannableError
from statebed_base.log import get_logger, kv

from . import failpoints
from .commitlog import CommitLog
from .inspection import discover_stores, store_index
from .lineage import CheckpointRef
from .naming import CHANGELOG, COMMITS_DIR, SNAPSHOT, SST_DIR, StateFileName, StoreId, parse_state_file, sidecar_main
from .plan import LoadPlan, SnapshotUnusable, plan_with_fallback
from .retention import kept_window, plan_names, record_retention
from .storage.base import Storage
from .store_files import HeaderCache, StoreFiles
from .unpack import check_listed

__all__ = ["DELETE_BATCH", "CheckpointCleanup", "CleanupReport", "cleanup_checkpoint", "cleanup_store", "retained_versions"]

log = get_logger("cleanup")

DELETE_BATCH = 1000  # S3's DeleteObjects limit: one request per batch
failpoints.register("cleanup.delete.between", "cleanup: between two delete batches (drop: stop deleting; the next pass finishes)")


@dataclass
class CleanupReport:
    store: StoreId
    retained: int
    deleted: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)  # subset of `deleted`: losing attempts
    ssts_deleted: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # shown path -> why it is deleted
    sizes: dict[str, int] = field(default_factory=dict)  # shown path -> bytes, as listed
    dry_run: bool = False
    files_kept: int = 0  # state files, sidecars and SSTs the store's listing holds after the deletes
    bytes_kept: int = 0  # (from the listing cleanup made anyway: no extra request)

    @property
    def files_deleted(self) -> int:
        return len(self.deleted) + len(self.ssts_deleted)

    @property
    def bytes_deleted(self) -> int:
        return sum(self.sizes.values())


def retained_versions(
    log_: CommitLog, store_index: int, operator: int, partition: int, latest_batch: int, keep: int
) -> list[CheckpointRef]:
    """The committed `(version, id)` of the last `keep` batches up to `latest_batch`, from the commit log
    (a batch with fewer partitions than `partition` + 1, after a repartition, retains nothing of it)."""
    out = []
    for b in range(max(0, latest_batch - keep + 1), latest_batch + 1):
        rec = log_.read(b)
        if rec is None:
            raise StatebedError(f"batch {b} is missing from {log_.storage.display(COMMITS_DIR)}; cleanup needs every retained batch")
        count = rec.partition_count(operator)
        if count is None or partition < count:
            out.append(CheckpointRef(rec.version, rec.id_for(operator, partition, store_index)))
    return out


@dataclass
class CheckpointCleanup:
    """Every store's cleanup of one checkpoint, at one latest batch."""

    latest_batch: int | None
    first_retained: int | None
    stores: list[CleanupReport] = field(default_factory=list)

    @property
    def files(self) -> int:
        return sum(r.files_deleted for r in self.stores)

    @property
    def bytes(self) -> int:
        return sum(r.bytes_deleted for r in self.stores)


def cleanup_checkpoint(
    storage: Storage,
    retain: int | None,
    *,
    sst_orphan_grace_s: float = 600.0,
    dry_run: bool = False,
    delete_batch: int = DELETE_BATCH,
) -> CheckpointCleanup:
    """Clean every store, keeping the last `retain` committed batches loadable (None: every batch
    the commit log still holds, newest contiguous run: a Spark checkpoint whose own retention
    already dropped older entries). Stores are planned before any is cleaned: a store that cannot
    be planned stops the whole cleanup before anything is deleted."""
    log_ = CommitLog(storage)
    batches = log_.batch_ids()
    if not batches:
        return CheckpointCleanup(None, None)
    latest = batches[-1]
    window = kept_window(storage, batches)
    assert window is not None
    # retain None (a Spark checkpoint): every batch the log holds, its first version only where Spark left its files
    first = max(latest - retain + 1, window.first_batch) if retain is not None else _contiguous_start(batches)
    stores = discover_stores(storage)
    retained: list[tuple[StoreId, list[CheckpointRef]]] = []
    for s in stores:
        idx = store_index(s, [t.store_name for t in stores if (t.operator, t.partition) == (s.operator, s.partition)])
        retained.append((s, retained_versions(log_, idx, s.operator, s.partition, latest, latest - first + 1)))
    out = CheckpointCleanup(latest, first)
    if not dry_run:
        record_retention(storage, first)  # before any delete: the verifiers read the window from it
    cache = HeaderCache()
    for s, refs in retained:
        report = cleanup_store(
            storage,
            s,
            refs,
            sst_orphan_grace_s=sst_orphan_grace_s,
            cache=cache,
            dry_run=dry_run,
            delete_batch=delete_batch,
            optional_below=window.first_version,
        )
        out.stores.append(report)
    return out


def _contiguous_start(batches: list[int]) -> int:
    first = batches[-1]
    present = set(batches)
    while first - 1 in present:
        first -= 1
    return first


def cleanup_store(
    storage: Storage,
    store: StoreId,
    retained: Sequence[CheckpointRef],
    *,
    sst_orphan_grace_s: float = 600.0,
    cache: HeaderCache | None = None,
    now: float | None = None,
    dry_run: bool = False,
    delete_batch: int = DELETE_BATCH,
    optional_below: int = 0,
) -> CleanupReport:
    """Delete what no retained committed version needs. `retained` must be committed versions; one
    below `optional_below` (the retained window, `retention.kept_window`) with no file left is
    skipped (Spark's retention deleted it). With `dry_run` the report says what would go, and nothing is deleted."""
    files = StoreFiles(storage, store, cache=cache)
    retained = [r for r in retained if r.version >= optional_below or files.has_changelog(r) or files.has_snapshot(r)]
    report = CleanupReport(store, len(retained), dry_run=dry_run)
    if not retained:
        return report
    latest = max(r.version for r in retained)
    files.sst_listing()  # listed after the zips: a listed zip's SSTs were uploaded before it
    oldest = min(retained, key=lambda r: r.version)
    verdicts: dict[tuple[CheckpointRef, bool], StatebedError | None] = {}

    def problem(snap: CheckpointRef, contents: bool) -> StatebedError | None:
        """Why `snap` cannot stand in for changelogs (None: it can), checked once per cleanup."""
        if (snap, contents) not in verdicts and verdicts.get((snap, True), False) is None:
            return None  # passed the deeper check already
        if (snap, contents) not in verdicts:
            try:
                _check_base(files, snap, contents=contents)
                verdicts[snap, contents] = None
            except (CheckpointFileError, UnplannableError) as e:
                verdicts[snap, contents] = e
        return verdicts[snap, contents]

    def plan_of(ref: CheckpointRef) -> LoadPlan:
        """The plan a load of `ref` ends up with: the loads' own loop, damaged snapshots planned around."""

        def usable(plan: LoadPlan) -> LoadPlan:
            snap = plan.snapshot
            if snap is not None and (err := problem(snap, contents=ref == oldest)) is not None:
                raise SnapshotUnusable(snap, err)
            return plan

        return plan_with_fallback(files, ref, usable)  # raises: nothing is deleted when a retained version is unloadable

    keep: set[StateFileName] = set()
    kept_snapshots: set[CheckpointRef] = set()
    skipped: set[CheckpointRef] = set()
    for ref in retained:
        plan = plan_of(ref)
        skipped.update(r for r, _ in plan.skipped)
        keep |= plan_names(plan)
        if plan.snapshot is not None:
            kept_snapshots.add(plan.snapshot)
        for kind in (CHANGELOG, SNAPSHOT):
            if files.has(ref, kind):
                keep.add(StateFileName(ref.version, ref.id, kind))
        if files.has_snapshot(ref) and problem(ref, contents=False) is None:
            kept_snapshots.add(ref)
    if skipped:
        log.warning("damaged snapshots are not relied on", extra=kv(store=str(store), snapshots=[str(b) for b in sorted(skipped)]))
    committed_ids = {(r.version, r.id) for r in retained}
    oldest_version = min(r.version for r in retained)
    doomed: list[StateFileName] = [n for n in files.files if n.version <= latest and n not in keep]
    deleted_names = {n.name for n in doomed}
    why: dict[str, tuple[str, int]] = {}  # store-relative path -> (reason, bytes)
    for n in sorted(doomed, key=lambda n: (n.version, n.name)):
        losing = n.version >= oldest_version and (n.version, n.id) not in committed_ids
        why[store.path(n.name)] = (f"orphan of attempt {n.id}" if losing else "superseded version", files.files[n].size)
    report.orphans = [storage.display(store.path(n.name)) for n in doomed if why[store.path(n.name)][0].startswith("orphan")]
    present = {n.name for n in files.files}
    for side, info in sorted(files.sidecars.items()):
        main = sidecar_main(side)
        owner = parse_state_file(main) if main else None
        if owner is not None and main in deleted_names:
            why[store.path(side)] = (f"sidecar of {main} ({why[store.path(main)][0]})", info.size)
        elif owner is not None and main not in present and owner.version <= latest:
            why[store.path(side)] = (f"orphan sidecar (no {main})", info.size)
    paths = list(why)
    # SSTs: referenced by kept snapshots or by any snapshot of an undecided version.
    referenced: set[str] = set()
    for snap in kept_snapshots | {CheckpointRef(n.version, n.id) for n in files.files if n.kind == SNAPSHOT and n.version > latest}:
        try:
            referenced.update(f.dfs for f in files.snapshot_metadata(snap).sst_files)
        except StatebedError as e:
            if snap.version <= latest:
                raise
            log.info("skipping unreadable in-flight snapshot", extra=kv(store=str(store), snapshot=str(snap), error=str(e)))
    now = time.time() if now is None else now
    sst_paths = []
    for name, info in sorted(files.sst_listing().items()):
        if name not in referenced and now - info.mtime > sst_orphan_grace_s:
            path = f"{store.dir}/{SST_DIR}/{name}"
            sst_paths.append(path)
            why[path] = ("unreferenced SST", info.size)
    report.deleted = [storage.display(p) for p in paths]
    report.ssts_deleted = [storage.display(p) for p in sst_paths]
    report.reasons = {storage.display(p): r for p, (r, _) in why.items()}
    report.sizes = {storage.display(p): size for p, (_, size) in why.items()}
    listed = [*files.files.values(), *files.sidecars.values(), *files.sst_listing().values()]
    report.files_kept = len(listed) - len(why)
    report.bytes_kept = sum(i.size for i in listed) - report.bytes_deleted
    if not dry_run:
        _delete(storage, paths + sst_paths, delete_batch)
    if paths or sst_paths:
        log.info(
            "cleanup",
            extra=kv(
                store=str(store),
                retained=len(retained),
                deleted=len(paths),
                orphans=len(report.orphans),
                ssts=len(sst_paths),
                dry_run=dry_run,
            ),
        )
    return report


def _delete(storage: Storage, paths: list[str], batch: int) -> None:
    """Delete in batches of `batch` (state files first, SSTs last: the order `paths` has)."""
    for i in range(0, len(paths), batch):
        if i and failpoints.hit("cleanup.delete.between"):
            return
        storage.delete(paths[i : i + batch])


def _check_base(files: StoreFiles, snap: CheckpointRef, *, contents: bool) -> None:
    """What a load checks in a snapshot, as cheaply as cleanup can: the (cached) metadata, every
    file it names listed with its size, and with `contents` each recorded CRC32C. An SST's
    contents are checked once per header cache: SST names are never reused."""
    for f, sub, path in check_listed(files, snap, files.snapshot_metadata(snap)):
        if not contents or f.crc32c is None:
            continue
        key = ("contents, CRC32C checked", files.storage.display(path))
        if files.cache is None or files.cache.get(key) is None:
            files.read_immutable(f, sub)
            if files.cache is not None:
                files.cache.put(key, True)
