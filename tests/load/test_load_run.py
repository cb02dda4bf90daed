"""Real load runs: ingest service + continuous Spark job + Locust, stopped by PID, then judged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from process_helpers import assert_no_process_left

from statebed_chaos.experiment import parse_experiment
from statebed_load.load_run import LoadOptions, LoadResult, run_load

pytestmark = pytest.mark.slow

SUMMARY_KEYS = {
    "run_dir", "valid", "acknowledged", "committed", "lost_acknowledged", "duplicated",
    "requests", "failures", "ingest_to_commit_ms", "events_per_s",
}  # fmt: skip


def assert_judged_valid(r: LoadResult, out: Path) -> None:
    assert (r.valid, r.lost_acknowledged, r.duplicated, r.exit_code) == (True, 0, 0, 0), r.reasons
    assert r.acknowledged > 0 and r.committed >= r.acknowledged
    summary = json.loads((out / "load" / "summary.json").read_text())
    assert set(summary) == SUMMARY_KEYS and set(summary["ingest_to_commit_ms"]) == {"p50", "p95", "p99"}
    assert summary["ingest_to_commit_ms"]["p99"] >= summary["ingest_to_commit_ms"]["p50"] > 0
    rows = [json.loads(line) for line in (out / "load" / "series.jsonl").read_text().splitlines()]
    assert rows[-1]["acknowledged"] == r.acknowledged and rows[-1]["committed"] == r.acknowledged
    assert any(row["ingest_to_commit_ms"]["p99"] is not None for row in rows)
    assert any(row["requests_per_s"] > 0 for row in rows)
    assert (out / "load" / "locust_stats_history.csv").exists() and (out / "load" / "locust.html").exists()


def test_load_run_with_a_fault_in_the_middle_loses_nothing(tmp_path: Path) -> None:
    exp = parse_experiment(
        {
            "name": "load-slow-attempt",
            "partitions": 2,
            "snapshot_interval": 2,
            "faults": [{"kind": "slow-attempt", "at": {"batch": 1}, "params": {"partition": 0, "ms": 3000}}],
        }
    )
    out = tmp_path / "run"
    r = run_load(LoadOptions(users=3, spawn_rate=3, duration_s=12, seed=5, experiment=exp, trigger_ms=500), out)
    assert_judged_valid(r, out)
    assert r.failures == 0 and r.requests > 0
    faults = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert any(op["type"] == "fault" and op["phase"] == "inject" and op["outcome"] == "ok" for op in faults)
    assert [f["fired"] for f in r.checks["faults"]] == [True]
    assert_no_process_left(out, at_least=3)  # ingest service, job driver (+ its JVM), Locust


def test_sigkilled_ingest_service_loses_no_acknowledged_record(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_load(LoadOptions(users=3, spawn_rate=3, duration_s=12, seed=6, kill_ingest_at_s=4), out)
    assert_judged_valid(r, out)  # every record the killed service acknowledged is committed exactly once
    assert r.failures > 0  # clients saw errors while it was down, not acks
    client_acked = [json.loads(line) for line in (out / "load" / "client-acks.jsonl").read_text().splitlines() if line.strip()]
    assert sum(len(a["ids"]) for a in client_acked) <= r.acknowledged  # every 200 is in the ack log (no false ack)
    assert (out / "logs" / "ingest-restarted.err").exists()
    assert_no_process_left(out, at_least=3)  # ingest service, job driver (+ its JVM), Locust


@pytest.mark.e2e
def test_load_run_on_s3_through_the_proxy_with_storage_latency(tmp_path: Path) -> None:
    """The checkpoint on S3 (real MinIO behind the Toxiproxy-API proxy), a latency toxic in
    the middle: the verdict is read from S3 while it still runs, the fault provably fired."""
    exp = parse_experiment(
        {
            "name": "load-s3-latency",
            "storage": "s3",
            "partitions": 2,
            "faults": [{"kind": "storage-latency", "at": {"batch": 1}, "for_s": 5, "params": {"latency": 200}}],
        }
    )
    out = tmp_path / "run"
    r = run_load(LoadOptions(users=3, spawn_rate=3, duration_s=12, seed=8, experiment=exp, trigger_ms=500), out)
    assert_judged_valid(r, out)
    assert [f["fired"] for f in r.checks["faults"]] == [True], r.checks["faults"]
    assert_no_process_left(out, at_least=3)  # ingest service, job driver (+ its JVM), Locust
