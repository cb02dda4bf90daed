"""The cluster's plumbing that needs no cluster: its namespace (real `ip netns`; the suite runs as root), its
mount bookkeeping, its records, and the one-line errors before anything starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from statebed_base.errors import UsageError
from statebed_base.installed import installed
from statebed_base.processes import identify, spawn
from statebed_chaos.infra.kube import netns
from statebed_chaos.infra.kube.cluster import down, up
from statebed_chaos.infra.kube.layout import ClusterDir, Network
from statebed_chaos.infra.kube.mounts import _unescape, mounted_under, unmount_under


def test_mountinfo_escapes_are_read_back() -> None:
    assert _unescape(r"/a\040b\011c\134d") == "/a b\tc\\d"
    assert _unescape("/plain") == "/plain"


def test_the_namespace_carries_the_node_address_and_goes_with_its_routes() -> None:
    name = "statebed-test-ns"
    netns.create(name, "10.213.9.1")
    try:
        with pytest.raises(netns.NetnsError, match="exists"):
            netns.create(name, "10.213.9.1")
        inside = subprocess.run(
            netns.exec_argv(name, ["ip", "-o", "addr", "show", "dev", "lo"]), capture_output=True, text=True, check=True
        )
        assert "10.213.9.1/32" in inside.stdout
        outside = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True)
        assert "10.213.9.1" not in outside.stdout  # nothing of the cluster's addresses in the root namespace
    finally:
        assert netns.remove(name)
    assert not netns.exists(name) and not netns.remove(name)


def test_down_unmounts_what_is_under_the_directory_and_stops_only_recorded_processes(tmp_path: Path) -> None:
    cd = ClusterDir(tmp_path / "c")
    (cd.root / "pods" / "v").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(cd.root / "pods" / "v")], check=True)
    sleeper = spawn(["sleep", "600"], stdout=tmp_path / "sleep.log")
    other = spawn(["sleep", "601"], stdout=tmp_path / "other.log")
    try:
        assert sleeper.ident is not None
        cd.record("sleeper", sleeper.ident)
        assert mounted_under(cd.root) == [cd.root / "pods" / "v"]
        gone = down(cd.root)
        assert gone.stopped == [sleeper.pid] and sleeper.wait(10) is not None
        assert gone.unmounted == [cd.root / "pods" / "v"] and not mounted_under(cd.root)
        assert identify(other.pid) is not None  # not recorded: not ours to stop
        assert not cd.processes_file.exists()
    finally:
        other.stop(grace_s=0)
        sleeper.stop(grace_s=0)
        unmount_under(cd.root)


def test_missing_tools_are_one_line_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.setenv("STATEBED_KUBERNETES_BIN", str(tmp_path / "nowhere"))
    installed.cache_clear()  # resolved afresh under this environment (and again after it)
    request.addfinalizer(installed.cache_clear)
    with pytest.raises(UsageError, match="STATEBED_KUBERNETES_BIN=.*no such file"):
        up(tmp_path / "c")
    assert not (tmp_path / "c").exists()  # refused before anything was made


def test_the_api_url_and_the_kubernetes_service_address_follow_the_ranges() -> None:
    net = Network(node_ip="10.1.2.3", service_cidr="10.9.8.0/24")
    assert net.api_url == "https://10.1.2.3:6443" and net.kubernetes_service_ip == "10.9.8.1"
