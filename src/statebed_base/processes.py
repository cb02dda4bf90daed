"""Process identity: a PID with its start time and command line, checked before every signal.

A PID alone names whatever holds it now: once the recorded process exits, the kernel may
hand the number to an unrelated one. The start time (field 22 of /proc/PID/stat, clock
ticks since boot) and the command line pin the process that was recorded. A signal goes
out only while both were recorded and still match, through a pidfd opened before the
check, so the process cannot be swapped between the check and the signal. An identity
without a command line (read from a file that had none, or taken before an exec) is never
signalled: PID and start time say a process is alive, not that it is ours.

Every child process statebed starts is started here (`spawn`): in its own session, its output
in log files, its start time and (once its exec has set it up, `identify_started`) its
command line recorded. Whoever watches a process tree records what it finds with `track`,
which re-pins a process that exec'd while it is still in the tree. Stopping is here too:
`Child.stop`/`stop_children` for the processes we started, `stop_all` for recorded trees.
`run_to_end` runs a command whose output a caller reads whole (a benchmark's runs): on an
interrupt it asks the command to stop what it started, where `subprocess.run` would KILL it
and orphan its Spark cluster.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statebed_base.errors import StatebedError
from statebed_base.log import get_logger, kv
from statebed_base.procfs import cmdline as _cmdline
from statebed_base.procfs import stat as _stat

__all__ = [
    "Child",
    "IdentityMismatch",
    "ProcessIdentity",
    "children",
    "identify",
    "identify_started",
    "parent_of",
    "run_to_end",
    "send_signal",
    "spawn",
    "stop_all",
    "stop_children",
    "track",
]

log = get_logger("procs")
STARTED_TIMEOUT_S = 10.0


class IdentityMismatch(StatebedError):
    """The recorded process is gone (exited, or its PID now belongs to another process)."""


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start_time: int
    cmdline: tuple[str, ...] | None = None  # None or empty: not pinned, never signalled (see `pinned`)

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

    @property
    def pinned(self) -> bool:
        """Both the start time and a command line were recorded: only then may the process be signalled."""
        return bool(self.cmdline)

    def describe(self) -> str:
        return f"pid {self.pid} ({' '.join(self.cmdline or ())[:80]})"


def identify(pid: int) -> ProcessIdentity | None:
    """The identity of the live process `pid` now (None if there is none; its command line may be empty)."""
    st = _stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return None
    cmd = _cmdline(pid)
    return None if cmd is None else ProcessIdentity(pid, st[2], cmd)


def identify_started(pid: int, timeout_s: float = STARTED_TIMEOUT_S) -> ProcessIdentity | None:
    """The pinned identity of a process we just started (None: it exited, or its command line never showed).

    `Popen` returns once the exec closed its close-on-exec pipe, which the kernel does before it
    copies the new argument vector in: for a moment /proc/PID/cmdline is empty. Waits for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        ident = identify(pid)
        if ident is None or ident.pinned:
            return ident
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)  # the exec is finishing; the condition is polled, not a fixed sleep


def parent_of(pid: int) -> int | None:
    st = _stat(pid)
    return None if st is None else st[1]


def _table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time) of every live process, from one scan of /proc."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (st := _stat(int(d.name))) is not None and st[0] not in ("Z", "X"):
            out[int(d.name)] = (st[1], st[2])
    return out


