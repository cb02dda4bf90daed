"""Reports of real runs, opened in headless Chromium: the page loads with no console error and no
network request, the verdict and the anomalies are visible, every plot has data, the timeline's
fault window is where the history says, and a V1-invalid run shows its anomaly on the lineage
graph. One V2 `statebed run` is made once for the module; the matrix tests read the session's
quick matrix (`tests/shared_runs.py`: its V1 positive control, zombie-upload × sample3 × V1, kept); each test saves a screenshot of the report it checks in its tmp dir.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import Chromium
from shared_runs import SharedRun

from statebed_model.attempts import read_attempts
from statebed_report import write_report
from statebed_verify.history import read_history

pytestmark = pytest.mark.slow

CELL = "zombie-upload-sample3-v1-s1"

# Per Plotly graph on the page: its id and how many points its traces hold in all.
_PLOTS = "[...document.querySelectorAll('.plotly-graph-div')].map(d => [d.id, d.data.reduce((n, t) => n + (t.x ? t.x.length : 0), 0)])"


@pytest.fixture(scope="module")
def v2_run(local_v2_run: SharedRun) -> Path:
    """The session's small V2 `statebed run` (count, 3 partitions, 4 batches): it wrote its report itself."""
    assert local_v2_run.returncode == 0, local_v2_run.stderr[-3000:]
    assert (local_v2_run.out / "report.html").is_file()
    return local_v2_run.out


@pytest.fixture(scope="module")
def v1_matrix(quick_matrix: SharedRun) -> Path:
    """The session's quick matrix (`tests/shared_runs.py`): its V1 positive-control cell kept
    (invalid) with its report; its V2 cells, valid, removed; the matrix's own report."""
    (run,) = [r for r in quick_matrix.doc["runs"] if r["cell"] == CELL]
    assert run["valid"] is False, quick_matrix.stderr[-3000:]  # the V1 control, caught
    assert f"report: {quick_matrix.out / 'report.html'}" in quick_matrix.stderr
    return quick_matrix.out


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    with Chromium() as browser:
        yield browser


def _open(chromium: Chromium, report: Path, shot: Path) -> tuple[str, dict[str, int]]:
    """Open a report: no console error, no request but the file itself, every plot drawn with data."""
    session, load = chromium.open(report)
    assert load.errors == [], load.errors
    assert load.external_requests == [] and load.requests == [load.url], load.requests
    plots = dict(chromium.evaluate(session, _PLOTS))
    assert load.plots == len(plots) >= 1 and all(n > 0 for n in plots.values()), plots
    assert chromium.screenshot(session, shot).stat().st_size > 20_000
    return session, plots


def _text(chromium: Chromium, session: str, element: str) -> str:
    return str(chromium.evaluate(session, f"document.getElementById({json.dumps(element)}).innerText"))


def _bars(chromium: Chromium, session: str, trace_prefix: str) -> int:
    js = f"document.getElementById('timeline').data.filter(t => t.name.startsWith({json.dumps(trace_prefix)})).reduce((n, t) => n + t.x.length, 0)"
    return int(chromium.evaluate(session, js))


def test_v2_run_report(chromium: Chromium, v2_run: Path, tmp_path: Path) -> None:
    session, plots = _open(chromium, v2_run / "report.html", tmp_path / "run-report.png")
    assert set(plots) == {"timeline", "throughput", "lineage"}
    assert _text(chromium, session, "verdict").startswith("Verdict: valid — 0 anomalies")
    assert _text(chromium, session, "anomalies") == "No anomalies."
    assert _bars(chromium, session, "attempt: ") == len(read_attempts(v2_run))  # one bar per task attempt
    assert _bars(chromium, session, "batch ") == 4
    chain = chromium.evaluate(
        session, "document.getElementById('lineage').data.filter(t => t.visible !== false && t.name === 'committed')[0].x"
    )
    assert chain == [1, 2, 3, 4]  # partition 0's committed versions
    latency = _text(chromium, session, "latency")
    assert "task: store commit incl. changelog upload\t12\t" in latency  # 4 batches × 3 partitions
    assert "statebed run --run-dir" in _text(chromium, session, "reproduce")


def test_v1_invalid_experiment_report(chromium: Chromium, v1_matrix: Path, tmp_path: Path) -> None:
    cell = v1_matrix / CELL
    verdict = json.loads((cell / "verdict.json").read_text())
    session, plots = _open(chromium, cell / "report.html", tmp_path / "experiment-report.png")
    assert set(plots) == {"timeline", "throughput", "lineage"}
    assert _text(chromium, session, "verdict").startswith(f"Verdict: INVALID — {len(verdict['anomalies'])} anomal")
    rows = chromium.evaluate(
        session, "[...document.getElementById('anomalies').tBodies[0].rows].map(r => [r.cells[0].innerText, r.cells[1].innerText])"
    )
    assert rows == [[a["check"], a["kind"]] for a in verdict["anomalies"]]
    # the lineage graph marks the element the anomaly is about: the V1 changelog the zombie overwrote
    marked = chromium.evaluate(
        session,
        "document.getElementById('lineage').data.flatMap(t => (t.text || []).map((s, i) => [t.name, t.x[i], t.y[i], s, t.hovertext[i]]))"
        ".filter(n => n[3].startsWith('ANOMALY'))",
    )
    assert marked, "no node of the lineage graph is marked with the anomaly"
    assert any(n[0] == "overwritten" and "OVERWRITTEN" in n[4] for n in marked), marked
    faults = _text(chromium, session, "faults")  # each fault with its evidence
    assert "zombie-upload" in faults and "True" in faults and verdict["faults"][0]["detail"][:40] in faults
    _assert_fault_window(chromium, session, cell)
    assert _text(chromium, session, "baseline").startswith("\tfaulted run\tfault-free baseline")


