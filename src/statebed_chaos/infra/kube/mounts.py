"""Mounts under the cluster directory (pod volumes, containerd's snapshots, pod namespaces): found
in /proc/self/mountinfo and unmounted deepest first, so `down` leaves none."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["mounted_under", "unmount_under"]


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounted_under(root: Path) -> list[Path]:
    """Mount points at or below `root`, deepest first."""
    base = root.absolute()
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = Path(_unescape(line.split()[4]))
        if point == base or base in point.parents:
            found.append(point)
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def unmount_under(root: Path) -> list[Path]:
    """Unmount everything at or below `root` (a busy one lazily); what was unmounted."""
    done = []
    for point in mounted_under(root):
        if subprocess.run(["umount", str(point)], capture_output=True, timeout=30, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30, check=False)
        done.append(point)
    return done
