"""What /proc says about one process: its state, parent, start time and command line.

The one reader of /proc/PID/stat, /proc/PID/cmdline and the kernel's boot id: `statebed_base.processes` builds process
identities on it, and the checkpoint lock records its holder with it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["boot_id", "cmdline", "stat"]


def stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) from /proc/PID/stat; None when there is no such process.

    The start time (clock ticks since boot) never changes for a process, exec included, and
    no two processes with the same PID share one: PID and start time name one process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])  # fields 3, 4 and 22 of proc(5)


def cmdline(pid: int) -> tuple[str, ...] | None:
    """The argument vector of `pid` (empty while an exec has not set it up, or for a kernel thread); None: no such process."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return tuple(raw.decode(errors="replace").split("\0")[:-1]) if raw else ()


def boot_id() -> str | None:
    """This boot's id (`/proc/sys/kernel/random/boot_id`): what a host crash or reboot changes; None if unreadable."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None
