"""The cluster directory: every file of one cluster, and the records `down` needs.

<dir>/pki/              kubeadm's certificates (CA, API server, service-account keys)
<dir>/kubeconfig/       admin.conf, controller-manager.conf, scheduler.conf, kubelet.conf
<dir>/etcd/             etcd's data
<dir>/logs/<name>.log   each process's output
<dir>/processes.json    {name: identity} of every process started (pinned: PID, start time, argv)
<dir>/cluster.json      the addresses and versions this cluster was made with
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from statebed_base.errors import UsageError
from statebed_base.localfs import atomic_write
from statebed_base.processes import ProcessIdentity

__all__ = ["NETNS", "ClusterDir", "Network"]

NETNS = "statebed-kube"


@dataclass(frozen=True)
class Network:
    """The cluster's addresses (all inside its namespace)."""

    node_ip: str = "10.213.0.1"
    service_cidr: str = "10.214.0.0/24"
    pod_cidr: str = "10.215.0.0/24"
    api_port: int = 6443

    @property
    def api_url(self) -> str:
        return f"https://{self.node_ip}:{self.api_port}"

    @property
    def kubernetes_service_ip(self) -> str:
        """The first address of the service range: the `kubernetes` Service."""
        a, b, c, _ = self.service_cidr.split("/")[0].split(".")
        return f"{a}.{b}.{c}.1"


class ClusterDir:
    def __init__(self, root: Path) -> None:
        self.root = root.absolute()

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def kubeconfigs(self) -> Path:
        return self.root / "kubeconfig"

    def kubeconfig(self, who: str) -> Path:
        return self.kubeconfigs / f"{who}.conf"

    @property
    def etcd(self) -> Path:
        return self.root / "etcd"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    @property
    def processes_file(self) -> Path:
        return self.root / "processes.json"

    def processes(self) -> dict[str, ProcessIdentity]:
        """What was started, by name (none recorded: {})."""
        if not self.processes_file.exists():
            return {}
        return {k: ProcessIdentity.from_json(v) for k, v in json.loads(self.processes_file.read_text()).items()}

    def record(self, name: str, ident: ProcessIdentity) -> None:
        """Record a started process before anything waits on it (so `down` finds it however `up` ends)."""
        doc = {k: v.to_json() for k, v in self.processes().items()} | {name: ident.to_json()}
        atomic_write(self.processes_file, json.dumps(doc, indent=1).encode())

    def write_info(self, info: dict[str, Any]) -> None:
        atomic_write(self.root / "cluster.json", json.dumps(info, indent=1).encode())

    def described(self) -> bool:
        """A cluster was made in this directory (its cluster.json is written before anything starts)."""
        return (self.root / "cluster.json").is_file()

    def network(self) -> Network:
        doc = json.loads((self.root / "cluster.json").read_text())
        return Network(**doc["network"])

    OWNED = ("pki", "kubeconfig", "etcd", "logs", "scratch", "node", "runs", "kubeadm.yaml", "cluster.json")

    @property
    def runs(self) -> Path:
        """The run directories the chart's pods share (its global.runs.hostPath here): kept after
        `down` for reading, gone with the next cold start."""
        return self.root / "runs"

    @property
    def node(self) -> Path:
        """containerd's root and state, the CNI and kubelet configs, the kubelet's root."""
        return self.root / "node"

    @property
    def containerd_socket(self) -> Path:
        return self.node / "containerd-state" / "containerd.sock"

    @property
    def scratch(self) -> Path:
        """Files tools hand the cluster (tokens, manifests): gone with the next cold start."""
        path = self.root / "scratch"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def make_fresh(self) -> None:
        """An empty directory for a cold cluster: a previous cluster's files (its cluster.json
        says so) are removed; anything else there is refused, untouched."""
        if self.root.exists():
            names = {p.name for p in self.root.iterdir()}
            if names and "cluster.json" not in names:
                raise UsageError(f"{self.root}: not empty and not a cluster directory; name another (--dir, KUBE_DIR)")
            if names - set(self.OWNED):
                stray = sorted(names - set(self.OWNED))
                raise UsageError(
                    f"{self.root}: holds files no cluster made ({', '.join(stray[:3])}{', ...' if len(stray) > 3 else ''}); left untouched"
                )
            for name in names:
                path = self.root / name
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        self.root.mkdir(parents=True, exist_ok=True)

    def describe(self, network: Network, versions: dict[str, str]) -> None:
        self.write_info({"network": asdict(network), "versions": versions, "netns": NETNS})
