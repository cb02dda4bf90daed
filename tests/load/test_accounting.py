"""Latency percentiles, the per-second series, and the continuous-run options."""

from __future__ import annotations

import pytest

from statebed_base.errors import UsageError
from statebed_job.config import JobOptions
from statebed_load.accounting import Accounting, percentiles
from statebed_load.schema import Rejected, parse_events
from statebed_load.series import series_rows


def test_percentiles_are_weighted_by_records() -> None:
    assert percentiles([(10.0, 98), (500.0, 1), (900.0, 1)]) == {"p50": 10.0, "p95": 10.0, "p99": 500.0}
    assert percentiles([]) == {"p50": None, "p95": None, "p99": None}


def test_series_has_a_row_per_second_with_cumulative_counts() -> None:
    acc = Accounting(acknowledged=30, latencies=[(102.5, 100.2, 10), (104.1, 101.0, 20)], ack_times=[(100.2, 10), (101.0, 20)])
    rows = series_rows(acc, {100: (4.0, 0.0), 101: (5.0, 1.0)})
    assert [r["t"] for r in rows] == [100, 101, 102, 103, 104]
    assert [(r["acknowledged"], r["committed"]) for r in rows] == [(10, 0), (30, 0), (30, 10), (30, 10), (30, 30)]
    assert rows[2]["ingest_to_commit_ms"]["p99"] == pytest.approx(2300.0)
    assert rows[3]["ingest_to_commit_ms"]["p50"] is None and rows[1]["failures_per_s"] == 1.0


def test_a_batch_of_events_becomes_a_table_and_a_wrong_one_names_the_field() -> None:
    t = parse_events(b'{"events": [{"key": 1, "value": 2}, {"value": 4, "key": 3}]}', batch=True, max_batch=10)
    assert (t["key"].to_pylist(), t["value"].to_pylist()) == ([1, 3], [2, 4])
    with pytest.raises(Rejected, match=r"events\[0\].value: expected an integer, got NoneType") as e:
        parse_events(b'{"events": [{"key": 1, "value": null}]}', batch=True, max_batch=10)
    assert e.value.status == 422


def test_a_stop_condition_needs_the_ingest_source() -> None:
    with pytest.raises(UsageError, match="^source must be ingest for a stop condition"):
        JobOptions(duration_s=5.0)
    with pytest.raises(UsageError, match="^until_records must be"):
        JobOptions(source="ingest", landing="/x", until_records=0)
    assert JobOptions(source="ingest", landing="/x", stop_file="/x/stop").continuous
    assert not JobOptions(source="ingest", landing="/x").continuous
