"""Spark 4.3's offline repartition on every stateful operator, judged (issue 40): the e2e sweep of
`repartition_operators.py`. Every checkpoint format 2 query is repartitioned 2 -> 3 and statebed's
`verify repartition` finds it valid. Spark repartitions checkpoint format 1 too (with the session's
format conf set as the query ran; else it refuses, STATE_REWRITER_INVALID_CHECKPOINT): a V1 commit
log records no partition count, so statebed finds the repartition in the offset log and checks its
placement and rows, but its lineage cannot be checked: `unknown` with no anomaly, never valid.
Results: docs/results.md."""

from __future__ import annotations

from pathlib import Path

import pytest
import repartition_operators as ro
import spark_checkpoints as sc


@pytest.mark.slow
@pytest.mark.e2e
def test_spark_repartitions_every_format_2_operator_and_statebed_judges_each(tmp_path: Path) -> None:
    spark = sc.session(tmp_path / "_scratch")
    try:
        rows = ro.repartition_each(spark, sc.generate(spark, tmp_path), 3)
    finally:
        spark.stop()
    assert len(rows) == len(sc._queries())
    for row in rows:
        if row["checkpoint_format"] == 2:
            assert (row["spark"], row["statebed"], row["anomalies"]) == ("repartitioned", True, []), row
            assert len(row["repartitions"]) >= 1, row
        else:
            assert (row["spark"], row["statebed"], row["anomalies"]) == ("repartitioned", "unknown", []), row
            assert len(row["repartitions"]) == 1, row
