"""Ctrl-C in the middle of `up`: the half-made cluster is torn down by the interrupted command
itself; nothing it started (process, mount, namespace) is left. Runs before the session's
cluster exists (conftest orders the tests that use no cluster first)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from statebed_base.processes import ProcessIdentity, spawn
from statebed_chaos.infra.kube import netns
from statebed_chaos.infra.kube.layout import NETNS, ClusterDir
from statebed_chaos.infra.kube.mounts import mounted_under


def test_ctrl_c_while_the_cluster_comes_up_leaves_nothing_running(tmp_path: Path) -> None:
    cd = ClusterDir(tmp_path / "cluster")
    up = spawn(
        [sys.executable, "-m", "statebed_chaos.infra.kube", "up", "--stage", "node", "--dir", str(cd.root)],
        stdout=tmp_path / "up.log",
        env=None,
    )
    seen: dict[str, ProcessIdentity] = {}
    deadline = time.monotonic() + 180
    while "kube-apiserver" not in seen and up.alive() and time.monotonic() < deadline:
        seen = cd.processes()
        time.sleep(0.2)  # polling another process's records: no event crosses the process boundary
    assert "kube-apiserver" in seen, (tmp_path / "up.log").read_text()[-2000:]
    up.signal(signal.SIGINT)
    assert up.wait(180) == 130
    assert "interrupted" in (tmp_path / "up.log").read_text()
    assert not [name for name, ident in seen.items() if ident.alive()]
    assert not netns.exists(NETNS) and not mounted_under(cd.root) and not cd.processes()
