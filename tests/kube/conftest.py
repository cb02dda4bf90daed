"""`make kube-e2e`: a real single-node cluster (built by `make kube-tools`), brought up once per
session in its own network namespace and torn down at the end, whatever happened."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from statebed_chaos.infra.kube import netns
from statebed_chaos.infra.kube.cluster import Tools, down, tools, up
from statebed_chaos.infra.kube.control_plane import kubectl
from statebed_chaos.infra.kube.layout import NETNS, ClusterDir
from statebed_chaos.infra.kube.mounts import mounted_under
from statebed_chaos.infra.kube.node import our_shims

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Cluster:
    dir: ClusterDir
    tools: Tools

    def kubectl(self, *args: str, who: str = "admin", timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return kubectl(self.dir, self.tools.kube, *args, who=who, timeout=timeout)

    def ok(self, *args: str) -> str:
        done = self.kubectl(*args)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def run(self, argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`argv` inside the cluster's namespace."""
        return netns.run(NETNS, argv, timeout=timeout)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that bring up no cluster of their own run first, before the session's cluster exists
    (there is one network namespace for a cluster on this machine)."""
    here = Path(__file__).parent
    items.sort(key=lambda item: item.path.is_relative_to(here) and "cluster" in getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The cluster in STATEBED_KUBE_DIR (make's KUBE_DIR, default runs/kube), so `make kube-down` finds it."""
    root = Path(os.environ.get("STATEBED_KUBE_DIR") or ROOT / "runs" / "kube")
    cd = up(root, "node")
    try:
        yield Cluster(cd, tools())
    finally:
        started = cd.processes()
        gone = down(root)
        assert gone.netns_removed and not netns.exists(NETNS)
        assert started and not [name for name, ident in started.items() if ident.alive()]  # every process we started is gone
        assert not mounted_under(cd.root) and not our_shims(cd)  # no pod's mount or shim outlives the cluster
