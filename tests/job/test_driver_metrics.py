"""The driver's /metrics, served by the real prometheus_client HTTP server: batches, upload
latency and hedges per kind, and the faults a controller marked active in the control file."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from statebed_job.driver import BatchOutcome
from statebed_job.driver_metrics import DriverMetrics
from statebed_store.failpoint_control import Control


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[DriverMetrics, Control]]:
    control = Control(tmp_path / "failpoints" / "control.json")
    metrics = DriverMetrics(0, control.path)
    try:
        yield metrics, control
    finally:
        metrics.close()


def scrape(metrics: DriverMetrics) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics.server.server_port}/metrics", timeout=30) as r:
        assert r.status == 200
        return [line for line in r.read().decode().splitlines() if not line.startswith("#")]


def test_uploads_and_hedges_per_kind(served: tuple[DriverMetrics, Control]) -> None:
    metrics, _ = served
    uploads = {
        "changelog": {"n": 2, "ms": [12.0, 40.0], "hedges_sent": 1, "hedges_won": 1},
        "commit-log": {"n": 1, "ms": [700.0], "hedges_sent": 0, "hedges_won": 0},
    }
    metrics(BatchOutcome(3, "committed", records=10, seconds=1.5, uploads=uploads))
    lines = scrape(metrics)
    assert 'statebed_upload_seconds_count{kind="changelog"} 2.0' in lines
    assert 'statebed_upload_seconds_bucket{kind="changelog",le="0.025"} 1.0' in lines
    assert 'statebed_upload_seconds_bucket{kind="commit-log",le="0.5"} 0.0' in lines
    assert 'statebed_upload_seconds_bucket{kind="commit-log",le="1.0"} 1.0' in lines
    assert 'statebed_upload_hedges_sent_total{kind="changelog"} 1.0' in lines
    assert 'statebed_upload_hedges_won_total{kind="changelog"} 1.0' in lines
    assert "statebed_job_committed_records_total 10.0" in lines


def test_faults_active_follow_the_control_file(served: tuple[DriverMetrics, Control]) -> None:
    metrics, control = served
    assert not [line for line in scrape(metrics) if line.startswith("statebed_faults_active")]  # no file yet
    control.mark_active("f1", "pause-executor", True)
    control.mark_active("f2", "storage-latency", True)
    control.mark_active("f3", "storage-latency", True)
    lines = scrape(metrics)
    assert 'statebed_faults_active{kind="pause-executor"} 1.0' in lines
    assert 'statebed_faults_active{kind="storage-latency"} 2.0' in lines
    control.mark_active("f1", "pause-executor", False)
    control.mark_active("f2", "storage-latency", False)
    lines = scrape(metrics)
    assert [line for line in lines if line.startswith("statebed_faults_active")] == ['statebed_faults_active{kind="storage-latency"} 1.0']


def test_an_unreadable_control_file_drops_the_series_not_the_scrape(served: tuple[DriverMetrics, Control]) -> None:
    metrics, control = served
    control.path.parent.mkdir(parents=True)
    control.path.write_text("{half")
    lines = scrape(metrics)
    assert not [line for line in lines if line.startswith("statebed_faults_active")]
    assert "statebed_job_committed_records_total 0.0" in lines  # the other series are still served
