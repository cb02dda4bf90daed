"""Process identities and stop_all, on real processes: a stubborn one, a paused one, an orphan."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from statebed_base.processes import IdentityMismatch, ProcessIdentity, identify, identify_started, run_to_end, send_signal, stop_all, track

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


def test_send_signal_refuses_an_identity_without_a_command_line(sleeper: subprocess.Popen[bytes]) -> None:
    """PID and start time alone are not an identity: without the command line recorded at start, nothing is signalled."""
    real = identify_started(sleeper.pid)
    assert real is not None and real.cmdline == ("sleep", "60")
    for unpinned in (ProcessIdentity(real.pid, real.start_time), ProcessIdentity(real.pid, real.start_time, ())):
        with pytest.raises(IdentityMismatch, match="no command line was recorded"):
            send_signal(unpinned, signal.SIGKILL)
        assert stop_all([unpinned], grace_s=0.1, kill_wait_s=0.1) == []
    assert sleeper.poll() is None and real.alive()
    send_signal(real, signal.SIGTERM)  # the positive control: the pinned identity is signalled
    assert sleeper.wait(10) == -signal.SIGTERM


def test_track_records_a_tree_and_repins_a_process_that_execs(tmp_path: Path) -> None:
    """A child found mid-way (before its exec) is re-pinned to its new command line while it is still in the tree,
    so the process that runs in the end is the one recorded, and stop_all can stop it."""
    read_fd, write_fd = os.pipe()
    grandchild_code = (  # waits for a line, then execs `sleep` with the pipe's write end closed on exec
        f"import os, sys; sys.stdin.readline(); os.set_inheritable({write_fd}, False); os.execvp('sleep', ['sleep', '61'])"
    )
    child = (
        "import os, subprocess, sys; "
        f"p = subprocess.Popen([sys.executable, '-c', {grandchild_code!r}], stdin=subprocess.PIPE, pass_fds=[{write_fd}]); "
        f"os.close({write_fd}); print(p.pid, flush=True); sys.stdin.readline(); p.stdin.write(b'go\\n'); p.stdin.flush(); p.wait()"
    )
    parent = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, pass_fds=[write_fd])
    os.close(write_fd)
    assert parent.stdout is not None and parent.stdin is not None
    try:
        grandchild = int(parent.stdout.readline())
        seen: dict[int, ProcessIdentity] = {}
        track([parent.pid], seen)
        before = seen[grandchild]
        assert set(seen) == {parent.pid, grandchild} and "sleep" not in (before.cmdline or ())
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert os.read(read_fd, 1) == b""  # EOF: the grandchild exec'd (its copy of the pipe was close-on-exec)
        after = identify_started(grandchild)
        assert after is not None and after.cmdline == ("sleep", "61") and not before.alive()
        track([parent.pid], seen)
        assert seen[grandchild] == after  # same PID and start time, the command line it runs now
        assert sorted(stop_all(list(seen.values()), grace_s=5)) == sorted([parent.pid, grandchild])
        assert parent.wait(10) is not None and not after.alive()
    finally:
        os.close(read_fd)
        parent.kill()
        parent.wait()


# -- run_to_end ------------------------------------------------------------------------------

TRAPS_INT = (
    "import signal, sys, time, pathlib\n"
    "d = pathlib.Path(sys.argv[1])\n"
    "def stop(*_):\n"
    "    (d / 'stopped').write_text('int')\n"
    "    sys.exit(130)\n"
    "signal.signal(signal.SIGINT, stop if sys.argv[2] == 'obeys' else signal.SIG_IGN)\n"
    "(d / 'ready').write_text('')\n"
    "time.sleep(600)\n"
)


def _interrupt_main_when(path: Path) -> threading.Thread:
    """Ctrl-C in this (main) thread once `path` exists: the child has set up its handler."""

    def watch() -> None:
        while not path.exists():
            time.sleep(0.02)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)  # a real signal: EINTR wakes the wait

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_run_to_end_captures_the_output_and_the_exit_code() -> None:
    proc = run_to_end([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")


def test_an_interrupt_asks_the_command_to_stop_and_waits_for_it(tmp_path: Path) -> None:
    watcher = _interrupt_main_when(tmp_path / "ready")
    with pytest.raises(KeyboardInterrupt):
        run_to_end([sys.executable, "-c", TRAPS_INT, str(tmp_path), "obeys"])
    watcher.join()
    assert (tmp_path / "stopped").read_text() == "int"  # it ran its own cleanup: not killed


def test_a_command_that_ignores_the_interrupt_is_terminated(tmp_path: Path) -> None:
    watcher = _interrupt_main_when(tmp_path / "ready")
    with pytest.raises(KeyboardInterrupt):
        run_to_end([sys.executable, "-c", TRAPS_INT, str(tmp_path), "ignores"], grace_s=0.2)
    watcher.join()
    assert not (tmp_path / "stopped").exists()
