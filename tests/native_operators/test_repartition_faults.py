"""Faults during Spark 4.3's offline repartition (issue 40). `repartition_faults.py`: its driver
killed once the repartition's offset log entry is written. The half-finished checkpoint's lineage
stays valid (the batch is planned, not committed); Spark refuses to restart the query on it
(`STREAMING_UNFINISHED_REPARTITION_DETECTED`); a second repartition finishes the job, and
`verify repartition` finds it valid. `repartition_zombie.py`: a zombie zip of a repartition task.
Results: docs/results.md."""

from __future__ import annotations

from pathlib import Path

import pytest
import repartition_faults as rf
import repartition_zombie as rz
import spark_checkpoints as sc


@pytest.mark.slow
@pytest.mark.e2e
def test_a_repartition_killed_mid_way_is_refused_on_restart_and_finished_by_a_second_one(tmp_path: Path) -> None:
    spark = sc.session(tmp_path / "_scratch")
    try:
        (row,) = rf.run(spark, tmp_path, sc.generate(spark, tmp_path, {"dedup"}), 3)
    finally:
        spark.stop()
    kill = row["kill"]
    assert kill["killed"] and kill["planned"] == [6] and kill["committed"] == [], kill  # the fault fired mid-way
    assert row["half_finished"]["lineage"] is True and row["half_finished"]["anomalies"] == [], row
    assert "STREAMING_UNFINISHED_REPARTITION_DETECTED" in row["restart"], row["restart"]
    assert row["second_repartition"] == "done", row
    assert row["final"] == {"valid": True, "repartitions": [6], "anomalies": []}, row


@pytest.mark.slow
@pytest.mark.e2e
def test_a_zombie_zip_of_the_repartition_lands_after_its_commit_and_both_formats_hold(tmp_path: Path) -> None:
    """`repartition_zombie.py`: the close of new partition 0's zip fails to its task and lands once
    the repartition committed. V2: an orphan beside the committed zip, valid; V1: over the retry's
    zip (other bytes, the same rows), unknown with no anomaly; the query restarts on both."""
    spark = sc.session(tmp_path / "_scratch")
    try:
        rows = {r["name"]: r for r in rz.run(spark, tmp_path, sc.generate(spark, tmp_path, {"dedup", "dedup_v1"}), 3)}
    finally:
        spark.stop()
    for name, row in rows.items():
        z = row["zombie"]
        assert z["held"] and z["committed_before_release"] and z["landed"] == ["zombie-landed"] and z["exit"] == 0, (name, z)
        assert row["restart"] == "ran" and row["repartition"]["anomalies"] == [] and row["lineage"]["anomalies"] == [], (name, row)
    v2, v1 = rows["dedup"], rows["dedup_v1"]
    (committed,) = v2["zombie"]["zips_before"]
    assert set(v2["zombie"]["zips_after"]) > {committed} and len(v2["zombie"]["zips_after"]) == 2  # the zombie beside it
    assert v2["repartition"]["statebed"] is True and v2["lineage"] == {"valid": True, "anomalies": [], "orphans": 1}
    assert list(v1["zombie"]["zips_before"]) == list(v1["zombie"]["zips_after"]) == ["7.zip"]
    assert v1["zombie"]["zips_before"] != v1["zombie"]["zips_after"]  # the zombie's bytes replaced the retry's
    assert v1["repartition"]["statebed"] == "unknown" and v1["lineage"]["valid"] == "unknown"
