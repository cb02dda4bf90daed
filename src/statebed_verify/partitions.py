"""The partition invariant in the lineage verifier: every key of partition p's files belongs to p.

Checked on every committed file the lineage check reads (each checked version's changelog,
or its snapshot when it has no changelog) and on the snapshot each checked load plan starts
from, under the partitioner the checkpoint records (`statebed_store.partitioner`). Files that
cannot be read are left to the checks that report them.
"""

from __future__ import annotations

from collections.abc import Mapping

from statebed_base.errors import StatebedError
from statebed_store import CheckpointRef, StoreFiles, StoreId
from statebed_store.naming import CHANGELOG, DEFAULT_STORE, SNAPSHOT
from statebed_store.partition_check import check_file
from statebed_store.partitioner import Partitioning
from statebed_store.plan import loadable_plan

from .result import Anomaly

__all__ = ["KIND", "partition_anomalies"]

KIND = "misplaced-key"


def _kind(files: StoreFiles, ref: CheckpointRef) -> str | None:
    return CHANGELOG if files.has_changelog(ref) else SNAPSHOT if files.has_snapshot(ref) else None


def _plan_snapshot(files: StoreFiles, ref: CheckpointRef) -> CheckpointRef | None:
    try:
        return loadable_plan(files, ref)[0].snapshot
    except StatebedError:
        return None  # reported as unplannable by the lineage check


def partition_anomalies(
    parts: Partitioning,
    store: StoreId,
    files: StoreFiles,
    committed: list[CheckpointRef],
    planned: list[CheckpointRef],
    counts: Mapping[int, int] | None = None,
) -> list[Anomaly]:
    """A `misplaced-key` anomaly per file of `store` holding keys of another partition
    (`counts`: version -> partition count of the batch that committed it)."""
    recorded = parts.get(store)
    if recorded is None:
        return []
    counts = counts or {}
    snapshots = [s for s in (_plan_snapshot(files, r) for r in planned) if s is not None]
    todo = [(r, _kind(files, r)) for r in committed] + [(s, SNAPSHOT) for s in snapshots]
    out, seen = [], set()
    for ref, kind in todo:
        if kind is None or (ref, kind) in seen:
            continue
        seen.add((ref, kind))
        try:
            err = check_file(files, recorded.with_partitions(counts.get(ref.version)), ref, kind)
        except StatebedError:
            continue  # unreadable: the lineage check names it
        if err is not None:
            where = "" if store.store_name == DEFAULT_STORE else f"[store {store.store_name}] "
            out.append(
                Anomaly(
                    KIND,
                    store.operator,
                    store.partition,
                    ref.version,
                    ids=[ref.id],
                    files=[err.file],
                    keys=err.keys,
                    detail=where + err.detail,
                )
            )
    return out
