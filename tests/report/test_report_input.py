"""`statebed report` on input it cannot use, and on records that are incomplete on purpose (no Spark):
a foreign or half-written directory is exit 2 with one line naming the file; a run in progress
gets a report that says so; a matrix record renders its coloured verdict table; a report that
fails at the end of a command is one warning line and never its outcome."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import run_cli

from statebed_cli.commands.report import default_report
from statebed_model.rundir import RunDir, RunInfo
from statebed_report import write_report

Capsys = pytest.CaptureFixture[str]


def _one_error_line(err: str, named: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("statebed report: error: ") and named in lines[0], err
    assert "Traceback" not in err


def _run_dir(root: Path, *, events: str | None = None) -> Path:
    """A run directory as `statebed run` starts one: run.json, and an event log when given its file name."""
    RunDir(root).create(RunInfo(workload="count", format="v2", partitions=2, checkpoint="checkpoint", params={"batches": 3, "seed": 7}))
    if events is not None:
        (root / "events").mkdir()
        (root / "events" / events).write_text("")
    return root


def test_no_such_directory_is_exit_2(tmp_path: Path, capsys: Capsys) -> None:
    code, out, err = run_cli(capsys, "report", str(tmp_path / "nope"))
    assert code == 2 and out == ""
    _one_error_line(err, str(tmp_path / "nope"))


def test_a_foreign_directory_is_exit_2_naming_the_files_it_lacks(tmp_path: Path, capsys: Capsys) -> None:
    (tmp_path / "notes.txt").write_text("not a run")
    (tmp_path / "sub").mkdir()
    code, _, err = run_cli(capsys, "report", str(tmp_path))
    assert code == 2
    _one_error_line(err, "no run.json, experiment.yaml or matrix.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "sub"]  # nothing written


@pytest.mark.parametrize(
    ("name", "content"),
    [("run.json", b'{"workload": "count", "mode"'), ("run.json", b"[1, 2]"), ("run.json", b'{"schema": 99}')],
)
def test_an_unreadable_run_json_is_exit_2_naming_it(tmp_path: Path, capsys: Capsys, name: str, content: bytes) -> None:
    (tmp_path / name).write_bytes(content)
    code, _, err = run_cli(capsys, "report", str(tmp_path))
    assert code == 2
    _one_error_line(err, str(tmp_path / name))


def test_a_finished_run_without_its_timing_records_is_half_written(tmp_path: Path, capsys: Capsys) -> None:
    root = _run_dir(tmp_path / "run", events="local-1700000000000")  # the event log is closed: the run ended
    (root / "checkpoint" / "commits").mkdir(parents=True)
    (root / "checkpoint" / "commits" / "0").write_text("v2\n{}\n")  # ... and committed a batch
    code, _, err = run_cli(capsys, "report", str(root))
    assert code == 2
    _one_error_line(err, str(root / "timings"))


def test_a_run_stopped_before_its_first_commit_is_reported(tmp_path: Path, capsys: Capsys) -> None:
    """E.g. a chaos run past its timeout: Spark closed its log, nothing was committed."""
    root = _run_dir(tmp_path / "run", events="app-20261123182946-0000")
    code, _, err = run_cli(capsys, "report", str(root))
    assert code == 0, err
    page = (root / "report.html").read_text()
    assert 'id="in-progress"' not in page and "Verdict: unknown" in page and "No state files yet." in page


def test_a_run_in_progress_gets_a_report_saying_so(tmp_path: Path, capsys: Capsys) -> None:
    root = _run_dir(tmp_path / "run", events="local-1700000000000.inprogress")
    code, out, err = run_cli(capsys, "report", str(root))
    assert code == 0, err
    assert out.strip() == str(root / "report.html")
    page = (root / "report.html").read_text()
    assert 'id="in-progress"' in page and "in progress: Spark&#x27;s event log is still open" in page
    assert "Verdict: not judged yet" in page


def _experiment(root: Path, verdict: str | None, history: str | None) -> Path:
    root.mkdir()
    (root / "experiment.yaml").write_text("name: half\nseed: 3\nfaults: []\n")
    if verdict is not None:
        (root / "verdict.json").write_text(verdict)
    if history is not None:
        (root / "history.jsonl").write_text(history)
    return root


def test_an_experiment_without_verdict_is_in_progress(tmp_path: Path, capsys: Capsys) -> None:
    root = _experiment(tmp_path / "exp", None, '{"type": "fault", "start": 1700000000.0, "end": 1700000001.0, "id": "f1", "kind": "k"}\n')
    code, _, err = run_cli(capsys, "report", str(root), "-o", str(tmp_path / "out" / "r.html"))
    assert code == 0, err
    page = (tmp_path / "out" / "r.html").read_text()
    assert "in progress: no verdict.json yet" in page and "statebed chaos run" in page
    assert not (root / "report.html").exists()  # -o: only where asked


@pytest.mark.parametrize(
    ("verdict", "history", "named"),
    [
        ('{"valid": true, "anomalies": []}', None, "history.jsonl"),  # finished, but its history is gone
        ('{"valid": tr', "", "verdict.json"),  # cut short while written
        ('{"valid": true}', '{"type": "fault", "start": 1}\n{"type": ', "history.jsonl:2"),
    ],
)
def test_a_half_written_experiment_is_exit_2_naming_the_file(
    tmp_path: Path, capsys: Capsys, verdict: str, history: str | None, named: str
) -> None:
    root = _experiment(tmp_path / "exp", verdict, history)
    code, _, err = run_cli(capsys, "report", str(root))
    assert code == 2
    _one_error_line(err, named)
    assert not (root / "report.html").exists()


def _matrix_doc(kept: str | None) -> dict[str, object]:
    run = {"fault": "zombie-upload", "workload": "sample3", "seed": 1, "anomalies": [], "faults_fired": 1, "baseline_equal": True}
    runs = [
        {
            **run,
            "format": "v1",
            "valid": False,
            "anomalies": [{"kind": "sample-oversize"}],
            "run_dir": kept,
            "cell": "zombie-upload-sample3-v1-s1",
        },
        {**run, "format": "v2", "valid": True, "run_dir": None, "cell": "zombie-upload-sample3-v2-s1", "seconds": 61.5},
    ]
    for r in runs:
        r.setdefault("seconds", 80.0)
        r["observed"] = {"speculative_attempts": 1, "task_retries": 0, "driver_restarts": 0, "batch_reruns": 0}
    summary = {"preset": "quick", "cells": 2, "valid": 1, "invalid": 1, "unknown": 0, "v2_all_valid": True, "v1_caught": True}
    summary |= {
        "seconds": 141.5,
        "skipped": [{"fault": "zombie-upload", "workload": "sample3", "format": "native", "reason": "no failpoints"}],
    }
    summary |= {"failing": [{"cell": "zombie-upload-sample3-v1-s1", "valid": False, "reproduce": "statebed chaos run x --seed 1"}]}
    return {"runs": runs, "summary": summary | {"exit_code": 0, "notes": []}}


def test_a_matrix_record_renders_its_verdict_table(tmp_path: Path) -> None:
    (tmp_path / "matrix.json").write_text(json.dumps(_matrix_doc(None)))
    page = write_report(tmp_path).read_text()
    table = page[page.index('id="verdict-table"') : page.index("</table>", page.index('id="verdict-table"'))]
    assert re.findall(r'<td class="(\w+)"', table) == ["invalid", "valid", "na"]  # v1, v2, native (skipped)
    assert "s1 INVALID" in table and "s1 valid" in table
    assert "Matrix quick: PASS" in page and "statebed chaos run x --seed 1" in page
    assert "removed (valid)" in page


def test_a_failing_matrix_record_says_why(tmp_path: Path) -> None:
    """The matrix's own reasons (a V1-only selection: no statebed V2 cell ran) head its report."""
    doc = _matrix_doc(None)
    doc["runs"] = doc["runs"][:1]
    doc["summary"] |= {"cells": 1, "valid": 0, "v2_all_valid": None, "exit_code": 1}
    doc["summary"]["reasons"] = ["no statebed V2 cell ran: nothing shows V2 holds under these faults"]
    (tmp_path / "matrix.json").write_text(json.dumps(doc))
    page = write_report(tmp_path).read_text()
    assert "Matrix quick: FAIL" in page and "fails because no statebed V2 cell ran" in page


