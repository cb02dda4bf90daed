"""Running `statebed run` as a real subprocess (its own driver JVM), and reading Spark's event log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

STATEBED = [sys.executable, "-m", "statebed_cli.main"]


def statebed(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "STATEBED_FAILPOINTS"}
    full_env.update(env or {})
    return subprocess.run([*STATEBED, *args], capture_output=True, text=True, timeout=timeout, env=full_env)


def summary(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON summary `statebed run --json` prints last on stdout."""
    out = proc.stdout
    start = out.rfind("\n{")
    return json.loads(out[start + 1 :] if start >= 0 else out)


def task_events(run_dir: Path) -> list[dict[str, Any]]:
    """Every SparkListenerTaskEnd of the run's event log(s), flattened."""
    out = []
    for f in sorted((run_dir / "events").glob("*")):
        if f.is_dir():
            continue
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e.get("Event") == "SparkListenerTaskEnd":
                ti = e["Task Info"]
                out.append(
                    {
                        "stage": e["Stage ID"],
                        "index": ti["Index"],
                        "attempt": ti["Attempt"],
                        "host": ti["Host"],
                        "speculative": ti["Speculative"],
                        "reason": e["Task End Reason"]["Reason"],
                        "executor": ti["Executor ID"],
                    }
                )
    return out


def events_of(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    out = []
    for f in sorted((run_dir / "events").glob("*")):
        if f.is_file():
            out += [e for e in map(json.loads, f.read_text().splitlines()) if e.get("Event") == kind]
    return out
