"""One owner of child-process spawn and stop: `statebed_base.processes` (`spawn`, `Child.stop`,
`stop_children`, `stop_all`). Every other module starts its processes through it, so each
child is pinned (start time and command line) the same way and stopped the same way."""

from __future__ import annotations

import ast
import signal
import sys
import time
from pathlib import Path

from test_layering import PACKAGES as _LAYERS

from statebed_base.processes import spawn, stop_children

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = list(_LAYERS.values())  # every package, as the layering test lists them
OWNER = "src/statebed_base/processes.py"
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"


def uses_popen(source: str) -> bool:
    """Whether a module names `Popen` (subprocess.Popen, or Popen imported from subprocess)."""
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Attribute) and n.attr == "Popen":
            return True
        if isinstance(n, ast.ImportFrom) and n.module == "subprocess" and any(a.name == "Popen" for a in n.names):
            return True
    return False


def test_the_scan_sees_popen_both_ways() -> None:
    assert uses_popen("import subprocess\nsubprocess.Popen(['x'])\n")
    assert uses_popen("from subprocess import Popen\n")
    assert not uses_popen("import subprocess\nsubprocess.run(['x'])\n# subprocess.Popen in a comment\n")


def test_popen_lives_in_exactly_one_module() -> None:
    found = sorted(str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if uses_popen(p.read_text()))
    assert found == [OWNER]


def test_spawn_pins_and_stop_escalates_to_kill(tmp_path: Path) -> None:
    child = spawn([sys.executable, "-c", STUBBORN], stdout=tmp_path / "out", stderr=tmp_path / "err")
    try:
        assert child.ident is not None and child.ident.pinned and child.ident.cmdline == (sys.executable, "-c", STUBBORN)
        while "ready" not in (tmp_path / "out").read_text():  # its TERM handler is installed
            assert child.alive(), (tmp_path / "err").read_text()
            time.sleep(0.01)  # polling for the line it prints once ready
        assert child.stop(grace_s=0.5) == -signal.SIGKILL  # TERM ignored, then KILL
    finally:
        child.proc.kill()
        child.proc.wait()


def test_an_unpinned_child_is_stopped_through_its_handle(tmp_path: Path) -> None:
    """A child that execs another program (spark-class -> java) is stopped by its Popen handle."""
    child = spawn(["sh", "-c", "exec sleep 60"], stdout=tmp_path / "log", append=True, pin=False)
    try:
        assert child.ident is None
        stop_children([child], grace_s=15)
        assert child.returncode == -signal.SIGTERM
    finally:
        child.proc.kill()
        child.proc.wait()