def test_a_matrix_record_naming_a_missing_cell_is_exit_2(tmp_path: Path, capsys: Capsys) -> None:
    kept = tmp_path / "zombie-upload-sample3-v1-s1"
    (tmp_path / "matrix.json").write_text(json.dumps(_matrix_doc(str(kept))))
    code, _, err = run_cli(capsys, "report", str(tmp_path))
    assert code == 2
    _one_error_line(err, str(kept / "verdict.json"))


def test_an_unwritable_output_is_exit_2(tmp_path: Path, capsys: Capsys) -> None:
    root = _run_dir(tmp_path / "run", events="app.inprogress")
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli(capsys, "report", str(root), "-o", str(tmp_path / "file" / "r.html"))
    assert code == 2
    _one_error_line(err, str(tmp_path / "file" / "r.html"))


def test_a_failed_default_report_is_one_warning_line(tmp_path: Path, capsys: Capsys) -> None:
    assert default_report("chaos run", tmp_path) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"statebed chaos run: warning: no report written for {tmp_path}: UsageError"), err


# -- issue 24 item 11: a record field of the wrong type is exit 2 naming it, not a crash (70) ------


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("mode", 1.5, "run.json: mode: expected str, got float"),
        ("checkpoint", None, "run.json: checkpoint: expected str, got null"),
        ("partitions", True, "run.json: partitions: expected int, got bool"),
        ("params", ["a"], "run.json: params: expected an object, got list"),
        ("params", {"extra_conf": "x"}, "run.json: params.extra_conf: expected dict or null, got str"),
    ],
)
def test_a_run_json_field_of_the_wrong_type_is_exit_2_naming_it(
    tmp_path: Path, capsys: Capsys, field: str, value: object, named: str
) -> None:
    root = _run_dir(tmp_path / "run", events="local-1700000000000.inprogress")
    doc = json.loads((root / "run.json").read_text())
    doc[field] = value
    (root / "run.json").write_text(json.dumps(doc))
    code, _, err = run_cli(capsys, "report", str(root))
    assert code == 2, err
    _one_error_line(err, str(root / named))
    assert not (root / "report.html").exists()