def _assert_fault_window(chromium: Chromium, session: str, cell: Path) -> None:
    """The shaded window on the timeline starts at the fault's inject and ends at its heal, in the history's seconds."""
    history = list(read_history(cell / "history.jsonl"))
    inject = next(op for op in history if op.type == "fault" and op.fields.get("phase") == "inject")
    heal = next(op for op in history if op.type == "fault" and op.fields.get("phase") == "heal")
    layout: dict[str, Any] = chromium.evaluate(
        session, "(d => ({t0: d.layout.meta.t0, shapes: d.layout.shapes}))(document.getElementById('timeline'))"
    )
    (shape,) = layout["shapes"]
    t0 = layout["t0"]
    assert t0 == min(op.start for op in history)
    assert abs(t0 + shape["x0"] - inject.start) < 1e-3 and abs(t0 + shape["x1"] - heal.start) < 1e-3, (shape, inject, heal)
    batches = {op.fields["batch"]: op for op in history if op.type == "batch"}
    assert batches[2].start - 1 <= inject.start <= batches[2].end  # injected while its trigger batch ran, as the timeline shows


def test_matrix_report(chromium: Chromium, v1_matrix: Path, tmp_path: Path) -> None:
    doc = json.loads((v1_matrix / "matrix.json").read_text())
    (run,) = [r for r in doc["runs"] if r["cell"] == CELL]
    session, plots = _open(chromium, v1_matrix / "report.html", tmp_path / "matrix-report.png")
    assert set(plots) == {"wall"}
    verdict = _text(chromium, session, "verdict")
    assert verdict.startswith("Matrix quick: PASS") and "V1 positive control caught" in verdict, verdict
    cell = chromium.evaluate(
        session, "(td => [td.className, td.innerText, td.querySelector('a').href])(document.querySelector('#verdict-table td.invalid'))"
    )
    assert cell[:2] == ["invalid", "s1 INVALID"] and cell[2] == (v1_matrix / CELL / "report.html").as_uri()
    rows = {r.split("\t")[0]: r.split("\t") for r in _text(chromium, session, "cells").splitlines()[1:]}
    assert set(rows) == {r["cell"] for r in doc["runs"]}
    assert rows[CELL][3:8] == [
        str(run["faults_fired"]),
        *(str(run["observed"][k]) for k in ("speculative_attempts", "task_retries", "driver_restarts", "batch_reruns")),
    ]
    assert all(rows[r["cell"]][-1] == "removed (valid)" for r in doc["runs"] if r["valid"] is True)
    assert run["observed"]["speculative_attempts"] >= 1  # the zombie is a speculative copy


def test_load_section_from_a_series(chromium: Chromium, v1_matrix: Path, tmp_path: Path) -> None:
    """Issue 15 writes load/series.jsonl; here a hand-made one over the real experiment's time span."""
    cell = tmp_path / CELL
    shutil.copytree(v1_matrix / CELL, cell, symlinks=True)
    history = list(read_history(cell / "history.jsonl"))
    t0, t1 = min(op.start for op in history), max(op.end or op.start for op in history)
    rows = [
        {
            "t": t,
            "requests_per_s": 50.0,
            "failures_per_s": 0.0,
            "acknowledged": 50 * i,
            "committed": 40 * i,
            "ingest_to_commit_ms": {"p50": 800, "p95": 1500, "p99": 2100},
        }
        for i, t in enumerate(range(int(t0), int(t1) + 1))
    ]
    (cell / "load").mkdir()
    (cell / "load" / "series.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = write_report(cell, tmp_path / "with-load.html")
    session, plots = _open(chromium, report, tmp_path / "load-report.png")
    assert plots["load"] == 7 * len(rows)  # seven series, one point per row
    windows = chromium.evaluate(session, "document.getElementById('load').layout.shapes.map(s => [s.x0, s.x1])")
    inject = next(op for op in history if op.type == "fault" and op.fields.get("phase") == "inject")
    assert len(windows) == 3 and len({tuple(w) for w in windows}) == 1  # the fault window, shaded on each of the three rows
    assert abs(windows[0][0] - (inject.start - t0)) < 1e-3


def test_a_run_in_progress_is_reported_as_such(chromium: Chromium, v2_run: Path, tmp_path: Path) -> None:
    """The real run's records with its event log reopened, as they were while it ran."""
    run = tmp_path / "run"
    shutil.copytree(v2_run, run, symlinks=True)
    (run / "report.html").unlink()
    (log,) = (run / "events").iterdir()
    log.rename(log.with_name(log.name + ".inprogress"))
    session, _ = _open(chromium, write_report(run), tmp_path / "in-progress.png")
    assert _text(chromium, session, "in-progress").startswith("in progress: Spark's event log is still open")
    assert _text(chromium, session, "verdict") == "Verdict: not judged yet"
