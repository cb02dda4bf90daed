"""Attempts against the commit log: exactly one task attempt per (batch, partition) matches the
committed checkpoint id, and every orphan file (a file of an id the commit log never chose) is
attributed to the attempt that wrote it.

statebed runs: from the attempt records (`statebed_model.attempts`), which name the id each
attempt writes as soon as it has loaded, so even an attempt killed after its upload owns its
files. An orphan no record names is `unattributed-file` (something wrote into the checkpoint
that no attempt claims). A committed id no record names leaves the check `unknown` (the record
may be lost with a killed process; it cannot be checked). V1 has no ids: nothing to attribute.
Native runs have no records: their orphans are listed as unattributed notes, not anomalies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from statebed_model.attempts import AttemptRecord, read_attempts
from statebed_model.rundir import RunDir
from statebed_store import CommitLog, open_storage
from statebed_store.formats import V1

from .result import Anomaly, Verdict, merge_verdicts

__all__ = ["AttemptsReport", "check_attempts"]

OPERATOR = 0


@dataclass
class AttemptsReport:
    valid: Verdict
    anomalies: list[Anomaly] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "checked": self.checked, "anomalies": [a.to_json() for a in self.anomalies], "notes": self.notes}


def check_attempts(run: RunDir, orphans: list[dict[str, Any]]) -> AttemptsReport:
    """`orphans`: the lineage verifier's orphan list (partition, version, id, files)."""
    info = run.read_info()
    if info.format.native:
        notes = [f"native run: orphan {o['id']} (partition {o['partition']}, version {o['version']}) not attributed" for o in orphans]
        return AttemptsReport(True, notes=notes, checked={"orphans": len(orphans)})
    if info.format == V1:
        return AttemptsReport(True, notes=["v1 run: files carry no ids, nothing to attribute"])
    records = read_attempts(run.root)
    by_id: dict[str, list[AttemptRecord]] = {}
    for r in records:
        if r.checkpoint_id is not None:
            by_id.setdefault(r.checkpoint_id, []).append(r)
    report = AttemptsReport(True, checked={"attempts": len(records), "orphans": len(orphans)})
    verdicts: list[Verdict] = [True]
    verdicts.append(_committed(run, info.partitions, by_id, report))
    for o in orphans:
        owners = by_id.get(str(o["id"]), [])
        if not owners:
            report.anomalies.append(
                Anomaly(
                    "unattributed-file",
                    operator=o.get("operator"),
                    partition=o.get("partition"),
                    version=o.get("version"),
                    ids=[o["id"]],
                    files=list(o.get("files", [])),
                    detail=f"no task attempt record names checkpoint id {o['id']} (version {o['version']}, partition {o['partition']})",
                )
            )
    if report.anomalies:
        verdicts.append(False)
    report.valid = merge_verdicts(verdicts)
    return report


def _committed(run: RunDir, partitions: int, by_id: dict[str, list[AttemptRecord]], report: AttemptsReport) -> Verdict:
    info = run.read_info()
    log = CommitLog(open_storage(run.checkpoint(info)))
    verdict: Verdict = True
    batches = log.batch_ids()
    report.checked["committed"] = len(batches) * partitions
    if (below := run.trimmed_below()) and (not batches or batches[0] > 0):
        report.notes.append(f"batches below {below}: commit-log entries trimmed by the run's maintenance, their committed ids not checked")
    for b in batches:
        rec = log.read(b)
        if rec is None:
            continue
        for p in range(partitions):
            cid = rec.id_for(OPERATOR, p)
            owners = by_id.get(cid or "", [])
            wrong = [r for r in owners if (r.batch, r.partition) != (b, p)]
            if len(owners) > 1 or wrong:
                report.anomalies.append(
                    Anomaly(
                        "commit-attempt-mismatch",
                        partition=p,
                        version=rec.version,
                        ids=[cid],
                        batches=[b],
                        detail=f"batch {b} partition {p} committed id {cid}, claimed by "
                        + ", ".join(
                            f"batch {r.batch} partition {r.partition} attempt {r.attempt} (task {r.task_attempt_id})" for r in owners
                        ),
                    )
                )
            elif not owners:
                report.notes.append(f"batch {b} partition {p}: no attempt record names the committed id {cid}")
                verdict = "unknown"
    return verdict
