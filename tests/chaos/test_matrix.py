"""The chaos matrix: presets, exit rules, JSON shape, flag errors, cleanup, Ctrl-C.

The fast tests run the matrix's aggregation over a stand-in cell runner (`run_cell=`): they
prove the verdict rules and the bookkeeping, not any fault's behaviour. `test_quick_matrix_real`
runs `statebed chaos matrix --quick --json` on real Spark.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import run_cli
from process_helpers import assert_no_process_left, interrupt_when, processes_naming
from shared_runs import SharedRun

from statebed_chaos.baseline import Baseline, baseline_key
from statebed_chaos.baseline_cache import Baselines
from statebed_chaos.experiment import Experiment, load_experiment
from statebed_chaos.experiment_runner import ExperimentResult
from statebed_chaos.faults import KINDS
from statebed_chaos.launcher import job_options
from statebed_chaos.matrix import EXIT_INTERRUPTED, MatrixResult, fault_caused, run_matrix
from statebed_chaos.matrix_presets import FAULTS, NONDETERMINISTIC, PRESETS, Preset, plan_cells
from statebed_cli.commands import chaos_matrix
from statebed_model.spark_features import SPARK_DEFAULTS, feature_conf
from statebed_store.formats import get_format
from statebed_verify import EXIT_CODES

Capsys = pytest.CaptureFixture[str]
Key = tuple[str, str, str]  # (fault, workload, format)


def _preset(keys: Iterable[Key], seeds: int) -> Preset:
    """A preset of these cells, each format parsed from its name (the edge a test writes)."""
    return Preset("test", tuple((f, w, get_format(m)) for f, w, m in keys), seeds, BASE)


RUN_KEYS = {"fault", "workload", "format", "seed", "valid", "anomalies", "faults_fired", "baseline_equal", "run_dir"}
RUN_KEYS |= {"cell", "seconds", "observed"}  # what the matrix report reads: the cell's name, its wall time, what its history showed
BASE = Experiment(batches=4, rows_per_batch=100, keyspace=10)


@dataclass
class StandIn:
    """A cell runner that returns the verdict a test chose per (fault, workload, format)."""

    verdicts: dict[Key, Any]
    anomalies: list[dict[str, Any]] = field(default_factory=lambda: [{"check": "state", "kind": "sample-oversize", "detail": "x"}])
    calls: list[tuple[Key, int]] = field(default_factory=list)
    caches: list[int] = field(default_factory=list)
    fired: int = 1  # faults_fired of every cell (each cell schedules one fault)
    baseline_itself_invalid: list[str] = field(default_factory=list)  # the baseline's own invalid verifiers

    def __call__(self, exp: Experiment, seed: int, out_dir: Path, baselines: Baselines) -> ExperimentResult:
        key = (exp.faults[0].kind, exp.workload, exp.format.name)
        self.calls.append((key, seed))
        self.caches.append(id(baselines))
        verdict = self.verdicts[key]
        if verdict == "crash":
            raise RuntimeError("the runner fell over")
        if verdict == "interrupt":
            raise KeyboardInterrupt
        (out_dir / "faulted").mkdir()
        (out_dir / "faulted" / "history.jsonl").write_text("{}\n")
        key = baseline_key(exp, seed)
        if baselines.get(key) is None:  # as the runner does: the first cell of a key runs the baseline
            (out_dir / "baseline").mkdir()
            baselines.put(key, Baseline(str(out_dir / "baseline"), {}, {}), durable=False)
        anomalies = [] if verdict is True else list(self.anomalies)
        return ExperimentResult(
            name=exp.name,
            seed=seed,
            valid=verdict,
            anomalies=anomalies,
            faults=[],
            faults_fired=self.fired,
            faults_scheduled=1,
            baseline_equal=verdict is True,
            run_dir=str(out_dir),
            seconds=0.0,
            exit_code=EXIT_CODES[verdict],
            reproduce="",
            checks={"baseline": {"itself_invalid": self.baseline_itself_invalid}},
        )


def matrix(
    tmp_path: Path,
    verdicts: dict[Key, Any],
    *,
    seeds: int = 1,
    keep: bool = False,
    strict_native: bool = False,
    anomalies: list[dict[str, Any]] | None = None,
) -> tuple[MatrixResult, StandIn]:
    preset = _preset(verdicts, seeds)
    cells, skipped = plan_cells(preset, seeds)
    stand_in = StandIn(verdicts) if anomalies is None else StandIn(verdicts, anomalies)
    out = tmp_path / "out"
    out.mkdir(parents=True)
    result = run_matrix(cells, skipped, out, preset="test", run_cell=stand_in, keep=keep, strict_native=strict_native, log=sys.stderr)
    return result, stand_in


V1_CONTROL: Key = ("zombie-upload", "sample3", "v1")
V2_CELL: Key = ("zombie-upload", "sample3", "v2")
V2_OTHER: Key = ("restart-driver", "count", "v2")
NATIVE: Key = ("restart-driver", "count", "native")
NATIVE_V1: Key = ("zombie-upload", "sample3", "native-v1")
NATIVE_V2: Key = ("zombie-upload", "sample3", "native-v2")


# -- presets -------------------------------------------------------------------------------------


def test_every_fault_kind_has_a_matrix_plan() -> None:
    assert set(FAULTS) == set(KINDS)


def test_quick_has_the_v1_control_and_v2_cells() -> None:
    cells, skipped = plan_cells(PRESETS["quick"], PRESETS["quick"].seeds)
    assert skipped == [] and 4 <= len(cells) <= 6
    assert any(c.format == "v1" and c.workload in NONDETERMINISTIC for c in cells)
    assert sum(c.format == "v2" for c in cells) >= 3
    assert all(c.experiment.batches <= 4 for c in cells)


def test_full_covers_the_issue_and_skips_what_cannot_apply() -> None:
    cells, skipped = plan_cells(PRESETS["full"], PRESETS["full"].seeds)
    kinds = {c.fault for c in cells}
    assert len(kinds) >= 9 and "zombie-upload" in kinds
    assert {c.workload for c in cells} == {"count", "bucket-collect", "sample3"}
    assert {c.format for c in cells} == {"v1", "v2", "native-v1", "native-v2"}
    assert {c.seed for c in cells} == set(range(1, 13))
    ran = {(c.fault, c.workload, c.format) for c in cells}
    assert ("kill-python-worker", "count", "native-v2") in {(s.fault, s.workload, s.format) for s in skipped}
    assert ("zombie-upload", "sample3", "native-v1") in ran  # through the JVM plug-in's delayed close
    assert all((s.fault, s.workload, s.format) not in ran and s.reason for s in skipped)
    assert len(ran) + len(skipped) == len(FAULTS) * 3 * 4


def test_storage_s3_moves_every_cell_into_the_bucket_and_names_it(tmp_path: Path) -> None:
    """`--storage s3` (the S3 column): a process fault's cell runs with its checkpoint in the bucket;
    under the flag every cell's name says -s3 (the storage faults' cells were on S3 already)."""
    local, _ = plan_cells(PRESETS["full"], 1, faults=["kill-executor", "storage-latency"], workloads=["sample3"], formats=["native-v2"])
    s3, _ = plan_cells(
        PRESETS["full"], 1, faults=["kill-executor", "storage-latency"], workloads=["sample3"], formats=["native-v2"], storage="s3"
    )
    assert {c.name: c.experiment.storage for c in local} == {
        "kill-executor-sample3-native-v2-s1": "local",
        "storage-latency-sample3-native-v2-s1": "s3",
    }
    assert {c.name: c.experiment.storage for c in s3} == {
        "kill-executor-sample3-native-v2-s3-s1": "s3",
        "storage-latency-sample3-native-v2-s3-s1": "s3",
    }
    for c in s3:
        (tmp_path / "cell.yaml").write_text(c.experiment.to_yaml())
        assert load_experiment(tmp_path / "cell.yaml").storage == "s3"  # a valid experiment file, in the bucket
    assert (
        plan_cells(PRESETS["full"], 1, workloads=["sample3"], formats=["native-v2"], storage="local")[0]
        == plan_cells(PRESETS["full"], 1, workloads=["sample3"], formats=["native-v2"])[0]
    )


def test_pause_executor_cells_carry_a_hold_for_the_pause_to_freeze(tmp_path: Path) -> None:
    """With millisecond tasks a pause rarely finds a straggler, so Spark copies nothing during it
    (issue 24 #19: 1 / 3 fired). A statebed cell also holds one state task of the trigger batch;
    the pause stays the fault under test (first). Spark's store has no task points: a native
    cell holds the task at its changelog's close (`when: after`, through the JVM plug-in), and
    its pause waits longer for it."""
    cells, skipped = plan_cells(PRESETS["full"], 2, faults=["pause-executor"], workloads=["count"])
    assert skipped == [] and {c.format for c in cells} == {"v1", "v2", "native-v1", "native-v2"}
    for c in cells:
        pause, *companions = c.experiment.faults
        assert pause.kind == "pause-executor" and pause.id == "f1"
        native = c.format.startswith("native")
        assert pause.params == ({"wait_s": 60} if native else {})
        (hold,) = companions
        assert hold.kind == "slow-attempt" and hold.id != pause.id and hold.at.batch == pause.at.batch
        assert hold.params["when"] == ("after" if native else "before") and hold.params["ms"] >= 1000
        (tmp_path / "cell.yaml").write_text(c.experiment.to_yaml())
        assert load_experiment(tmp_path / "cell.yaml").faults == c.experiment.faults  # a valid experiment file


def test_a_pause_cell_and_its_baseline_run_with_the_speculation_floor_the_pause_needs(tmp_path: Path) -> None:
    """Spark copied a task slow for other reasons 14 ms before a pause began (native-v2, under
    load), and nothing proved the pause: a pause cell's runs (its baseline too) start no copy
    before a task ran 6 s, so the copy is the pause's doing. Other cells keep Spark's settings,
    and so never share a baseline with a pause cell."""
    (pause,) = plan_cells(PRESETS["full"], 1, faults=["pause-executor"], workloads=["sample3"], formats=["native-v2"])[0]
    (slow,) = plan_cells(PRESETS["full"], 1, faults=["slow-attempt"], workloads=["sample3"], formats=["native-v2"])[0]
    features = feature_conf(SPARK_DEFAULTS)  # every native run sets Spark's repair features explicitly (its defaults here)
    assert pause.experiment.spark_conf() == {**features, "spark.speculation.minTaskRuntime": "6s"}
    assert slow.experiment.spark_conf() == features
    assert job_options(pause.experiment, 1, tmp_path / "r").extra_conf == {**features, "spark.speculation.minTaskRuntime": "6s"}
    assert job_options(slow.experiment, 1, tmp_path / "r").extra_conf == features
    assert baseline_key(pause.experiment, 1) != baseline_key(slow.experiment, 1)
    assert baseline_key(pause.experiment, 1)[:-2] == baseline_key(slow.experiment, 1)[:-2]  # the same sizes otherwise


def test_restart_driver_walks_the_protocol_steps_by_seed() -> None:
    cells, _ = plan_cells(PRESETS["full"], 4, faults=["restart-driver"], workloads=["count"])
    steps = {(c.format, c.experiment.faults[0].params["step"]) for c in cells}
    assert {s for f, s in steps if f == "v2"} == {"after-task-commits", "before-commit-log", "after-commit-log", "before-spark-commit"}
    assert {s for f, s in steps if f.startswith("native")} == {"at-trigger"}


def test_the_zombie_on_sparks_store_outlives_its_driver_for_bucket_collect_only() -> None:
    """A retry of bucket-collect's state task reads the same shuffle blocks: only a replanned batch shows the anomaly."""
    cells, _ = plan_cells(PRESETS["full"], 1, faults=["zombie-upload"], workloads=["bucket-collect", "sample3"])
    replan = {(c.workload, c.format): c.experiment.faults[0].params.get("replan", False) for c in cells}
    assert {k for k, on in replan.items() if on} == {("bucket-collect", "native-v1"), ("bucket-collect", "native-v2")}, replan


# -- exit rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdicts", "strict", "code"),
    [
        ({V1_CONTROL: False, V2_CELL: True, V2_OTHER: True}, False, 0),
        ({V1_CONTROL: False, V2_CELL: True, V2_OTHER: False}, False, 1),  # a V2 cell invalid
        ({V1_CONTROL: False, V2_CELL: "unknown", V2_OTHER: True}, False, 1),  # unknown is not valid
        ({V1_CONTROL: False, V2_CELL: "crash", V2_OTHER: True}, False, 1),  # a crashed cell is unknown
        ({V1_CONTROL: True, V2_CELL: True, V2_OTHER: True}, False, 1),  # V1 never failed: faults too weak
        ({V1_CONTROL: "unknown", V2_CELL: True}, False, 1),
        ({V1_CONTROL: True, ("restart-driver", "count", "v1"): False, V2_CELL: True}, False, 1),  # count is deterministic
        ({V1_CONTROL: False, V2_CELL: True, NATIVE: False}, False, 0),  # native is reported only
        ({V1_CONTROL: False, V2_CELL: True, NATIVE: False}, True, 1),
        ({V1_CONTROL: False, V2_CELL: True, NATIVE: True}, True, 0),
        # Spark's own V1 is a control, like statebed's: caught is what --strict-native asks of it
        ({V1_CONTROL: False, V2_CELL: True, NATIVE_V1: False, NATIVE_V2: True}, True, 0),
        ({V1_CONTROL: False, V2_CELL: True, NATIVE_V1: "unknown", NATIVE_V2: True}, True, 1),
        ({V1_CONTROL: False, V2_CELL: True, NATIVE_V1: "unknown", NATIVE_V2: True}, False, 0),
        ({V1_CONTROL: False, V2_CELL: True, NATIVE_V1: False, NATIVE_V2: False}, True, 1),
        ({V1_CONTROL: False, V2_CELL: True, NATIVE_V2: True}, True, 0),  # no native-v1 cell: nothing to catch
    ],
)
def test_exit_rules(tmp_path: Path, verdicts: dict[Key, Any], strict: bool, code: int) -> None:
    result, _ = matrix(tmp_path, verdicts, strict_native=strict)
    assert result.exit_code == code, result.summary()


