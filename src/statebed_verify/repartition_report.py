"""`statebed verify repartition`: the verdict on each offline repartition a checkpoint records.

Spark 4.2+'s offline repartition (`StreamingCheckpointManager.repartition`) rewrites a stopped
query's state at version N as version N + 1 under a new partition count, as a batch of its own.
The lineage judge already checks everything such a batch must satisfy, each check at the version
it wrote:
- `misplaced-key`: every key of the new state is in the partition Spark's partitioner assigns it
  under the new count;
- `cross-partition-key`: no key is in two partitions;
- `repartition-mismatch`: the multiset of (key, value) rows of each store is the same before and
  after;
- the lineage kinds: the new batch's commit entry names one loadable checkpoint per new partition.

This view runs that judge once, then reports each repartition with the anomalies of its operator
at its version. Anomalies elsewhere in the checkpoint are only counted in a note: `verify lineage`
reports them. A checkpoint that records no repartition is `unknown`: there is nothing to judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from statebed_store.inspection import commit_records, discover_stores
from statebed_store.storage.base import Storage

from .lineage import verify_lineage
from .repartition_check import Repartition, repartitions
from .result import Anomaly, Verdict, merge_verdicts

__all__ = ["PLACEMENT_KINDS", "RepartitionReport", "verify_repartition"]

PLACEMENT_KINDS = ("misplaced-key", "cross-partition-key")  # where keys are
ROW_KINDS = ("repartition-mismatch",)  # which rows there are


@dataclass
class RepartitionReport:
    valid: Verdict
    checkpoint: str
    repartitions: list[tuple[Repartition, list[Anomaly]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    v1_batches: set[int] = field(default_factory=set)  # repartitions a V1 entry committed: no lineage to check
    anomalies: list[Anomaly] = field(init=False)  # every repartition's, in order

    def __post_init__(self) -> None:
        self.anomalies = [a for _, found in self.repartitions for a in found]

    def checks(self, rp: Repartition, found: list[Anomaly]) -> dict[str, Verdict]:
        """Each check's verdict on one repartition; a V1 entry records no ids, so its lineage is
        `unknown` unless an anomaly says otherwise."""
        kinds = {a.kind for a in found}
        lineage: Verdict = not kinds - set(PLACEMENT_KINDS) - set(ROW_KINDS)
        return {
            "placement": not kinds & set(PLACEMENT_KINDS),
            "rows": not kinds & set(ROW_KINDS),
            "lineage": "unknown" if lineage is True and rp.batch in self.v1_batches else lineage,
        }

    def verdict(self, rp: Repartition, found: list[Anomaly]) -> Verdict:
        return merge_verdicts(list(self.checks(rp, found).values()))

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "checkpoint": self.checkpoint,
            "repartitions": [
                {
                    "operator": rp.operator,
                    "batch": rp.batch,
                    "version": rp.version,
                    "partitions": {"before": rp.before, "after": rp.after},
                    "valid": self.verdict(rp, found),
                    "checks": self.checks(rp, found),
                    "anomalies": [a.to_json() for a in found],
                }
                for rp, found in self.repartitions
            ],
            "anomalies": [a.to_json() for a in self.anomalies],
            "notes": self.notes,
        }


def _of(rp: Repartition, a: Anomaly) -> bool:
    """An anomaly of the batch `rp` wrote: its operator at its version (or naming its batch)."""
    if a.operator not in (None, rp.operator):
        return False
    return a.version == rp.version or (a.version is None and rp.batch in a.batches)


def verify_repartition(storage: Storage) -> RepartitionReport:
    """Judge every repartition of the checkpoint (UsageError when it is no streaming checkpoint)."""
    lineage = verify_lineage(storage)
    commits = commit_records(storage)
    found = repartitions(commits, {s.operator for s in discover_stores(storage, [])})
    if not found:
        note = "the commit log records no batch that changes an operator's partition count: no repartition to judge"
        return RepartitionReport("unknown", storage.url, notes=[note, *lineage.notes])
    judged = [(rp, [a for a in lineage.anomalies if _of(rp, a)]) for rp in found]
    notes = list(lineage.notes)
    mine = {id(a) for _, anomalies in judged for a in anomalies}
    elsewhere = [a for a in lineage.anomalies if id(a) not in mine]
    if elsewhere:
        kinds = ", ".join(sorted({a.kind for a in elsewhere}))
        notes.append(f"{len(elsewhere)} anomaly(ies) outside the repartitions ({kinds}): see `statebed verify lineage`")
    verdicts: list[Verdict] = [not anomalies for _, anomalies in judged]
    if lineage.valid == "unknown" and not any(anomalies for _, anomalies in judged):
        verdicts.append("unknown")  # the judge could not decide somewhere: the repartitions may be among it
    v1 = {rp.batch for rp in found if commits[rp.batch].state_ids is None}
    return RepartitionReport(merge_verdicts(verdicts), storage.url, judged, notes, v1)
