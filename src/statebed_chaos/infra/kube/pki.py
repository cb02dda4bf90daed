"""The cluster's certificates and kubeconfigs, made by kubeadm's own phases (offline: the version is given).

`kubeadm init phase certs all` and `kubeadm init phase kubeconfig all` with a config naming the
node's address, the service range and the directories: the API server's certificate names the
node address, the `kubernetes` Service address and its DNS names, so pods and tools inside the
namespace can verify it.
"""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

from statebed_base.errors import StatebedError
from statebed_base.localfs import atomic_write

from .layout import ClusterDir, Network
from .procs import run_tool

__all__ = ["PkiError", "make_pki", "node_name"]


class PkiError(StatebedError):
    """kubeadm failed to make the certificates or kubeconfigs."""


def node_name() -> str:
    """The node's name (kubeadm and the kubelet agree on it: the lower-cased host name)."""
    return socket.gethostname().lower()


def _config(cd: ClusterDir, net: Network, version: str) -> str:
    init = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "InitConfiguration",
        "localAPIEndpoint": {"advertiseAddress": net.node_ip, "bindPort": net.api_port},
        "nodeRegistration": {"name": node_name()},
    }
    cluster = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "kubernetesVersion": version,
        "certificatesDir": str(cd.pki),
        "clusterName": "statebed",
        "controlPlaneEndpoint": f"{net.node_ip}:{net.api_port}",
        "networking": {"serviceSubnet": net.service_cidr, "podSubnet": net.pod_cidr, "dnsDomain": "cluster.local"},
        "apiServer": {"certSANs": [net.node_ip, net.kubernetes_service_ip, "127.0.0.1"]},
    }
    return yaml.safe_dump_all([init, cluster], sort_keys=False)


def make_pki(cd: ClusterDir, kubeadm: Path, net: Network, version: str) -> None:
    """Certificates under pki/ and admin, controller-manager, scheduler and kubelet kubeconfigs."""
    cd.root.mkdir(parents=True, exist_ok=True)
    config = cd.root / "kubeadm.yaml"
    atomic_write(config, _config(cd, net, version).encode())
    for phase, extra in (("certs", []), ("kubeconfig", ["--kubeconfig-dir", str(cd.kubeconfigs)])):
        argv = [str(kubeadm), "init", "phase", phase, "all", "--config", str(config), *extra]
        run_tool(argv, PkiError, f"kubeadm init phase {phase} all", timeout=120)
