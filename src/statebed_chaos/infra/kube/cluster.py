"""Bring the cluster up stage by stage, and down whatever state it is in.

Stages: `api` (etcd, API server, controller manager, scheduler); `node` adds containerd, the
kubelet, kube-proxy and CoreDNS. `load_images` imports the images the chart's kube-up profile runs.
`up` undoes itself on any failure (and on Ctrl-C): nothing of a half-made cluster stays.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from statebed_base.errors import UsageError
from statebed_base.installed import installed
from statebed_base.log import get_logger, kv
from statebed_base.processes import stop_all

from . import netns
from .control_plane import start_control_plane
from .images import chart_images, import_image
from .layout import NETNS, ClusterDir, Network
from .mounts import unmount_under
from .node import drain_pods, our_shims, remove_containers, start_node
from .pki import make_pki
from .procs import stop_recorded
from .services import start_services

__all__ = ["Down", "Tools", "down", "load_images", "tools", "up"]

log = get_logger("kube.cluster")
STAGES = ("api", "node")


@dataclass(frozen=True)
class Tools:
    """Where `make kube-tools` put the cluster's binaries."""

    kube: Path  # kube-apiserver, kubelet, kubectl, kubeadm, ...
    etcd: Path
    version: str
    containerd: Path  # containerd, containerd-shim-runc-v2, ctr
    cni: Path
    pause: Path
    coredns: Path

    @property
    def kubeadm(self) -> Path:
        return self.kube / "kubeadm"


def tools() -> Tools:
    """The installed binaries (missing: one line naming `make kube-tools`)."""
    kube = installed("kubernetes")
    done = subprocess.run([str(kube / "kubeadm"), "version", "-o", "short"], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0 or not done.stdout.startswith("v"):
        raise UsageError(f"{kube / 'kubeadm'}: cannot tell its version ({done.stderr.strip() or done.stdout.strip()}): make kube-tools")
    return Tools(
        kube=kube,
        etcd=installed("etcd") / "etcd",
        version=done.stdout.strip(),
        containerd=installed("containerd"),
        cni=installed("cni"),
        pause=installed("pause") / "pause",
        coredns=installed("coredns") / "coredns",
    )


def _check_host(stage: str) -> None:
    if os.geteuid() != 0:
        raise UsageError("the cluster needs root (network namespaces, mounts, containers)")
    needed = [("ip", "iproute2"), ("nsenter", "util-linux"), ("umount", "util-linux")]
    if stage == "node":
        needed += [("runc", "runc"), ("podman", "podman")]  # containers, and the pause image built here
    for tool, package in needed:
        if shutil.which(tool) is None:
            raise UsageError(f"{tool} not found: the cluster needs it (apt-get install {package})")


def up(root: Path, stage: str = "api", net: Network | None = None) -> ClusterDir:
    """A cluster in `root` up to `stage`; any failure (or Ctrl-C) tears down what was made."""
    if stage not in STAGES:
        raise UsageError(f"stage must be one of {', '.join(STAGES)}, got {stage!r}")
    t, net = tools(), net or Network()  # missing binaries first: one line naming make kube-tools
    _check_host(stage)
    cd = ClusterDir(root)
    if cd.processes():
        raise UsageError(f"{cd.root} holds a cluster's records: make kube-down first")
    cd.make_fresh()  # from cold: no data of an earlier cluster
    cd.describe(net, {"kubernetes": t.version, "etcd": t.etcd.parent.name})  # before the namespace: `down` removes it only then
    try:
        netns.create(NETNS, net.node_ip)
        make_pki(cd, t.kubeadm, net, t.version)
        start_control_plane(cd, t.kube, t.etcd, net)
        if stage == "node":
            start_node(cd, t.kube, t.containerd, t.cni, t.pause, net)
            start_services(cd, t.kube, t.coredns, net)
    except BaseException:
        down(root)
        raise
    log.info("cluster up", extra=kv(stage=stage, dir=str(cd.root), api=net.api_url))
    return cd


def load_images(cd: ClusterDir) -> list[Path]:
    """The chart's images (values-kube-up.yaml) built or saved here and imported into the node."""
    archives = chart_images(cd)
    for archive in archives:
        import_image(cd, installed("containerd"), archive)
        archive.unlink()  # the statebed image's archive alone is ~2 GB
    return archives


@dataclass
class Down:
    """What `down` stopped and removed."""

    stopped: list[int] = field(default_factory=list)
    containers: int = 0  # tasks containerd killed and deleted
    unmounted: list[Path] = field(default_factory=list)
    netns_removed: bool = False


def down(root: Path) -> Down:
    """Stop the kubelet, have containerd kill and delete its containers, stop the other recorded
    processes, unmount everything under `root`, remove the namespace."""
    cd = ClusterDir(root)
    out = Down()
    recorded = cd.processes()
    alive = {name for name, ident in recorded.items() if ident.alive()}
    if {"kube-apiserver", "kubelet"} <= alive:  # the clean way: the kubelet stops every pod it runs
        drain_pods(cd, installed("kubernetes"))
    if "kubelet" in recorded:  # then the kubelet, so it restarts nothing, then what is left through containerd
        out.stopped += stop_all([recorded["kubelet"]])
    out.containers = remove_containers(cd, installed("containerd")) if "containerd" in alive else 0
    out.stopped += stop_recorded(cd) + stop_all(our_shims(cd))
    out.unmounted = unmount_under(cd.root)
    out.netns_removed = cd.described() and netns.remove(NETNS)  # another directory's cluster keeps its namespace
    if cd.processes_file.exists():
        cd.processes_file.unlink()
    log.info(
        "cluster down",
        extra=kv(stopped=len(out.stopped), containers=out.containers, unmounted=len(out.unmounted), netns=out.netns_removed),
    )
    return out
