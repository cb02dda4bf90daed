"""Process identities and stop_all, on real processes: a stubborn one, a paused one, an orphan."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from statebed_job.procs import ProcessIdentity, identify, stop_all

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"


def _wait_ready(proc: subprocess.Popen[str]) -> ProcessIdentity:
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    ident = identify(proc.pid)
    assert ident is not None
    return ident


def test_stop_all_kills_one_that_ignores_term_and_one_that_is_paused() -> None:
    procs = [subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        idents = [_wait_ready(p) for p in procs]
        os.kill(procs[1].pid, signal.SIGSTOP)
        assert stop_all(idents, grace_s=0.5) == [i.pid for i in idents]
        assert [i.alive() for i in idents] == [False, False]
        assert [p.wait(timeout=30) for p in procs] == [-signal.SIGKILL, -signal.SIGKILL]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_stop_all_stops_an_orphan_whose_parent_already_exited(tmp_path: Path) -> None:
    """The load run's case: the driver exited, its JVM's Python workers linger, reparented."""
    pid_file = tmp_path / "orphan.pid"
    spawner = (
        "import subprocess, sys; "
        f"p = subprocess.Popen([sys.executable, '-c', {STUBBORN!r}], stdout=subprocess.PIPE, text=True); "
        f"p.stdout.readline(); open({str(pid_file)!r}, 'w').write(str(p.pid))"
    )
    subprocess.run([sys.executable, "-c", spawner], check=True, timeout=60)
    orphan = identify(int(pid_file.read_text()))
    assert orphan is not None and orphan.alive()  # its parent is gone; it is not
    try:
        assert stop_all([orphan], grace_s=0.5) == [orphan.pid]
        assert not orphan.alive()
    finally:
        if orphan.alive():
            os.kill(orphan.pid, signal.SIGKILL)


def test_stop_all_leaves_a_pid_that_moved_on_alone() -> None:
    """A recorded identity whose PID now names another process (another start time) is never signalled."""
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True)
    try:
        real = _wait_ready(proc)
        stale = ProcessIdentity(real.pid, real.start_time - 1, real.cmdline)
        assert stop_all([stale], grace_s=0.1) == []
        assert real.alive() and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
