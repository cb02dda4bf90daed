"""The experiment and matrix directories: every name in them, and each file written whole.

    <experiment>/                 a chaos experiment (`statebed chaos run`) or a load run
      experiment.yaml             the experiment as run: realised fault list, seed (replays it)
      verdict.json                the verdict (a chaos experiment; absent while it runs)
      history.jsonl               every fault, driver process, batch and task attempt
      baseline-history.jsonl      the baseline's driver processes
      baseline/  faulted/         the fault-free and the faulted run directories (`RunDir`)
      logs/                       each process's stdout and stderr
      processes.json              every process recorded below the drivers (the leak check)
      infra/                      the storage services (MinIO, the proxy)
      load/                       a load run's: summary.json, verdict.json, series.jsonl, stop, ...
      report.html                 the report

    <matrix>/
      matrix.json                 `MatrixResult.to_json()`, written at the end (absent while running)
      <cell>/                     one experiment directory per cell

A run's failpoint control file is `<run>/failpoints/control.json` (`control_file`).
Every file here is published by the store's one atomic writer: a reader (the report, a
replay) sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from statebed_base.errors import CorruptFileError, NotRegularFileError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_base.localfs import append_line, atomic_write, read_regular

__all__ = [
    "CONTROL_FILE",
    "EXPERIMENT_FILE",
    "MATRIX_FILE",
    "REPORT_FILE",
    "VERDICT_FILE",
    "ExperimentDir",
    "MatrixDir",
    "control_file",
    "read_object",
    "write_json",
]

EXPERIMENT_FILE = "experiment.yaml"
VERDICT_FILE = "verdict.json"
HISTORY_FILE = "history.jsonl"
MATRIX_FILE = "matrix.json"
JOURNAL_FILE = "cells.jsonl"  # one line per finished cell, in the order they finished (`--resume`)
REPORT_FILE = "report.html"
CONTROL_FILE = Path("failpoints") / "control.json"


def control_file(run_root: str | os.PathLike[str]) -> Path:
    """A run's failpoint control file (what STATEBED_FAILPOINTS_CONTROL names for its driver)."""
    return Path(run_root).absolute() / CONTROL_FILE


def write_json(path: Path, doc: Any, *, indent: int | None = 2) -> None:
    """`doc` as JSON (one trailing newline), published whole (`atomic_write`)."""
    atomic_write(path, (json.dumps(doc, indent=indent, default=str) + "\n").encode())


def read_object(path: Path) -> dict[str, Any]:
    """A JSON object from a file; UsageError naming the file when it is missing or not one."""
    try:
        data = read_regular(path)
    except NotRegularFileError as e:
        raise UsageError(str(e)) from None
    except FileNotFoundError:
        raise UsageError(f"{path}: missing") from None
    except OSError as e:
        raise UsageError(f"{path}: unreadable ({e.strerror})") from None
    try:
        doc = loads_strict(data, file=str(path), what="contents")
    except CorruptFileError as e:
        raise UsageError(f"{e} (half-written?)") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a JSON object")
    return doc


class ExperimentDir:
    """A chaos experiment's (or a load run's) directory: its names, its files written whole."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()

    def __repr__(self) -> str:
        return f"ExperimentDir({str(self.root)!r})"

    # -- layout ---------------------------------------------------------------------------
    @property
    def experiment(self) -> Path:
        return self.root / EXPERIMENT_FILE

    @property
    def verdict(self) -> Path:
        return self.root / VERDICT_FILE

    @property
    def history(self) -> Path:
        return self.root / HISTORY_FILE

    @property
    def baseline_history(self) -> Path:
        return self.root / "baseline-history.jsonl"

    @property
    def baseline(self) -> Path:
        return self.root / "baseline"

    @property
    def faulted(self) -> Path:
        return self.root / "faulted"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, name: str) -> Path:
        """A process's log stem (`<stem>.out`, `<stem>.err` beside it)."""
        return self.logs / name

    @property
    def processes(self) -> Path:
        return self.root / "processes.json"

    @property
    def infra(self) -> Path:
        return self.root / "infra"

    @property
    def report(self) -> Path:
        return self.root / REPORT_FILE

    @property
    def load(self) -> Path:
        return self.root / "load"

    @property
    def load_verdict(self) -> Path:
        return self.load / VERDICT_FILE

    @property
    def load_summary(self) -> Path:
        return self.load / "summary.json"

    @property
    def series(self) -> Path:
        return self.load / "series.jsonl"

    def reproduce(self, seed: object) -> str:
        """The command line that replays this experiment."""
        return f"statebed chaos run {self.experiment} --seed {seed}"

    # -- files ----------------------------------------------------------------------------
    def write_experiment(self, text: str) -> None:
        atomic_write(self.experiment, text.encode())

    def write_verdict(self, doc: dict[str, Any]) -> None:
        write_json(self.verdict, doc)

    def read_verdict(self) -> dict[str, Any]:
        return read_object(self.verdict)

    def write_load(self, summary: dict[str, Any], verdict: dict[str, Any]) -> None:
        """A load run's summary and verdict (`load/`): the verdict adds the reasons and checks."""
        write_json(self.load_summary, summary)
        write_json(self.load_verdict, verdict, indent=None)

    def write_processes(self, procs: list[dict[str, Any]]) -> None:
        write_json(self.processes, procs)

    def add_processes(self, procs: list[dict[str, Any]]) -> None:
        """Every process recorded below a driver, kept for the leak check (after stop, none may live)."""
        known = json.loads(read_regular(self.processes)) if self.processes.exists() else []
        self.write_processes(known + procs)


class MatrixDir:
    """A chaos matrix's directory: `matrix.json` and one experiment directory per cell."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()

    def __repr__(self) -> str:
        return f"MatrixDir({str(self.root)!r})"

    @property
    def record(self) -> Path:
        return self.root / MATRIX_FILE

    @property
    def report(self) -> Path:
        return self.root / REPORT_FILE

    def cell(self, name: str) -> ExperimentDir:
        return ExperimentDir(self.root / name)

    def cells(self) -> list[Path]:
        """The cell directories present (each holds an experiment.yaml)."""
        return sorted(p for p in self.root.iterdir() if p.is_dir() and (p / EXPERIMENT_FILE).exists())

    def write_record(self, doc: dict[str, Any]) -> None:
        write_json(self.record, doc)

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL_FILE

    def append_finished(self, doc: dict[str, Any]) -> None:
        """One finished cell's record, appended at once: an interrupted matrix keeps every finished cell."""
        append_line(self.journal, json.dumps(doc, sort_keys=True).encode())

    def finished(self) -> dict[str, dict[str, Any]]:
        """Cell name -> its record, from the journal (a torn last line, from a kill mid-write, is skipped)."""
        if not self.journal.exists():
            return {}
        out = {}
        for line in read_regular(self.journal).decode("utf-8", "replace").splitlines():
            try:
                doc = loads_strict(line, file=str(self.journal), what="matrix journal line")
            except CorruptFileError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get("cell"), str):
                out[doc["cell"]] = doc
        return out
