"""pause-executor on Spark's own store (issue 28): native runs write no attempt records, so the
pause is aimed at the executor JVM a plug-in delay holds (slow-attempt's native delay at the
changelog close of batch 2 partition 0, the matrix's pairing), once the other partition's
state of the batch is written. On real Spark 4.3 (slow, standalone): the matrix's own cell
fires, with a speculative copy of the held task launched during the pause, and stays valid."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from statebed_chaos.experiment_runner import run_experiment
from statebed_chaos.matrix_presets import PRESETS, plan_cells


@pytest.mark.e2e
@pytest.mark.slow
def test_the_matrix_pause_cell_on_native_v2_fires_and_stays_valid(tmp_path: Path) -> None:
    (cell,) = plan_cells(PRESETS["full"], 1, faults=["pause-executor"], workloads=["sample3"], formats=["native-v2"])[0]
    exp = replace(cell.experiment, batches=4, verifiers=tuple(v for v in cell.experiment.verifiers if v != "baseline"))
    res = run_experiment(exp, out_dir=tmp_path / "cell", progress=False)
    pause, hold = res.faults
    assert hold["kind"] == "slow-attempt" and hold["fired"] is True, hold
    assert pause["fired"] is True, pause["detail"]
    proof = {k: v for p in pause["proof"] for k, v in p.items()}
    facts = proof["signal"]
    assert facts["chosen_by"] == "plugin-hold" and facts["firing"]["failpoint"] == "native.changelog.upload", facts
    assert facts["signalled"][0]["pid"] == facts["firing"]["pid"]  # the JVM the delay held is the one paused
    copies = proof["speculative_copies"]
    assert any(c["partition"] == 0 and c["original"]["executor"] == facts["executor_id"] != c["copy"]["executor"] for c in copies), copies
    assert (res.valid, res.exit_code) == (True, 0), (res.reasons, res.anomalies)
