"""What a report is made of, read from a run, experiment or matrix directory.

Three kinds of directory, told apart by the file that marks them:

    run.json      a `statebed run` directory (also an experiment's baseline/ and faulted/)
    verdict.json  a finished chaos experiment (experiment.yaml alone: one still running)
    matrix.json   a finished chaos matrix (cell directories alone: one still running)

A run still in progress is reported as such (`in_progress` says why we think so). A
directory that is none of these, or one that claims to be finished but lacks a file its
kind must have, is unusable input: a `UsageError` naming the missing or unreadable file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from statebed_base.errors import NotRegularFileError, StatebedError, UsageError
from statebed_base.localfs import check_regular, read_regular
from statebed_model.attempts import AttemptRecord, read_attempts
from statebed_model.eventlog import EventLog, read_event_log
from statebed_model.experimentdir import ExperimentDir, MatrixDir, read_object
from statebed_model.rundir import RunDir, RunInfo
from statebed_store.location import is_remote
from statebed_store.naming import COMMITS_DIR, CRC_SUFFIX
from statebed_verify.history import History, Op, read_history
from statebed_verify.history_build import add_run_ops

from .record_types import LOAD_VERDICT_FIELDS, MATRIX_FIELDS, RUN_FIELDS, VERDICT_FIELDS, check_types

__all__ = ["ExperimentRecords", "MatrixRecords", "RunRecords", "read_directory", "read_run"]


@dataclass
class RunRecords:
    """One run directory: what ran, its batch and task-attempt ops, its timing records."""

    root: Path
    info: RunInfo
    ops: list[Op]
    timings: list[dict[str, Any]]
    attempts: list[AttemptRecord]
    events: EventLog
    in_progress: str | None = None
    notes: list[str] = field(default_factory=list)
    load_verdict: dict[str, Any] | None = None  # `statebed load run`'s load/verdict.json: its verdict includes the accounting

    @property
    def run(self) -> RunDir:
        return RunDir(self.root)


@dataclass
class ExperimentRecords:
    """A chaos experiment directory: its verdict (None while running), history and both runs."""

    root: Path
    experiment: dict[str, Any]
    verdict: dict[str, Any] | None
    history: list[Op]
    faulted: RunRecords | None
    baseline: RunRecords | None
    in_progress: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class MatrixRecords:
    """A matrix directory: `matrix.json` (None while running) and the cell directories present."""

    root: Path
    doc: dict[str, Any] | None
    cells: list[Path]
    in_progress: str | None = None


class _Collected(History):
    """A history kept in memory: the ops `add_run_ops` derives for a run without a history file."""

    def __init__(self) -> None:
        super().__init__(os.devnull)
        self.collected: list[Op] = []

    def append(self, op: Op) -> None:
        self.collected.append(op)


def read_directory(path: str | os.PathLike[str]) -> RunRecords | ExperimentRecords | MatrixRecords:
    """The records of whatever statebed directory `path` is; UsageError naming what is missing."""
    root = Path(path).absolute()
    if not root.is_dir():
        raise UsageError(f"{root}: no such directory")
    if _present(MatrixDir(root).record):
        return read_matrix(root)
    if _present(ExperimentDir(root).experiment) and not _present(root / "run.json"):  # a load run keeps both: it is a run
        return read_experiment(root)
    if _present(root / "run.json"):
        return read_run(root)
    if MatrixDir(root).cells():
        return read_matrix(root)
    raise UsageError(f"{root}: not a statebed run, experiment or matrix directory (no run.json, experiment.yaml or matrix.json)")


def _present(path: Path) -> bool:
    """Anything by that name, a FIFO or a symlink loop too: its read then names it."""
    return os.path.lexists(path)


def read_json(path: Path, fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON object from a file; UsageError naming the file when it is missing or not one
    (or, given `fields`, naming a field whose type the report cannot use: see record_types)."""
    doc = read_object(path)
    if fields is not None:
        check_types(doc, fields, str(path))
    return doc


def read_run(root: Path, history: list[Op] | None = None) -> RunRecords:
    """A run directory; `history` (an experiment's) supplies the ops, those it lacks are derived here."""
    run = RunDir(root)
    info = run.read_info()
    check_types(info.to_json(), RUN_FIELDS, run.info_path)  # before anything uses a field
    notes: list[str] = []
    in_progress = _run_in_progress(root)
    if in_progress is None:
        _require_finished(run, info)
    exp_dir = ExperimentDir(root)  # a load run is one too: its own history (its faults, its driver), load/verdict.json
    if history is None and exp_dir.history.exists():
        history = _history(exp_dir.history)
    ops = list(history or [])
    if not any(op.type in ("batch", "task-attempt") for op in ops):  # not added yet (a run in progress) or no history
        collected = _Collected()
        notes += add_run_ops(collected, run)
        ops += collected.collected
    try:
        events = read_event_log(run.events)
    except StatebedError as e:
        events = EventLog()
        notes.append(f"event log: {e}")
    try:
        timings = run.timings()
        attempts = read_attempts(run.root)
    except StatebedError as e:
        raise UsageError(f"{e} (half-written?)") from None
    load_verdict = read_json(exp_dir.load_verdict, LOAD_VERDICT_FIELDS) if exp_dir.load_verdict.exists() else None
    return RunRecords(root, info, ops, timings, attempts, events, in_progress, notes, load_verdict)