def test_a_crashed_cell_is_unknown_with_the_error(tmp_path: Path) -> None:
    result, _ = matrix(tmp_path, {V1_CONTROL: False, V2_CELL: "crash"})
    crashed = result.runs[1].to_json()
    assert crashed["valid"] == "unknown" and crashed["anomalies"][0]["kind"] == "harness-error"
    assert "the runner fell over" in crashed["anomalies"][0]["detail"]
    assert result.summary()["v2_all_valid"] is False


def test_a_matrix_that_proved_nothing_fails_and_says_why(tmp_path: Path) -> None:
    result, _ = matrix(tmp_path, {V2_CELL: True})  # V2 valid, but nothing showed the faults can break a store
    assert result.v1_caught is None and result.exit_code == 1
    [why] = result.reasons()
    assert why.startswith("no V1 control ran") and why in result.summary()["reasons"]
    result, _ = matrix(tmp_path / "b", {V2_CELL: False})
    assert result.exit_code == 1 and len(result.reasons()) == 2
    result, _ = matrix(tmp_path / "c", {V1_CONTROL: False})  # V1 caught, but no V2 cell to hold
    assert result.v1_caught is True and result.exit_code == 1
    assert [r.split(":")[0] for r in result.reasons()] == ["no statebed V2 cell ran"]
    result, _ = matrix(tmp_path / "d", {V1_CONTROL: False, V2_CELL: True})
    assert result.exit_code == 0 and result.reasons() == [] and result.summary()["reasons"] == []