def _below(roots: list[int], table: dict[int, tuple[int, int]]) -> list[int]:
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], list(roots)
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def track(roots: list[int], seen: dict[int, ProcessIdentity]) -> None:
    """Record every live process of the trees below `roots` (roots included) in `seen`, by PID.

    Each is recorded as it runs now: a process recorded before its exec (a fork caught before it
    ran its program) is re-pinned to its new command line, and a PID reused inside the tree gets
    the new process; either is ours because it is in the tree. Only a process still being set up
    (empty command line) waits for the next call. One that exec'd after it left the tree keeps
    its old record and is not signalled: leaving it running is the safe error."""
    table = _table()
    for pid in [r for r in roots if r in table] + _below(roots, table):
        ident = identify(pid)
        if ident is not None and ident.pinned and ident.start_time == table[pid][1]:  # still the process the scan found
            seen[pid] = ident


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
    """Signal the recorded process, or raise IdentityMismatch (never signals another process, nor an unpinned one)."""
    if not ident.pinned:
        raise IdentityMismatch(f"pid {ident.pid}: no command line was recorded for it, so it is not provably ours; not signalled")
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
    An identity without a command line is never signalled (logged, not counted).
    Returns the PIDs that were alive when it started."""
    for i in idents:
        if not i.pinned and i.alive():
            log.warning("not signalled: no command line was recorded", extra=kv(pid=i.pid, start_time=i.start_time))
    live = [i for i in idents if i.pinned and i.alive()]
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


@dataclass
class Child:
    """A process we started (`spawn`): its handle, when it started, and its pinned identity.

    `ident` is None when the process exited at once, never showed a command line, or was
    started unpinned (`pin=False`: it execs another program, e.g. spark-class -> java, so its
    final command line is pinned by its owner). An unpinned child is signalled through its
    Popen handle, which names it and no other until we reap it; a pinned one by its identity."""

    proc: subprocess.Popen[bytes]
    start: float  # wall-clock seconds, taken just before the spawn
    ident: ProcessIdentity | None = None
    stdout: Path | None = None
    stderr: Path | None = None
    pinned_by_handle: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; subprocess.TimeoutExpired when it runs past `timeout`."""
        return self.proc.wait(timeout)

    def signal(self, sig: int) -> None:
        """Signal it while it is the process we started; a mismatch or an exit is silently nothing."""
        if not self.alive():
            return
        if self.pinned_by_handle:
            self.proc.send_signal(sig)
        elif self.ident is not None:
            with contextlib.suppress(IdentityMismatch, PermissionError):
                send_signal(self.ident, sig)

    def stop(self, grace_s: float = 15.0, kill_wait_s: float = 15.0) -> int | None:
        """TERM, up to `grace_s` for a clean exit, then KILL (`grace_s=0`: KILL at once); the exit code."""
        stop_children([self], grace_s, kill_wait_s)
        return self.returncode


def spawn(
    cmd: list[str],
    *,
    stdout: Path | None = None,
    stderr: Path | None = None,
    env: Mapping[str, str] | None = None,
    append: bool = False,
    pin: bool = True,
) -> Child:
    """Start `cmd` in its own session (stdin closed, output to the files; `stderr` None: into
    `stdout`) and pin it by start time and command line (`pin=False`: see `Child`)."""
    mode = "ab" if append else "wb"
    for path in (stdout, stderr):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with contextlib.ExitStack() as files:
        out = files.enter_context(open(stdout, mode)) if stdout is not None else subprocess.DEVNULL
        err = files.enter_context(open(stderr, mode)) if stderr is not None else subprocess.STDOUT
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    child = Child(proc, start, stdout=stdout, stderr=stderr, pinned_by_handle=not pin)
    if pin:
        child.ident = identify_started(proc.pid)
    return child


def run_to_end(
    cmd: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    grace_s: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """`cmd` in its own session, its output captured, to its end. On a timeout or an interrupt
    while waiting: SIGINT (it stops what it started, as on Ctrl-C), up to `grace_s`, then TERM
    and KILL; the exception is raised again."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env, cwd=cwd, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        _interrupt(proc, grace_s)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _interrupt(proc: subprocess.Popen[str], grace_s: float) -> None:
    """SIGINT, then TERM, then KILL, each given time to end; signalled through the unreaped handle."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 15.0), (signal.SIGKILL, None)):
        proc.send_signal(sig)
        try:
            proc.communicate(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def stop_children(children: list[Child], grace_s: float = 15.0, kill_wait_s: float = 15.0) -> None:
    """Stop processes we started: TERM to all, up to `grace_s` for each to exit, then KILL and up
    to `kill_wait_s`; each reaped. subprocess.TimeoutExpired if one outlives even the KILL."""
    if grace_s > 0:
        for child in children:
            child.signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(grace_s)
        except subprocess.TimeoutExpired:
            child.signal(signal.SIGKILL)
            child.wait(kill_wait_s)
