"""Which attempts the lineage graph names as a V1 file's writers: the ones whose store commit
returned, and a zombie Spark killed after its write, known only from its firing record."""

from __future__ import annotations

from typing import Any

from statebed_model.attempts import AttemptRecord
from statebed_report.lineage_graph import partition_nodes, uploaded_by


def _store() -> dict[str, Any]:
    file = {"id": None, "committed": True, "changelog": True, "snapshot": False, "lineage": []}
    return {"partition": 0, "versions": [{"version": 1, "ids": [file]}, {"version": 2, "ids": [dict(file)]}]}


def _attempt(batch: int, attempt: int, outcome: str) -> AttemptRecord:
    return AttemptRecord(batch, 0, attempt, 1, 10 * batch + attempt, "h", 1, 100.0 + attempt, 101.0, batch + 1, None, None, outcome)


ATTEMPTS = [_attempt(0, 0, "ok"), _attempt(1, 0, "ok"), _attempt(1, 1, "info")]  # batch 1's copy was killed
ANOMALY = [{"check": "state", "kind": "output-mismatch", "batches": [1]}]
ZOMBIE_WROTE = {"failpoint": "changelog.upload.after", "action": "delay", "task": {"batch": 1, "partition": 0, "attempt": 1}}


def test_a_killed_attempt_past_its_upload_overwrote_the_v1_file_and_carries_the_anomaly() -> None:
    nodes = partition_nodes(_store(), ATTEMPTS, [], ANOMALY, uploaded_by([ZOMBIE_WROTE]))
    v2 = next(n for n in nodes if n.version == 2)
    assert v2.status == "overwritten" and len(v2.writers) == 2
    assert v2.anomalies == ["state output-mismatch"]


def test_without_a_firing_record_a_killed_attempt_wrote_nothing() -> None:
    other = [
        {**ZOMBIE_WROTE, "failpoint": "changelog.upload.before"},  # held before its write
        {**ZOMBIE_WROTE, "task": None},  # a driver-side firing
        {**ZOMBIE_WROTE, "task": {"batch": "1", "partition": 0, "attempt": 1}},  # not a task
    ]
    assert uploaded_by(other) == frozenset()
    nodes = partition_nodes(_store(), ATTEMPTS, [], ANOMALY, uploaded_by(other))
    assert all(n.status == "committed" and len(n.writers) == 1 for n in nodes)
