"""The load run's own processes are recorded with their command line, so they can be stopped by identity."""

from __future__ import annotations

import signal
from pathlib import Path

from statebed_load.managed import Managed


def test_managed_pins_the_command_line_and_stops_by_it(tmp_path: Path) -> None:
    proc = Managed("sleeper", ["sleep", "65"], tmp_path / "sleeper")
    try:
        assert proc.ident is not None and proc.ident.cmdline == ("sleep", "65") and proc.ident.pinned
        assert proc.stop() == -signal.SIGTERM
    finally:
        proc.proc.kill()
        proc.proc.wait()
