"""`statebed rewind` holds the checkpoint's lock: a second rewind or undo is refused naming the holder
(exit 2, nothing changed); a lock whose holder died is taken over and its journal finished."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import run_cli, tree_hash

from statebed_base.errors import CheckpointLockedError
from statebed_base.procfs import stat
from statebed_store import failpoints
from statebed_store.checkpoint_lock import LOCK_NAME, Holder, lock_checkpoint
from statebed_store.failpoint_control import Control

Capsys = pytest.CaptureFixture[str]
POINT = "rewind.move.after"


def copy(native: dict[str, Path], spark: str, query: str, tmp_path: Path) -> Path:
    root = tmp_path / query
    shutil.copytree(native[spark] / query, root)
    return root


def wait_for(what: str, check: Callable[[], Any], proc: subprocess.Popen[str], timeout: float = 60.0) -> Any:
    """Poll a condition the process under test makes true (a file it writes), failing fast if it exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def held_rewind(root: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], Control]:
    """A real `statebed rewind` stopped by a failpoint hold right after its first move, holding the lock."""
    control = Control(tmp_path / "fp" / "control.json")
    env = {**os.environ, "STATEBED_FAILPOINTS": f"{POINT}=1*hold(600000)", failpoints.CONTROL_ENV: str(control.path)}
    cmd = [sys.executable, "-m", "statebed_cli.main", "rewind", str(root), "--to-batch", "2", "--json"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(
        "the hold after the first move",
        lambda: any(f.get("failpoint") == POINT and f.get("pid") == proc.pid for f in control.firings()),
        proc,
    )
    return proc, control


def test_a_second_rewind_or_undo_is_refused_while_one_runs(capsys: Capsys, native: dict[str, Path], tmp_path: Path) -> None:
    root = copy(native, "4.3.0", "agg", tmp_path)
    first, control = held_rewind(root, tmp_path)
    try:
        holder = Holder.parse((root / LOCK_NAME).read_bytes())
        assert holder is not None and holder.pid == first.pid and holder.running() and holder.purpose == "rewind --to-batch 2"
        during = tree_hash(root)
        for argv in (["--to-batch", "3"], ["--undo"], ["--to-batch", "2"]):
            code, out, err = run_cli(capsys, "rewind", str(root), *argv)
            assert code == 2 and out == "" and err.count("\n") == 1, (argv, err)
            assert f"{root / LOCK_NAME}: held by pid {first.pid}" in err and "rewind --to-batch 2" in err
        assert tree_hash(root) == during  # refused before touching anything
        control.release(POINT)
        out, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    journal = json.loads((root / json.loads(out)["backup"] / "journal.json").read_text())
    assert journal["status"] == "done" and not (root / LOCK_NAME).exists()  # released
    code, _, err = run_cli(capsys, "rewind", str(root), "--undo")  # free again
    assert code == 0, err


def test_the_lock_of_a_killed_rewind_is_taken_over_and_its_journal_finished(
    capsys: Capsys, native: dict[str, Path], tmp_path: Path
) -> None:
    root = copy(native, "4.1.4", "agg", tmp_path)
    first, _ = held_rewind(root, tmp_path)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    left = Holder.parse((root / LOCK_NAME).read_bytes())
    assert left is not None and left.pid == first.pid and not left.running()  # the dead holder's record stays
    (journal,) = (root / "_rewind").glob("*/journal.json")
    assert json.loads(journal.read_text())["status"] == "moving"
    code, _, err = run_cli(capsys, "rewind", str(root), "--to-batch", "2")
    assert code == 0, err
    assert f"took over the lock left by pid {first.pid}" in err and "no longer running" in err
    assert "completed the interrupted rewind" in err
    assert json.loads(journal.read_text())["status"] == "done" and not (root / LOCK_NAME).exists()


def test_a_live_process_holding_the_lock_is_named_and_its_death_frees_it(capsys: Capsys, native: dict[str, Path], tmp_path: Path) -> None:
    """The lock held by another process (a `sleep` that inherited it) and its record naming it."""
    root = copy(native, "4.3.0", "agg", tmp_path)
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    holder = subprocess.Popen(["sleep", "60"], pass_fds=[fd])
    try:
        st = stat(holder.pid)
        assert st is not None
        os.write(fd, json.dumps({"pid": holder.pid, "start_time": st[2], "host": "h", "purpose": "cleanup", "since": "now"}).encode())
        os.close(fd)  # only the sleeper holds it now
        digest = tree_hash(root)
        code, _, err = run_cli(capsys, "rewind", str(root), "--to-batch", "3")
        assert code == 2 and f"held by pid {holder.pid}" in err and f"start time {st[2]}" in err and tree_hash(root) == digest
        with pytest.raises(CheckpointLockedError, match=f"pid {holder.pid}"):
            lock_checkpoint(root, "cleanup")  # what `statebed cleanup` will take
    finally:
        holder.kill()
        holder.wait()
    code, _, err = run_cli(capsys, "rewind", str(root), "--to-batch", "3")  # its holder is gone: taken over
    assert code == 0 and f"took over the lock left by pid {holder.pid}" in err, err


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink"])
def test_something_else_at_the_lock_path_is_an_error_never_a_hang(
    capsys: Capsys, native: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    root = copy(native, "4.3.0", "agg", tmp_path)
    path = root / LOCK_NAME
    {"fifo": os.mkfifo, "directory": os.mkdir, "symlink": lambda p: os.symlink(tmp_path / "elsewhere", p)}[kind](path)
    digest = tree_hash(root)
    code, _, err = run_cli(capsys, "rewind", str(root), "--to-batch", "3")
    assert code == 2 and err.count("\n") == 1 and f"{path}: is not a regular file" in err and tree_hash(root) == digest
    assert not (tmp_path / "elsewhere").exists()


def test_the_lock_is_exclusive_between_two_holders_in_one_process(tmp_path: Path) -> None:
    with lock_checkpoint(tmp_path, "rewind --undo") as held:
        assert held.previous is None
        with pytest.raises(CheckpointLockedError, match=f"held by pid {os.getpid()}.*'rewind --undo'"):
            lock_checkpoint(tmp_path, "cleanup")  # flock(2) locks per open file: a second open in this process is refused too
    assert not (tmp_path / LOCK_NAME).exists()
    with lock_checkpoint(tmp_path, "cleanup") as again:
        assert again.previous is None
