"""Running `statebed run` as a real subprocess (its own driver JVM) and waiting on what it does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from statebed_job.cluster import StandaloneCluster
from statebed_model.rundir import RunDir

STATEBED = [sys.executable, "-m", "statebed_cli.main"]
# What src/statebed_job/task.py logs (executor stderr) when `--slow-task`'s attempt 0 has
# committed and starts its sleep: the one moment a test knows which executor runs which task.
SLOW_TASK_MARKER = "slow task (--slow-task): sleeping after commit"
T = TypeVar("T")


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "STATEBED_FAILPOINTS"}
    env["STATEBED_LOG_LEVEL"] = "WARNING"  # forwarded to executors: the slow-task marker is a warning
    env.update(extra or {})
    return env


def statebed(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*STATEBED, *args], capture_output=True, text=True, timeout=timeout, env=_env(env))


def start_statebed(*args: str) -> subprocess.Popen[str]:
    """`statebed ...` in the background; the caller waits on it (`wait_until`, `communicate`)."""
    return subprocess.Popen([*STATEBED, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def wait_until(proc: subprocess.Popen[str], what: str, ready: Callable[[], T | None], timeout: float = 300) -> T:
    """Poll `ready` until it returns a value; the timeout only guards against a stalled run."""
    deadline = time.monotonic() + timeout
    while (value := ready()) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"run ended or stalled before {what}: {stop(proc)[1][-3000:]}")
        time.sleep(0.1)
    return value


def stop(proc: subprocess.Popen[str], timeout: float = 90) -> tuple[str, str]:
    """End a background run the way Ctrl-C would (it stops its cluster), then for sure; returns its output."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def finish(proc: subprocess.Popen[str], timeout: float = 420) -> tuple[str, str]:
    """Wait for a background run to end by itself (stopped if it does not within `timeout`)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc)
        raise


def summary(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON summary `statebed run --json` prints last on stdout."""
    return summary_of(proc.stdout)


def summary_of(out: str) -> dict[str, Any]:
    start = out.rfind("\n{")
    return json.loads(out[start + 1 :] if start >= 0 else out)  # type: ignore[no-any-return]


def timings(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The last timing record of each batch, by batch id."""
    return {t["batch"]: t for t in RunDir(run_dir).timings()}


def slow_attempt_host(run_dir: Path) -> str | None:
    """The host whose executor has logged the slow-task marker, once it has (None before)."""
    state = StandaloneCluster(run_dir / "cluster").read_state()
    for w in state.workers if state is not None else []:
        for stderr in Path(w["work_dir"]).glob("app-*/*/stderr"):
            if SLOW_TASK_MARKER in stderr.read_text(errors="replace"):
                return str(w["host"])
    return None


def executor_pid(run_dir: Path, host: str) -> int:
    pids = [e["pid"] for e in StandaloneCluster(run_dir / "cluster").executors() if e["host"] == host]
    assert len(pids) == 1, f"expected one executor JVM on {host}, found {pids}"
    return int(pids[0])


def changelogs_of(run_dir: Path, partition: int, version: int) -> list[str]:
    """The changelogs of one version of a partition in the run's local checkpoint: one per attempt that committed."""
    d = run_dir / "checkpoint" / "state" / "0" / str(partition)
    return sorted(f.name for f in d.glob(f"{version}_*.changelog")) if d.is_dir() else []