@pytest.mark.parametrize(
    "anomalies",
    [
        [{"kind": "harness-error", "detail": "the runner fell over"}],
        [{"check": "state", "kind": "missing-input", "detail": "batch 2's records are unknown"}],
        [{"check": "baseline", "kind": "baseline-mismatch", "detail": "differs"}],
        [{"check": "attempts", "kind": "unattributed-file", "detail": "x"}],
        [],
    ],
)
def test_the_v1_control_counts_only_when_caught_by_a_state_or_lineage_anomaly(tmp_path: Path, anomalies: list[dict[str, Any]]) -> None:
    result, _ = matrix(tmp_path, {V1_CONTROL: False, V2_CELL: True}, anomalies=anomalies)
    assert result.v1_caught is False and result.exit_code == 1
    [why] = result.reasons()
    assert why.startswith("the V1 control was not caught") and "1 invalid only by other anomalies" in why, why


@pytest.mark.parametrize(
    ("fired", "itself_invalid", "why"),
    [
        (0, [], "1 invalid with a fault that did not fire"),
        (1, ["state"], "1 invalid with a baseline invalid on its own and no anomaly where a fault struck"),
    ],
)
def test_the_v1_control_counts_only_when_its_fault_fired_and_its_baseline_was_valid(
    tmp_path: Path, fired: int, itself_invalid: list[str], why: str
) -> None:
    """The anomaly must be the fault's: a fault that did not fire, or a fault-free baseline that is
    itself invalid (V1 under speculation alone), proves nothing about the fault."""
    stand_in = StandIn({V1_CONTROL: False, V2_CELL: True}, fired=fired, baseline_itself_invalid=itself_invalid)
    preset = _preset((V1_CONTROL, V2_CELL), 1)
    cells, skipped = plan_cells(preset, 1)
    (tmp_path / "out").mkdir()
    result = run_matrix(cells, skipped, tmp_path / "out", preset="test", run_cell=stand_in, log=sys.stderr)
    assert result.v1_caught is False and result.exit_code == 1
    [reason] = result.reasons()
    assert why in reason, reason


