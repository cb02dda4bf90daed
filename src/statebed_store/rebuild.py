"""Rebuildability: which committed batches' state can still be loaded, store by store.

Retention deletes old files and damage can make a version unloadable, yet nothing in
Spark says which batches a query could still be rewound to. A committed batch `b` is
rebuildable for a store when the `(b+1, id)` its commit names has a plan whose every file
is present and passes the checks a load makes (`plan.loadable_plan`: sidecars, records,
SST contents), and whose every key belongs to the store's partition under the partitioner
the checkpoint records (`partitioner`; a note when none is known), over the partition count of
that batch (a store a repartitioned batch does not have is not checked at it). One `StoreFiles` per
store serves all its batches, so each file is read and checked once however many plans
share it. Spark-free and read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statebed_base.errors import CheckpointFileError, StatebedError, UnplannableError

from .commitlog import CommitRecord
from .inspection import commit_records, discover_stores, store_index
from .lineage import CheckpointRef
from .naming import COMMITS_DIR, StoreId
from .partition_check import check_plan_keys
from .partitioner import Partitioner, Partitioning, checkpoint_partitioning
from .plan import loadable_plan
from .storage.base import Storage
from .store_files import StoreFiles

__all__ = ["BatchCheck", "batch_check", "ranges", "rebuildability", "require_rebuildable"]


@dataclass(frozen=True)
class BatchCheck:
    """One store at one committed batch: loadable or not, and why not (naming the file)."""

    store: StoreId
    batch: int
    ref: CheckpointRef
    error: str | None = None
    file: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _why(e: StatebedError) -> tuple[str, str | None]:
    if isinstance(e, CheckpointFileError):
        return str(e), e.file
    if isinstance(e, UnplannableError):
        return str(e), e.missing[0] if e.missing else None
    return str(e), None


def batch_check(files: StoreFiles, store: StoreId, index: int, rec: CommitRecord, partitioner: Partitioner | None = None) -> BatchCheck:
    """Can the state `rec` committed for `store` be loaded? (A V1 commit is planned by version.)
    With `partitioner`, every key of the plan's files must belong to the store's partition too."""
    cid = rec.id_for(store.operator, store.partition, index)
    ref = CheckpointRef(rec.version, cid)
    if cid is None and rec.state_ids is not None:
        return BatchCheck(store, rec.batch_id, ref, f"the commit of batch {rec.batch_id} names no checkpoint id for {store}")
    try:
        plan, _ = loadable_plan(files, ref)
        if partitioner is not None:
            check_plan_keys(files, plan, partitioner)
    except StatebedError as e:
        return BatchCheck(store, rec.batch_id, ref, *_why(e))
    return BatchCheck(store, rec.batch_id, ref)


def _store_checks(
    storage: Storage, stores: list[StoreId], commits: dict[int, CommitRecord], parts: Partitioning
) -> dict[StoreId, list[BatchCheck]]:
    """Each store's check at each committed batch it took part in (a repartition changes which
    partitions a batch has, and the count its keys are routed over)."""
    out = {}
    for store in stores:
        siblings = [s.store_name for s in stores if (s.operator, s.partition) == (store.operator, store.partition)]
        files, idx, recorded = StoreFiles(storage, store), store_index(store, siblings), parts.get(store)
        out[store] = [
            batch_check(files, store, idx, rec, None if recorded is None else recorded.with_partitions(n))
            for rec in (commits[b] for b in sorted(commits))
            if (n := rec.partition_count(store.operator)) is None or store.partition < n
        ]
    return out


def ranges(batches: list[int]) -> list[list[int]]:
    """Sorted batch ids as `[[first, last], ...]` runs of consecutive ids."""
    out: list[list[int]] = []
    for b in sorted(batches):
        if out and out[-1][1] == b - 1:
            out[-1][1] = b
        else:
            out.append([b, b])
    return out


def _first_unrebuildable(checks: list[BatchCheck]) -> dict[str, Any] | None:
    """The newest committed batch that cannot be loaded: the floor of any rewind (None: all load)."""
    bad = [c for c in checks if not c.ok]
    if not bad:
        return None
    c = max(bad, key=lambda c: c.batch)
    return {"batch": c.batch, "version": c.ref.version, "id": c.ref.id, "reason": c.error, "file": c.file}


def rebuildability(storage: Storage) -> dict[str, Any]:
    """The `statebed ls --rebuildable` document: per store and for the whole checkpoint."""
    commits = commit_records(storage)
    notes: list[str] = []
    stores, parts = discover_stores(storage, notes), checkpoint_partitioning(storage)
    checks = _store_checks(storage, stores, commits, parts)
    notes += parts.unchecked_notes(stores)
    everywhere = [b for b in sorted(commits) if all(c.ok for cs in checks.values() for c in cs if c.batch == b)]
    return {
        "checkpoint": storage.url,
        "committed": ranges(list(commits)),
        "latestBatch": max(commits) if commits else None,
        "rebuildable": ranges(everywhere),
        "stores": [
            {
                "operator": s.operator,
                "partition": s.partition,
                "store": s.store_name,
                "rebuildable": ranges([c.batch for c in cs if c.ok]),
                "firstUnrebuildable": _first_unrebuildable(cs),
            }
            for s, cs in checks.items()
        ],
        "notes": notes,
    }


def require_rebuildable(storage: Storage, batch: int) -> list[BatchCheck]:
    """Every store's check at committed `batch`; UnplannableError naming the first missing or
    corrupt file when any store cannot load it (what a rewind to `batch` must refuse)."""
    commits = commit_records(storage)
    if batch not in commits:
        raise UnplannableError(f"batch {batch}", f"it is not committed in {storage.display(COMMITS_DIR)}")
    stores = discover_stores(storage)
    checks = [c for cs in _store_checks(storage, stores, {batch: commits[batch]}, checkpoint_partitioning(storage)).values() for c in cs]
    for c in checks:
        if not c.ok:
            raise UnplannableError(f"batch {batch} of {c.store}", f"{c.error}", missing=[c.file] if c.file else [])
    return checks
