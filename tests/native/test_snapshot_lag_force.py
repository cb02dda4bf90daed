"""Spark's forced snapshot upload on lag (SPARK-54063; `snapshot-lag-force`), on and off, on real Spark
4.3 (issue 40): one snapshot upload held 45 s inside Spark's maintenance makes the store's uploads
lag. With the feature on, Spark's coordinator makes the store snapshot on its next commits, and
Spark's own `rocksdbForceSnapshotCount` counts them; off (the control), it counts none. Either way
the run is valid: a late snapshot is no damage in V2."""

from __future__ import annotations

from pathlib import Path

import pytest
from damage_runs import run_example

from statebed_model.eventlog import read_event_log

FORCED = "rocksdbForceSnapshotCount"


def _forced(res: object) -> int:
    log = read_event_log(Path(res.run_dir) / "faulted" / "events")  # type: ignore[attr-defined]
    assert log.progress, "the run's event log holds no query progress"
    return sum(int(p.metrics.get(FORCED, 0)) for p in log.progress)


@pytest.mark.slow
def test_with_the_feature_on_spark_forces_snapshots_on_a_lagging_store_and_off_it_does_not(tmp_path: Path) -> None:
    on = run_example(tmp_path, "snapshot-lag-force-on-count-native-v2")
    off = run_example(tmp_path, "snapshot-lag-force-off-count-native-v2")
    for res in (on, off):
        assert res.valid is True, (res.reasons, res.anomalies)
        assert res.faults[0]["fired"] is True, res.faults[0]["detail"]
    assert _forced(on) >= 1
    assert _forced(off) == 0
