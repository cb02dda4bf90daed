"""The controller's side of runtime failpoints: a versioned control file that running
processes re-read, and the firing logs they append next to it.

    <dir>/control.json        {"version": n, "seed": s, "points": {name: terms},
                               "released": {name: count}, "active": {fault id: kind},
                               "updated": t}
    <dir>/fired-<host>-<pid>-<started>.jsonl
                              one file per process, one line per firing: time, failpoint,
                              action, pid, host, started, task ({batch, partition, attempt} or
                              null), hit, control_version; a hold's end adds a record with
                              action "released" or "hold-timeout" and held_s

A process is named by where it ran and which it was (`firing_process`): its host (SPARK_LOCAL_IP,
a pod's IP on Kubernetes, else the host name), PID and start time (clock ticks since boot, field
22 of /proc/PID/stat), never by PID alone: every executor JVM of a Kubernetes run is PID 7 in its
own pod, and they share one runs volume. Python workers and the JVM plug-in write the same names.

`active` is the controller's record of which faults are in their window (inject to heal), of
every kind, not only failpoints: the driver exports it as `statebed_faults_active`.

Processes find the file through `STATEBED_FAILPOINTS_CONTROL` (forwarded to executors) and
apply a version once, when a point is hit. Every write replaces the file atomically with the
next version under an exclusive lock, so concurrent controllers do not lose an update.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from statebed_base.errors import CorruptFileError, UsageError
from statebed_base.jsonsafe import loads_strict
from statebed_base.localfs import atomic_write, read_regular

from .failpoint_spec import canonical, parse_spec

__all__ = ["Control", "firing_file", "firing_process"]


def firing_process(rec: dict[str, Any]) -> tuple[str | None, Any, Any]:
    """The process a firing record came from: (host, pid, start time); a field an older record lacks is None on both sides."""
    return rec.get("host"), rec.get("pid"), rec.get("started")


def firing_file(host: str, pid: int, started: int | None) -> str:
    """The file a process appends its firings to (its host reduced to file-name characters)."""
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in ".-" else "_" for c in host)[:100] or "unknown"
    return f"fired-{safe}-{pid}-{0 if started is None else started}.jsonl"


class Control:
    """Arm, change and disarm failpoints in every process that follows `path`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).absolute()

    @property
    def directory(self) -> Path:
        return self.path.parent

    def read(self) -> dict[str, Any]:
        """The current document (version 0 and no points when the file does not exist yet)."""
        try:
            doc = loads_strict(read_regular(self.path), file=str(self.path))
        except FileNotFoundError:
            return {"version": 0, "seed": 0, "points": {}}
        except CorruptFileError as e:
            raise UsageError(f"{self.path}: not a failpoint control file ({e.detail})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("version"), int) or not isinstance(doc.get("points"), dict):
            raise UsageError(f"{self.path}: not a failpoint control file (needs version and points)")
        return doc

    def arm(self, spec: str, seed: int | None = None) -> int:
        """Arm (or re-arm) the points of `spec`, leaving the others as they are; returns the new version."""
        parsed = parse_spec(spec)

        def change(doc: dict[str, Any]) -> None:
            doc["points"].update({name: "->".join(t.describe() for t in terms) for name, terms in parsed.items()})
            if seed is not None:
                doc["seed"] = seed

        return self._update(change)

    def disarm(self, *names: str) -> int:
        """Disarm the named points, or every point when none is named; returns the new version."""
        canon = [canonical(n) for n in names]

        def change(doc: dict[str, Any]) -> None:
            if not canon:
                doc["points"].clear()
            for name in canon:
                doc["points"].pop(name, None)

        return self._update(change)

    def release(self, name: str) -> int:
        """End every `hold` of point `name` that began before this call, in every process; returns the new version."""
        canon = canonical(name)

        def change(doc: dict[str, Any]) -> None:
            released = doc.setdefault("released", {})
            released[canon] = int(released.get(canon, 0)) + 1

        return self._update(change)

    def mark_active(self, fault_id: str, kind: str, active: bool) -> int:
        """Record that fault `fault_id` (of `kind`) entered (True) or left (False) its window."""

        def change(doc: dict[str, Any]) -> None:
            doc.setdefault("active", {})
            if active:
                doc["active"][fault_id] = kind
            else:
                doc["active"].pop(fault_id, None)

        return self._update(change)

    def active(self) -> dict[str, str]:
        """Fault id -> kind of every fault in its window now ({} when there is no file yet)."""
        doc = self.read().get("active", {})
        return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}

    def firings(self) -> list[dict[str, Any]]:
        """Every firing recorded so far by every process, oldest first (a line being written is skipped;
        a FIFO or directory named like a log is an error naming it, never a blocking read)."""
        out = []
        for f in sorted(self.directory.glob("fired-*.jsonl")):
            for line in read_regular(f).decode("utf-8", "replace").splitlines():
                try:
                    rec = loads_strict(line, file=str(f))
                except CorruptFileError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("time", 0), (int, float)):
                    out.append(rec)
        return sorted(out, key=lambda r: r.get("time", 0))

    def _update(self, change: Callable[[dict[str, Any]], None]) -> int:
        with self._locked():
            doc = self.read()
            change(doc)
            doc["version"] = int(doc["version"]) + 1
            doc["updated"] = round(time.time(), 6)
            atomic_write(self.path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
            return int(doc["version"])

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