def test_with_a_baseline_invalid_on_its_own_only_an_anomaly_where_the_fault_struck_counts() -> None:
    at = {"check": "state", "kind": "output-mismatch", "batches": [2]}
    elsewhere = {"check": "state", "kind": "output-mismatch", "batches": [5]}
    assert fault_caused([elsewhere], {2}, baseline_itself_invalid=False) is True  # a valid baseline: any store anomaly
    assert fault_caused([elsewhere, {"check": "state", "kind": "sample-oversize", "batches": []}], {2}, True) is False
    assert fault_caused([elsewhere, at], {2}, True) is True
    assert fault_caused([{"check": "baseline", "kind": "baseline-mismatch", "batches": [2]}], {2}, True) is False


@pytest.mark.parametrize(
    "caught_by",
    [
        {"check": "state", "kind": "sample-oversize"},
        {"check": "state", "kind": "lost-record"},
        {"check": "lineage", "kind": "non-linear-lineage"},
    ],
)
def test_the_v1_control_is_caught_by_the_seed_appendixs_kinds(tmp_path: Path, caught_by: dict[str, Any]) -> None:
    anomalies = [{"check": "baseline", "kind": "baseline-mismatch"}, {**caught_by, "detail": "x"}]
    result, _ = matrix(tmp_path, {V1_CONTROL: False, V2_CELL: True}, anomalies=anomalies)
    assert result.v1_caught is True and result.exit_code == 0, result.reasons()


