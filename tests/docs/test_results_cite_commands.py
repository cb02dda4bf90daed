"""Results cite the command, the date and the machine kind, never a local path: a run directory
named by an absolute path exists only on the machine that ran it (`/work/...`, `/tmp/...`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = [ROOT / "docs" / "results.md", ROOT / "benchmarks" / "README.md"]
LOCAL = re.compile(r"(?<![\w.~-])/(?:work|root|home|tmp/sb|tmp/pytest-of-\w+)/[^\s`)]*")


def local_paths(text: str) -> list[str]:
    return LOCAL.findall(text)


def test_the_scan_sees_a_local_run_directory() -> None:
    """Positive control: the line the review found, and a path that is a setting, not a result."""
    assert local_paths("Run directory kept: `/work/bench-runs/native-matrix/x-s1`") == ["/work/bench-runs/native-matrix/x-s1"]
    assert local_paths("one hostPath `/tmp/statebed-runs` shared") == []


def test_results_name_no_local_path() -> None:
    found = [f"{p.relative_to(ROOT)}: {m}" for p in RESULTS for m in local_paths(p.read_text())]
    assert found == []
