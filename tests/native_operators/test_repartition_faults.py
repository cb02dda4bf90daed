"""A fault during Spark 4.3's offline repartition (issue 40; `repartition_faults.py`): its driver
killed once the repartition's offset log entry is written. The half-finished checkpoint's lineage
stays valid (the batch is planned, not committed); Spark refuses to restart the query on it
(`STREAMING_UNFINISHED_REPARTITION_DETECTED`); a second repartition finishes the job, and
`verify repartition` finds it valid. Results: docs/results.md."""

from __future__ import annotations

from pathlib import Path

import pytest
import repartition_faults as rf
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
