"""`statebed report DIR [-o FILE]`: one self-contained HTML report of a run, a chaos experiment
or a chaos matrix (opened with no network: plotly.js, styles and data are inline).

Exit codes: 0 the report was written (also for a run still in progress: the report says so);
2 unusable input: an -o that exists and is not a regular file (a device, FIFO, socket,
directory or symlink is never replaced), no such directory, a directory that is not
statebed's, or a finished run or matrix missing a file it must have (one line naming the file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from statebed_base.log import get_logger
from statebed_report import write_report
from statebed_verify import Composite

from ..common import EXIT_OK, output_file

log = get_logger("report")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="write a self-contained HTML report of a run, experiment or matrix", description=__doc__)
    p.add_argument("directory", metavar="RUN_DIR|MATRIX_DIR", help="a `statebed run` directory, a chaos experiment's or a matrix's")
    p.add_argument("-o", "--output", metavar="FILE", type=Path, default=None, help="where the report goes (default: DIR/report.html)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    print(write_report(args.directory, output_file(args.output, "-o")))
    return EXIT_OK


def default_report(command: str, directory: str | Path, composite: Composite | None = None) -> Path | None:
    """The report a command writes at its end: a failure is one warning line, never the command's outcome."""
    try:
        return write_report(directory, composite=composite)
    except Exception as e:  # the command's verdict and exit code stand whatever the report does
        log.debug("report failed", exc_info=True)
        print(f"statebed {command}: warning: no report written for {directory}: {type(e).__name__}: {e}", file=sys.stderr)
        return None
