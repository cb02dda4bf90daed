"""A finding proves a fault only if the fault-free baseline was valid on its own (issue 24 #18).

V1 under speculation alone can write two attempts' files for one version: its baseline is then
invalid with no fault scheduled, and the same anomalies in the faulted run are not the fault's."""

from __future__ import annotations

from pathlib import Path

import pytest

from statebed_chaos.baseline import Baseline
from statebed_chaos.judge import ExperimentResult, _compare
from statebed_model.rundir import RunDir


def result() -> ExperimentResult:
    return ExperimentResult("x", 1, "unknown", [], [], 1, 1, None, "r", 0.0, 3, "")


@pytest.mark.parametrize(
    ("verdicts", "itself"), [({"state": {"valid": False}, "lineage": {"valid": "unknown"}}, ["state"]), ({"state": {"valid": True}}, [])]
)
def test_a_baseline_invalid_on_its_own_is_recorded_and_said(
    tmp_path: Path, verdicts: dict[str, dict[str, object]], itself: list[str]
) -> None:
    res = result()
    assert _compare(RunDir(tmp_path), Baseline(str(tmp_path), None, verdicts, error="unreadable"), res) == "unknown"
    assert res.checks["baseline"]["itself_invalid"] == itself and res.baseline_itself_invalid is bool(itself)
    said = [r for r in res.reasons if "baseline is itself invalid" in r]
    assert said == (["the fault-free baseline is itself invalid (state): not every anomaly is the faults' doing"] if itself else [])


def test_a_result_without_a_baseline_check_is_not_itself_invalid() -> None:
    assert result().baseline_itself_invalid is False
