"""`--e2e-state FILE` (tests/e2e_state.py, `make e2e`): a passed test is recorded and skipped by
the next run, a failed one runs again, and a run with nothing left exits 0, not pytest's 5."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from e2e_state import passed_tests

HERE = Path(__file__).resolve().parent


def _pytest(tmp_path: Path, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "e2e_state", "--e2e-state", str(state), "test_t.py"]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_rerun_continues_where_the_last_one_stopped(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # its own rootdir: not this suite's conftest
    flag = tmp_path / "fixed"
    (tmp_path / "test_t.py").write_text(
        "import pathlib, pytest\n"
        "def test_ok(): pass\n"
        f"def test_flaky(): assert pathlib.Path({str(flag)!r}).exists()\n"
        "def test_skipped(): pytest.skip('not here')\n"
    )
    state = tmp_path / "state" / "passed.tsv"
    first = _pytest(tmp_path, state)
    assert first.returncode == 1 and "1 failed, 1 passed, 1 skipped" in first.stdout, first.stdout
    assert set(passed_tests(state)) == {"test_t.py::test_ok"}
    second = _pytest(tmp_path, state)  # test_ok is not run again; the failure and the skip are
    assert second.returncode == 1 and "1 failed, 1 skipped, 1 deselected" in second.stdout, second.stdout
    flag.touch()
    third = _pytest(tmp_path, state)
    assert third.returncode == 0 and "1 passed, 1 skipped, 1 deselected" in third.stdout, third.stdout
    assert set(passed_tests(state)) == {"test_t.py::test_ok", "test_t.py::test_flaky"}
    assert "2 passed so far" in third.stdout
    (tmp_path / "test_t.py").write_text("def test_ok(): pass\ndef test_flaky(): pass\n")
    done = _pytest(tmp_path, state)  # everything passed before: success, not "no tests ran" (exit 5)
    assert done.returncode == 0 and "2 deselected" in done.stdout, done.stdout
    state.write_text(state.read_text() + "test_t.py::test_torn")  # a line cut short by a kill is ignored
    assert set(passed_tests(state)) == {"test_t.py::test_ok", "test_t.py::test_flaky"}


def test_a_relative_state_file_stays_put_when_a_test_changes_directory(tmp_path: Path) -> None:
    """Seen in `make e2e`: a module fixture chdir'd for Spark's scratch files, and the next record
    went to a relative path that no longer existed (INTERNALERROR, the run lost)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "away").mkdir()
    (tmp_path / "test_t.py").write_text(f"import os\ndef test_moves(): os.chdir({str(tmp_path / 'away')!r})\ndef test_after(): pass\n")
    done = _pytest(tmp_path, Path("state") / "passed.tsv")
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr
    assert set(passed_tests(tmp_path / "state" / "passed.tsv")) == {"test_t.py::test_moves", "test_t.py::test_after"}
    assert not (tmp_path / "away" / "state").exists()
