"""Expensive real-Spark scenarios run once per test session and read by every test that needs them.

`quick_matrix`: `statebed chaos matrix --quick --json`, the suite's one run of the quick
matrix (its V1 positive control zombie-upload × sample3 × V1 kept with its report; the V2 cells,
valid, removed by the matrix). `tests/chaos/test_matrix.py` judges its verdicts and
`tests/report/test_report_browser.py` opens its reports. Tests only read a shared run (one that
writes works on a copy): its directory's digest is taken when the run ends and checked again at
session end, so a test that changed it fails the session.

`local_v2_run`: `statebed run --json` of count on V2 in local mode (3 partitions, 4 batches),
with its report: judged by `tests/job/test_run_local.py`, the checkpoint a second run must
refuse in its bad-input test, opened by the report browser tests, and (copied) damaged by the
partitioner test.

`baselines_dir`: the session's fault-free baselines (`statebed chaos ... --baselines DIR`), one
per baseline key: an experiment whose key a matrix cell shares reuses that cell's baseline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import tree_hash

STATEBED = str(Path(sys.executable).parent / "statebed")


@dataclass(frozen=True)
class SharedRun:
    """A finished CLI run: its output directory, exit code, stdout parsed as JSON, stderr."""

    out: Path
    returncode: int
    doc: Any
    stderr: str


def run_statebed(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it; on a timeout (or Ctrl-C) SIGINT lets it stop what it started."""
    cmd = [STATEBED, *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except BaseException:
            child.send_signal(signal.SIGINT)
            child.communicate(timeout=120)
            raise
    return subprocess.CompletedProcess(cmd, child.returncode, out, err)


def _read_only(out: Path, run: SharedRun) -> Iterator[SharedRun]:
    digest = tree_hash(out)
    yield run
    assert tree_hash(out) == digest, f"a test changed the shared run {out}: tests must work on a copy"


@pytest.fixture(scope="session")
def baselines_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's baselines cache directory (see the module's docstring)."""
    return tmp_path_factory.mktemp("baselines")


@pytest.fixture(scope="session")
def quick_matrix(tmp_path_factory: pytest.TempPathFactory, baselines_dir: Path) -> Iterator[SharedRun]:
    """The quick matrix on real Spark, once per session (read-only: see the module's docstring)."""
    out = tmp_path_factory.mktemp("quick-matrix") / "m"
    proc = run_statebed("chaos", "matrix", "--quick", "--json", "--out", str(out), "--baselines", str(baselines_dir))
    print(f"quick matrix: exit {proc.returncode}\n{proc.stderr}")
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"the quick matrix printed no JSON (exit {proc.returncode}): {proc.stderr[-3000:]}")
    yield from _read_only(out, SharedRun(out, proc.returncode, doc, proc.stderr))


LOCAL_V2_ARGS = ("--workload", "count", "--batches", "4", "--rows-per-batch", "3000", "--keyspace", "300", "--json")


@pytest.fixture(scope="session")
def local_v2_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedRun]:
    """A small V2 `statebed run` in local mode, once per session (read-only: see the module's docstring)."""
    out = tmp_path_factory.mktemp("local-v2") / "run"
    proc = run_statebed("run", "--run-dir", str(out), *LOCAL_V2_ARGS, timeout=600)
    start = proc.stdout.rfind("\n{")
    try:
        doc = json.loads(proc.stdout[start + 1 :] if start >= 0 else proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"the local V2 run printed no JSON summary (exit {proc.returncode}): {proc.stderr[-3000:]}")
    yield from _read_only(out, SharedRun(out, proc.returncode, doc, proc.stderr))