def test_json_and_text_say_why_a_matrix_fails(tmp_path: Path, capsys: Capsys) -> None:
    args = ("--quick", "--faults", "zombie-upload", "--formats", "v2", "--no-report")
    code = chaos_matrix.run(cli_args(*args, "--json", "--out", str(tmp_path / "j")), run_cell=StandIn({V2_CELL: True}))
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 1 and doc["summary"]["exit_code"] == 1
    assert [r.split(":")[0] for r in doc["summary"]["reasons"]] == ["no V1 control ran (a V1 cell on bucket-collect or sample3)"]
    assert "FAIL because no V1 control ran" in captured.err
    code = chaos_matrix.run(cli_args(*args, "--out", str(tmp_path / "t")), run_cell=StandIn({V2_CELL: True}))
    assert code == 1 and "FAIL because no V1 control ran" in capsys.readouterr().out


def test_one_baselines_cache_for_every_cell_and_every_seed(tmp_path: Path) -> None:
    result, stand_in = matrix(tmp_path, {V1_CONTROL: False, V2_CELL: True}, seeds=3)
    assert len(result.runs) == 6 and len(set(stand_in.caches)) == 1
    assert sorted(stand_in.calls) == sorted((k, s) for k in (V1_CONTROL, V2_CELL) for s in (1, 2, 3))


# -- output and cleanup --------------------------------------------------------------------------


def cli_args(*argv: str) -> argparse.Namespace:
    from statebed_cli.main import build_parser

    return build_parser().parse_args(["chaos", "matrix", *argv])


def test_json_shape_and_summary(tmp_path: Path, capsys: Capsys) -> None:
    verdicts = {
        V1_CONTROL: False,
        V2_CELL: True,
        ("restart-driver", "sample3", "v2"): True,
        ("fail-changelog-upload", "bucket-collect", "v2"): True,
    }
    out = tmp_path / "m"
    code = chaos_matrix.run(cli_args("--quick", "--json", "--out", str(out)), run_cell=StandIn(verdicts))
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and set(doc) == {"runs", "summary"}
    assert [set(r) for r in doc["runs"]] == [RUN_KEYS] * 4
    s = doc["summary"]
    assert (s["cells"], s["valid"], s["invalid"], s["unknown"]) == (4, 3, 1, 0)
    assert s["v2_all_valid"] is True and s["v1_caught"] is True and s["exit_code"] == 0
    assert s["native"] == {"cells": 0, "valid": 0, "invalid": 0, "unknown": 0}
    assert s["skipped"] == [] and isinstance(s["seconds"], float)
    (failing,) = s["failing"]
    assert failing["cell"] == "zombie-upload-sample3-v1-s1" and failing["valid"] is False


