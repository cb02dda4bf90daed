"""Self-contained HTML reports of a run or a matrix (`statebed report`).

`write_report(directory)` reads a `statebed run` directory, a chaos experiment's directory or a
matrix directory and writes `report.html` into it (or to `out`): one file, plotly.js, styles
and data inline, nothing fetched when it is opened. Unusable input (a foreign directory, a
finished run missing a file) is a `UsageError` naming the file; a run still in progress gets a
report that says so.
"""

from __future__ import annotations

import os
from pathlib import Path

from statebed_base.errors import StatebedError, StorageError, UsageError
from statebed_base.localfs import atomic_write
from statebed_model.experimentdir import REPORT_FILE, ExperimentDir
from statebed_verify import Composite

from .matrix_report import render_matrix
from .records import MatrixRecords, RunRecords, read_directory
from .run_report import render_run, view_of_experiment, view_of_run

__all__ = ["REPORT_NAME", "write_report"]

REPORT_NAME = REPORT_FILE


def write_report(
    directory: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, *, composite: Composite | None = None
) -> Path:
    """Render the report of `directory` into `out` (default `<directory>/report.html`); returns its path.

    `composite`: a plain run's verdicts when the caller already has them (`statebed run`)."""
    rec = read_directory(directory)
    target = Path(out).absolute() if out is not None else rec.root / REPORT_NAME
    if isinstance(rec, MatrixRecords):
        notes = _cell_reports(rec)
        text = render_matrix(rec, target, notes)
    elif isinstance(rec, RunRecords):
        text = render_run(view_of_run(rec, composite))
    else:
        text = render_run(view_of_experiment(rec))
    _write(target, text)
    return target


def _cell_reports(rec: MatrixRecords) -> list[str]:
    """Write the report of every kept cell that has none yet (the matrix links to them)."""
    notes = []
    for cell in rec.cells:
        if ExperimentDir(cell).report.exists():
            continue
        try:
            write_report(cell)
        except StatebedError as e:
            notes.append(f"no report for {cell.name}: {e}")
    return notes


def _write(target: Path, text: str) -> None:
    """Whole or not at all (the store's one atomic writer): a reader never sees half a report."""
    try:
        atomic_write(target, text.encode("utf-8"))
    except StorageError as e:
        raise UsageError(f"{target}: cannot write the report ({e})") from None