def _history(path: Path) -> list[Op]:
    try:
        check_regular(path)  # a FIFO would block the reader
        return list(read_history(path))
    except StatebedError as e:
        raise UsageError(f"{e} (half-written?)") from None


def _run_in_progress(root: Path) -> str | None:
    """Why the run looks unfinished: its newest Spark event log still open, or no batch recorded yet.

    (Only the newest: a driver that died leaves its log open, and a resumed run writes a new one.)"""
    events = root / "events"
    names = [f for f in events.iterdir() if not f.name.startswith(".") and not f.name.endswith(CRC_SUFFIX)] if events.is_dir() else []
    logs = sorted(names, key=lambda f: f.stat().st_mtime)
    if logs and logs[-1].name.endswith(".inprogress"):
        return "in progress: Spark's event log is still open (or the driver died before closing it)"
    if not events.is_dir() and not (root / "timings").is_dir():
        return "in progress: no batch has run yet"
    return None


def _require_finished(run: RunDir, info: RunInfo) -> None:
    """A run whose commit log names batches has their timing records (and, in statebed modes, attempt
    records): without them it is half-written. (A run stopped before its first commit has neither.)"""
    loc = run.checkpoint_location(info)
    commits = Path(loc) / COMMITS_DIR
    if is_remote(loc) or not commits.is_dir() or not any(p.name.isdigit() for p in commits.iterdir()):
        return
    for name in ["timings"] + ([] if info.format.native else ["attempts"]):
        if not (run.root / name).is_dir():
            raise UsageError(f"{run.root / name}: missing (the commit log {commits} names committed batches)")


def read_experiment(root: Path) -> ExperimentRecords:
    d = ExperimentDir(root)
    experiment = _read_yaml(d.experiment)
    verdict = read_json(d.verdict, VERDICT_FIELDS) if d.verdict.exists() else None
    in_progress = None if verdict is not None else "in progress: no verdict.json yet (or the harness was killed)"
    if verdict is not None and not d.history.exists():
        raise UsageError(f"{d.history}: missing (verdict.json says the experiment finished)")
    history = _history(d.history)
    notes: list[str] = []
    faulted = _optional_run(d.faulted, history, notes)
    base = _baseline_dir(d, verdict)
    baseline = _optional_run(base, _driver_ops(ExperimentDir(base.parent).baseline_history, notes), notes)
    return ExperimentRecords(root, experiment, verdict, history, faulted, baseline, in_progress, notes)


def _baseline_dir(d: ExperimentDir, verdict: dict[str, Any] | None) -> Path:
    """The baseline this experiment was compared with (a matrix shares one between cells)."""
    named = ((verdict or {}).get("checks") or {}).get("baseline", {}).get("run_dir")
    return Path(named) if isinstance(named, str) else d.baseline


def _driver_ops(path: Path, notes: list[str]) -> list[Op]:
    """The baseline's driver processes (its history holds nothing else): they align it with the faulted run."""
    try:
        check_regular(path)
        return [op for op in read_history(path) if op.type == "driver"]
    except StatebedError as e:
        notes.append(f"baseline history: {e}")
        return []


def _optional_run(root: Path, history: list[Op] | None, notes: list[str]) -> RunRecords | None:
    if not (root / "run.json").exists():
        notes.append(f"{root}: no run (no run.json)")
        return None
    return read_run(root, history)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(read_regular(path).decode())
    except NotRegularFileError as e:
        raise UsageError(str(e)) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UsageError(f"{path}: unreadable ({type(e).__name__})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not an experiment file")
    return doc


def read_matrix(root: Path) -> MatrixRecords:
    matrix = MatrixDir(root)
    path = matrix.record
    if not path.exists():
        return MatrixRecords(root, None, matrix.cells(), "in progress: no matrix.json yet (or the matrix was killed)")
    doc = read_json(path, MATRIX_FIELDS)
    runs = doc.get("runs")
    if not isinstance(runs, list) or not isinstance(doc.get("summary"), dict):
        raise UsageError(f"{path}: not a matrix record (needs runs and summary)")
    for r in runs:
        kept = r.get("run_dir") if isinstance(r, dict) else None
        if isinstance(kept, str) and not ExperimentDir(kept).verdict.exists():
            raise UsageError(f"{ExperimentDir(kept).verdict}: missing (matrix.json lists the cell as kept)")
    return MatrixRecords(root, doc, matrix.cells())