@pytest.mark.parametrize(
    ("verdict", "named"),
    [
        ('{"valid": [true]}', "verdict.json: valid: expected bool or str or null, got list"),
        ('{"valid": true, "anomalies": 5}', "verdict.json: anomalies: expected a list, got int"),
        ('{"valid": true, "faults": [{"id": "f1", "proof": 3}]}', "verdict.json: faults[0].proof: expected a list, got int"),
        ('{"valid": true, "checks": "x"}', "verdict.json: checks: expected an object, got str"),
        ('{"valid": true, "checks": {"lineage": []}}', "verdict.json: checks.lineage: expected an object, got list"),
        (
            '{"valid": true, "checks": {"baseline": {"verdicts": {"state": 1}}}}',
            "verdict.json: checks.baseline.verdicts.state: expected an object",
        ),
        ('{"valid": true, "reasons": 1.5}', "verdict.json: reasons: expected a list, got float"),
    ],
)
def test_a_verdict_json_field_of_the_wrong_type_is_exit_2_naming_it(tmp_path: Path, capsys: Capsys, verdict: str, named: str) -> None:
    root = _experiment(tmp_path / "exp", verdict, "")
    code, _, err = run_cli(capsys, "report", str(root))
    assert code == 2, err
    _one_error_line(err, str(root / named))
    assert not (root / "report.html").exists()


def test_a_well_typed_verdict_still_renders(tmp_path: Path, capsys: Capsys) -> None:
    """The positive control of the type checks: every checked field present, with its right type."""
    verdict = {
        "name": "half",
        "seed": 3,
        "valid": "unknown",
        "anomalies": [{"check": "lineage", "kind": "k", "detail": "d"}],
        "faults": [{"id": "f1", "kind": "kill-executor", "fired": None, "detail": "d", "proof": []}],
        "checks": {"lineage": {"valid": True, "anomalies": 0}, "baseline": {"run_dir": None, "verdicts": {"state": {"valid": True}}}},
        "reasons": ["why"],
        "reproduce": "statebed chaos run x --seed 3",
        "baseline_equal": None,
        "run_dir": str(tmp_path / "exp"),
        "seconds": 1.5,
        "exit_code": 3,
    }
    root = _experiment(tmp_path / "exp", json.dumps(verdict), "")
    code, _, err = run_cli(capsys, "report", str(root))
    assert code == 0, err
    assert "statebed chaos run x --seed 3" in (root / "report.html").read_text()


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("runs", 0, "anomalies"), 5, "matrix.json: runs[0].anomalies: expected a list, got int"),
        (("runs", 0, "observed"), "x", "matrix.json: runs[0].observed: expected dict or null, got str"),
        (("summary", "v1_caught"), [], "matrix.json: summary.v1_caught: expected bool or null, got list"),
        (("summary", "skipped"), "x", "matrix.json: summary.skipped: expected a list, got str"),
        (("summary", "failing", 0), None, "matrix.json: summary.failing[0]: expected dict, got null"),
    ],
)
def test_a_matrix_json_field_of_the_wrong_type_is_exit_2_naming_it(
    tmp_path: Path, capsys: Capsys, path: tuple[str | int, ...], value: object, named: str
) -> None:
    doc: Any = _matrix_doc(None)
    cur = doc
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value
    (tmp_path / "matrix.json").write_text(json.dumps(doc))
    code, _, err = run_cli(capsys, "report", str(tmp_path))
    assert code == 2, err
    _one_error_line(err, str(tmp_path / named))
