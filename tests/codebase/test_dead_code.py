"""No dead code in the packages: vulture (pinned in the `test` extra) finds nothing at 80% confidence.

`vulture` alone (settings in pyproject.toml, `[tool.vulture]`) also runs clean at its default 60%.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_layering import PACKAGES as LAYERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = list(LAYERS.values())  # every package, as the layering test knows them


def test_vulture_finds_no_dead_code() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vulture", "--min-confidence", "80", *PACKAGES], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_vulture_would_see_dead_code(tmp_path: Path) -> None:
    """The check can fail: an unreachable line is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f() -> int:\n    return 1\n    print('never')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "vulture", "--min-confidence", "80", str(bad)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 3 and "unreachable code" in proc.stdout
