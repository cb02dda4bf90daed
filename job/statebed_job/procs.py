"""Process identity: a PID with its start time and command line, checked before every signal.

A PID alone names whatever holds it now: once the recorded process exits, the kernel may
hand the number to an unrelated one. The start time (field 22 of /proc/PID/stat, clock
ticks since boot) and the command line pin the process that was recorded. A signal goes
out only while both still match, through a pidfd opened before the check, so the process
cannot be swapped between the check and the signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statebed_store.errors import StatebedError

__all__ = ["IdentityMismatch", "ProcessIdentity", "children", "identify", "parent_of", "send_signal", "stop_all"]


class IdentityMismatch(StatebedError):
    """The recorded process is gone (exited, or its PID now belongs to another process)."""


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) from /proc/PID/stat; None when there is no such process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])  # fields 3, 4 and 22 of proc(5)


def _cmdline(pid: int) -> tuple[str, ...] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return tuple(raw.decode(errors="replace").split("\0")[:-1]) if raw else ()


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start_time: int
    cmdline: tuple[str, ...] | None = None  # None: pinned by start time only (a process still exec'ing)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "cmdline": None if self.cmdline is None else list(self.cmdline)}

    @classmethod
    def from_json(cls, doc: Any) -> ProcessIdentity:
        """Raises ValueError on anything but a recorded identity."""
        if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int) or not isinstance(doc.get("start_time"), int):
            raise ValueError(f"not a process identity: {doc!r}")
        cmd = doc.get("cmdline")
        if cmd is not None and not (isinstance(cmd, list) and all(isinstance(a, str) for a in cmd)):
            raise ValueError(f"not a command line: {cmd!r}")
        return cls(doc["pid"], doc["start_time"], None if cmd is None else tuple(cmd))

    def mismatch(self) -> str | None:
        """Why the process at `pid` is not this one (None: it is, and it has not exited)."""
        st = _stat(self.pid)
        if st is None or st[0] in ("Z", "X"):
            return f"process {self.pid} has exited"
        if st[2] != self.start_time:
            return f"PID {self.pid} now belongs to another process (start time {st[2]}, recorded {self.start_time})"
        if self.cmdline is not None and _cmdline(self.pid) != self.cmdline:
            return f"PID {self.pid} now runs another command line ({' '.join(_cmdline(self.pid) or ())[:120]!r})"
        return None

    def alive(self) -> bool:
        return self.mismatch() is None

    def describe(self) -> str:
        return f"pid {self.pid} ({' '.join(self.cmdline or ())[:80]})"


def identify(pid: int) -> ProcessIdentity | None:
    """The identity of the live process `pid` now (None if there is none)."""
    st = _stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return None
    cmd = _cmdline(pid)
    return None if cmd is None else ProcessIdentity(pid, st[2], cmd)


def parent_of(pid: int) -> int | None:
    st = _stat(pid)
    return None if st is None else st[1]


def children(pid: int) -> list[int]:
    """Direct children of `pid` (by parent PID, from /proc), e.g. a worker's executor JVMs."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = _stat(int(d.name))
            if st is not None and st[1] == pid:
                out.append(int(d.name))
    return sorted(out)


def send_signal(ident: ProcessIdentity, sig: int) -> None:
    """Signal the recorded process, or raise IdentityMismatch (never signals another process)."""
    try:
        fd = os.pidfd_open(ident.pid)
    except ProcessLookupError:
        raise IdentityMismatch(f"process {ident.pid} has exited") from None
    try:
        reason = ident.mismatch()  # checked after the pidfd pinned whatever holds the PID now
        if reason is not None:
            raise IdentityMismatch(reason)
        try:
            signal.pidfd_send_signal(fd, sig)
        except ProcessLookupError:
            raise IdentityMismatch(f"process {ident.pid} has exited") from None
    finally:
        os.close(fd)


def stop_all(idents: list[ProcessIdentity], grace_s: float = 15.0, kill_wait_s: float = 15.0) -> list[int]:
    """Stop every recorded process still alive: CONT (a paused one cannot exit) and TERM, up to
    `grace_s` for a clean exit, then KILL and up to `kill_wait_s` until the kernel has them gone.

    A zombie counts as gone (its parent reaps it). Orphans count too: a Python worker whose JVM
    exited is still running until it notices.
    Returns the PIDs that were alive when it started."""
    live = [i for i in idents if i.alive()]
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        for ident in live:
            with contextlib.suppress(IdentityMismatch, PermissionError):
                if sig == signal.SIGTERM:
                    send_signal(ident, signal.SIGCONT)
                send_signal(ident, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(i.alive() for i in live):
            time.sleep(0.1)  # the signal is delivered; waiting for the process to go
    return [i.pid for i in live]