def test_valid_cells_are_removed_failing_ones_kept_and_replayable(tmp_path: Path, capsys: Capsys) -> None:
    verdicts = {
        V1_CONTROL: False,
        V2_CELL: True,
        ("restart-driver", "sample3", "v2"): "unknown",
        ("fail-changelog-upload", "bucket-collect", "v2"): True,
    }
    out = tmp_path / "m"
    code = chaos_matrix.run(cli_args("--quick", "--out", str(out)), run_cell=StandIn(verdicts))
    text = capsys.readouterr().out
    assert code == 1
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["restart-driver-sample3-v2-s1", "zombie-upload-sample3-v1-s1"]
    assert json.loads((out / "matrix.json").read_text())["summary"]["exit_code"] == 1  # the record `statebed report` reads
    for name in ("zombie-upload-sample3-v1-s1", "restart-driver-sample3-v2-s1"):
        yaml_path = out / name / "experiment.yaml"
        assert f"statebed chaos run {yaml_path} --seed 1" in text
        assert (out / name / "faulted" / "history.jsonl").is_file()
    replay = load_experiment(out / "zombie-upload-sample3-v1-s1" / "experiment.yaml")
    quick = {c.name: c for c in plan_cells(PRESETS["quick"], 1)[0]}
    assert replay.to_json() == quick["zombie-upload-sample3-v1-s1"].experiment.to_json()
    assert "FAIL" in text and "zombie-upload" in text and "1/0/0" in text


def test_a_valid_cell_holding_a_kept_cells_baseline_stays(tmp_path: Path) -> None:
    holder: Key = ("kill-executor", "sample3", "v2")  # runs first: its directory holds the shared baseline
    slow: Key = ("slow-attempt", "sample3", "v2")  # same baseline key (standalone, same sizes and seed)
    result, _ = matrix(tmp_path, {V1_CONTROL: False, holder: True, slow: False})
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(r.cell.name for r in result.runs)
    kept = out / "kill-executor-sample3-v2-s1"
    assert (kept / "baseline").is_dir()
    assert result.notes == [f"kept {kept}: it holds the baseline {kept / 'baseline'} of a cell that is not valid"]


