"""`make report-screenshots`: regenerate the report screenshots (README, docs/cli.md) in `docs/images/`.

Runs a two-cell chaos matrix (zombie-upload on sample3, V1 and V2, cells kept: about 10 minutes
on two cores), renders the report of each cell and of the matrix, and photographs them in
headless Chromium: a V2-valid run, a V1-invalid run (the positive control) and the matrix.

    python tests/report/screenshots.py [OUT_DIR] [--matrix DIR]

OUT_DIR defaults to docs/images; with --matrix, a matrix directory this script made before is
reused (only the reports are rendered again), else the matrix runs in a temporary directory.
`--v2 DIR --v1 DIR --matrix DIR` photograph given run, experiment and matrix directories instead
(e.g. the ones `tests/report/test_report_browser.py` leaves in pytest's basetemp).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from browser import Chromium

from statebed_report import write_report

CELLS = {"report-run-v2-valid.png": "zombie-upload-sample3-v2-s1", "report-run-v1-invalid.png": "zombie-upload-sample3-v1-s1"}


def _matrix(out: Path) -> None:
    statebed = str(Path(sys.executable).parent / "statebed")
    cmd = [statebed, "chaos", "matrix", "--quick", "--faults", "zombie-upload", "--formats", "v1,v2", "--keep", "--out", str(out)]
    code = subprocess.run(cmd, check=False).returncode
    if code != 0:
        raise SystemExit(f"screenshots: the matrix exited {code} (expected 0: V2 valid, V1 caught); kept in {out}")


def shoot(matrix: Path, out: Path, v2: Path | None = None, v1: Path | None = None) -> None:
    dirs = dict(zip(CELLS, (v2 or matrix / CELLS["report-run-v2-valid.png"], v1 or matrix / CELLS["report-run-v1-invalid.png"])))
    pages = {name: write_report(d) for name, d in dirs.items()}
    pages["report-matrix.png"] = write_report(matrix)
    out.mkdir(parents=True, exist_ok=True)
    with Chromium() as browser:
        for name, page in pages.items():
            session, load = browser.open(page)
            if load.errors or load.external_requests:
                raise SystemExit(f"screenshots: {page}: errors {load.errors}, requests {load.external_requests}")
            print(browser.screenshot(session, out / name, max_height=6000))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", type=Path, default=Path("docs/images"))
    p.add_argument("--matrix", type=Path, default=None, help="a matrix directory to reuse (run into it when it does not exist)")
    p.add_argument("--v2", type=Path, default=None, help="a V2-valid run or experiment directory (default: the matrix's V2 cell)")
    p.add_argument("--v1", type=Path, default=None, help="a V1-invalid run or experiment directory (default: the matrix's V1 cell)")
    args = p.parse_args()
    if args.v2 is not None or args.v1 is not None:
        if args.matrix is None:
            raise SystemExit("screenshots: --v2/--v1 need --matrix")
        shoot(args.matrix, args.out, args.v2, args.v1)
        return
    if args.matrix is not None:
        if not (args.matrix / "matrix.json").exists():
            _matrix(args.matrix)
        shoot(args.matrix, args.out)
        return
    with tempfile.TemporaryDirectory(prefix="statebed-screenshots-") as tmp:
        _matrix(Path(tmp) / "m")
        shoot(Path(tmp) / "m", args.out)


if __name__ == "__main__":
    main()
