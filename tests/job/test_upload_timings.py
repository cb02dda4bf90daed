"""Each batch's timing record carries its upload latencies per kind, hedging on or off."""

from __future__ import annotations

from pathlib import Path

import pytest
from job_helpers import InProcessJob

from statebed_base.errors import UsageError
from statebed_job.config import JobOptions
from statebed_store.storage.hedge import shared_state


def test_batch_timings_record_upload_latency_per_kind(tmp_path: Path) -> None:
    opts = JobOptions(workload="count", batches=2, partitions=2, rows_per_batch=100, keyspace=20, hedge="adaptive", snapshot_interval=1)
    job = InProcessJob(tmp_path / "run", opts)
    shared_state().stats.take()  # what earlier tests in this process uploaded
    job.batch(0)
    job.batch(1)  # its tasks also report the snapshots of batch 0 uploaded meanwhile
    first, second = (t["uploads"] for t in job.run.timings())
    assert set(first) >= {"changelog", "commit_log"}
    assert first["changelog"]["n"] == 4 and first["commit_log"]["n"] == 1  # two changelogs and their sidecars; one entry
    for row in (*first.values(), *second.values()):
        assert row["n"] == len(row["ms"]) > 0
        assert 0 <= row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"] <= row["p999_ms"] <= row["max_ms"]
        assert row["hedges_won"] <= row["hedges_sent"]
    assert "snapshot" in second and second["snapshot"]["hedges_sent"] == 0  # snapshots are measured, never hedged by default
    assert all("uploads" not in ph for t in job.run.timings() for ph in t["task_phases"])


def test_job_hedge_option_is_checked_and_reaches_the_store(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="^hedge must be"):
        JobOptions(hedge="sometimes")
    job = InProcessJob(tmp_path / "run", JobOptions(batches=1, partitions=1, rows_per_batch=10, keyspace=5, hedge="on"))
    assert job.driver.store_options.hedge == "on" and job.driver.log.storage.options.hedge == "on"  # type: ignore[attr-defined]