def test_keep_keeps_every_cell(tmp_path: Path, capsys: Capsys) -> None:
    verdicts = {V1_CONTROL: False, V2_CELL: True}
    out = tmp_path / "m"
    code = chaos_matrix.run(
        cli_args("--quick", "--json", "--keep", "--formats", "v1,v2", "--faults", "zombie-upload", "--out", str(out)),
        run_cell=StandIn(verdicts),
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and len([p for p in out.iterdir() if p.is_dir()]) == 2
    assert all(r["run_dir"] and Path(r["run_dir"]).is_dir() for r in doc["runs"])


def test_ctrl_c_stops_at_the_running_cell(tmp_path: Path, capsys: Capsys) -> None:
    verdicts = {
        V1_CONTROL: False,
        V2_CELL: "interrupt",
        ("restart-driver", "sample3", "v2"): True,
        ("fail-changelog-upload", "bucket-collect", "v2"): True,
    }
    stand_in = StandIn(verdicts)
    out = tmp_path / "m"
    code = chaos_matrix.run(cli_args("--quick", "--json", "--out", str(out)), run_cell=stand_in)
    doc = json.loads(capsys.readouterr().out)
    assert code == EXIT_INTERRUPTED and len(stand_in.calls) == 2
    assert doc["summary"]["interrupted"] == "zombie-upload-sample3-v2-s1" and len(doc["runs"]) == 1
    assert (out / "zombie-upload-sample3-v2-s1" / "experiment.yaml").is_file()


def test_resume_takes_finished_cells_from_the_journal_and_runs_the_rest(tmp_path: Path, capsys: Capsys) -> None:
    """A matrix stopped at a cell: `--resume` in the same --out runs the interrupted cell afresh
    and the ones after it, takes the finished one from cells.jsonl, and judges all of them."""
    verdicts = {
        V1_CONTROL: False,
        V2_CELL: "interrupt",
        ("restart-driver", "sample3", "v2"): True,
        ("fail-changelog-upload", "bucket-collect", "v2"): True,
    }
    out = tmp_path / "m"
    assert chaos_matrix.run(cli_args("--quick", "--json", "--out", str(out)), run_cell=StandIn(verdicts)) == EXIT_INTERRUPTED
    capsys.readouterr()
    (finished,) = [json.loads(line) for line in (out / "cells.jsonl").read_text().splitlines()]
    assert finished["cell"] == "zombie-upload-sample3-v1-s1" and finished["valid"] is False
    stand_in = StandIn({**verdicts, V2_CELL: True})
    code = chaos_matrix.run(cli_args("--quick", "--json", "--resume", "--out", str(out)), run_cell=stand_in)
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and len(doc["runs"]) == 4 and doc["summary"]["interrupted"] is None
    assert [k for k, _ in stand_in.calls] == [
        V2_CELL,
        ("restart-driver", "sample3", "v2"),
        ("fail-changelog-upload", "bucket-collect", "v2"),
    ]
    assert doc["runs"][0]["cell"] == "zombie-upload-sample3-v1-s1" and doc["runs"][0]["valid"] is False  # from the journal
    assert len((out / "cells.jsonl").read_text().splitlines()) == 4
    code, _, err = run_cli(capsys, "chaos", "matrix", "--quick", "--resume")
    assert code == 2 and "--out" in err


def test_report_only_judges_the_shards_journals_joined_and_runs_no_cell(tmp_path: Path, capsys: Capsys) -> None:
    """The nightly's shards each run some fault kinds; their journals joined are judged as one
    matrix. A selected cell no shard finished is unknown ("not run"), never run here."""
    verdicts = {
        V1_CONTROL: False,
        V2_CELL: True,
        ("restart-driver", "sample3", "v2"): True,
        ("fail-changelog-upload", "bucket-collect", "v2"): True,
    }
    shards = {"uploads": "zombie-upload", "driver": "restart-driver"}  # fail-changelog-upload's shard never ran
    for name, faults in shards.items():
        code = chaos_matrix.run(
            cli_args("--quick", "--json", "--faults", faults, "--out", str(tmp_path / name)), run_cell=StandIn(verdicts)
        )
        assert code in (0, 1)
    capsys.readouterr()
    joined = tmp_path / "all"
    joined.mkdir()
    # as the workflow joins them: each journal, then a newline (a shard killed mid-line leaves a torn last line)
    (joined / "cells.jsonl").write_text("".join((tmp_path / n / "cells.jsonl").read_text() + '{"cell": "torn\n' for n in shards))
    for name in shards:  # the gate has the journals only: the shards' cell directories stayed on their runners
        shutil.rmtree(tmp_path / name)
    lines = (joined / "cells.jsonl").read_text().splitlines()
    timed = [json.dumps({**json.loads(x), "seconds": 10.0 * (i + 1)}) if x.endswith("}") else x for i, x in enumerate(lines)]
    (joined / "cells.jsonl").write_text("\n".join(timed) + "\n")  # the cells' own wall times, as the shards measured them
    never = StandIn(verdicts)
    code = chaos_matrix.run(cli_args("--quick", "--json", "--report-only", "--out", str(joined)), run_cell=never)
    doc = json.loads(capsys.readouterr().out)
    assert never.calls == [] and len(doc["runs"]) == 4
    by_cell = {r["cell"]: r for r in doc["runs"]}
    assert by_cell["zombie-upload-sample3-v1-s1"]["valid"] is False and by_cell["restart-driver-sample3-v2-s1"]["valid"] is True
    assert by_cell["fail-changelog-upload-bucket-collect-v2-s1"]["valid"] == "unknown"
    assert doc["summary"]["v1_caught"] is True and code == 1  # a V2 cell not run: the matrix does not pass
    ran = sorted(r["seconds"] for r in doc["runs"] if r["cell"] != "fail-changelog-upload-bucket-collect-v2-s1")
    assert len(ran) == 3 and min(ran) > 0  # as the journal says, not this invocation's
    assert doc["summary"]["cell_seconds"] == {"total": sum(ran), "median": ran[1]}  # the cell not run counts in neither
    assert (joined / "report.html").is_file()
    code, _, err = run_cli(capsys, "chaos", "matrix", "--quick", "--report-only", "--out", str(tmp_path / "empty"))
    assert code == 2 and "holds no matrix journal" in err and not (tmp_path / "empty").exists()


def test_resume_refuses_a_directory_that_holds_no_matrix(tmp_path: Path, capsys: Capsys) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    code, _, err = run_cli(capsys, "chaos", "matrix", "--resume", "--out", str(tmp_path))
    assert code == 2 and "holds no chaos matrix" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "mine.txt").read_text() == "keep me"


# -- flag errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--faults", "kill-everything"], "kill-everything"),
        (["--faults", "zombie-upload,"], "--faults"),
        (["--workloads", "wordcount"], "wordcount"),
        (["--formats", "v3"], "v3"),
        (["--quick", "--formats", "native"], "--formats"),  # the quick preset has no native cell
        (["--quick", "--full"], "--quick"),
        (["--seeds", "0"], "--seeds"),
        (["--seeds", "many"], "many"),
        (["--storage", "nfs"], "--storage"),
    ],
)
def test_bad_flags_are_one_line_exit_2(tmp_path: Path, capsys: Capsys, argv: list[str], named: str) -> None:
    out = tmp_path / "m"
    code, stdout, err = run_cli(capsys, "chaos", "matrix", *argv, "--out", str(out))
    assert code == 2 and stdout == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and named in err, err
    assert not out.exists()  # nothing was started or written


def test_a_non_empty_out_dir_is_refused(tmp_path: Path, capsys: Capsys) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    code, _, err = run_cli(capsys, "chaos", "matrix", "--out", str(tmp_path))
    assert code == 2 and str(tmp_path) in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "mine.txt").read_text() == "keep me"


# -- the real quick matrix -----------------------------------------------------------------------


@pytest.mark.slow
def test_quick_matrix_real(quick_matrix: SharedRun) -> None:
    """`statebed chaos matrix --quick --json` on real Spark (run once per session, `tests/shared_runs.py`):
    every V2 cell valid, the V1 control caught, exit 0."""
    doc = quick_matrix.doc
    v2 = [r for r in doc["runs"] if r["format"] == "v2"]
    assert v2 and all(r["valid"] is True and r["faults_fired"] >= 1 and r["baseline_equal"] is True for r in v2), v2
    v1 = [r for r in doc["runs"] if r["format"] == "v1" and r["workload"] in NONDETERMINISTIC]
    assert any(r["valid"] is False and r["anomalies"] for r in v1), v1
    assert doc["summary"]["v1_caught"] is True and doc["summary"]["reasons"] == [], quick_matrix.stderr
    assert all(f["reasons"] for f in doc["summary"]["failing"]), doc["summary"]["failing"]  # an unknown or invalid cell says why
    assert quick_matrix.returncode == 0, quick_matrix.stderr
    # its three standalone cells (zombie-upload V1 and V2, fail-changelog-upload) ran on one long-lived cluster, gone at the end
    assert quick_matrix.stderr.count("standalone cluster: the matrix's") == 3, quick_matrix.stderr
    assert any("started 1 time(s)" in n for n in doc["summary"]["notes"]), doc["summary"]["notes"]
    assert (quick_matrix.out / "cluster" / "master.log").is_file() and not (quick_matrix.out / "cluster" / "cluster.json").exists()
    assert processes_naming(quick_matrix.out / "cluster") == []


@pytest.mark.e2e
@pytest.mark.slow
def test_sigterm_to_a_real_matrix_stops_its_running_cell(tmp_path: Path) -> None:
    """SIGTERM (what a CI runner or `kill` sends) mid-cell: exit 130, the cell's directory kept,
    and no process it started (driver JVM, workers, cluster) still alive."""
    out = tmp_path / "m"
    cmd = [
        str(Path(sys.executable).parent / "statebed"),
        "chaos",
        "matrix",
        "--quick",
        "--faults",
        "fail-changelog-upload",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    err = interrupt_when(proc, lambda: bool(list(out.glob("*/*/spark-checkpoint/offsets/1"))), signal.SIGTERM)
    assert proc.returncode == EXIT_INTERRUPTED, err[-2000:]
    cells = [d for d in out.iterdir() if d.is_dir() and d.name != "cluster"]
    assert len(cells) == 1 and (cells[0] / "experiment.yaml").exists()
    assert_no_process_left(cells[0])
    assert (out / "cluster" / "master.log").is_file() and processes_naming(out / "cluster") == []  # the matrix's long-lived cluster too
