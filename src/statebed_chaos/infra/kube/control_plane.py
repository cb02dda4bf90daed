"""etcd, the API server, the controller manager and the scheduler, in the cluster's namespace.

etcd listens on the namespace's loopback only (plain HTTP: nothing outside the namespace can
reach it); the API server binds the node address, authorizes with Node and RBAC, and signs
service-account tokens; the controller manager and scheduler talk to it with kubeadm's
kubeconfigs. `wait_ready` polls /readyz through the admin kubeconfig, bounded.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from statebed_base.errors import StatebedError

from . import netns
from .layout import NETNS, ClusterDir, Network
from .procs import start, until

__all__ = ["ApiNotReady", "kubectl", "start_control_plane", "wait_ready"]


class ApiNotReady(StatebedError):
    """The API server did not answer /readyz in time (its log's tail says why)."""


def _etcd(cd: ClusterDir, etcd: Path) -> list[str]:
    local = "http://127.0.0.1"
    return [
        str(etcd), "--name", "statebed", "--data-dir", str(cd.etcd),
        "--listen-client-urls", f"{local}:2379", "--advertise-client-urls", f"{local}:2379",
        "--listen-peer-urls", f"{local}:2380", "--initial-advertise-peer-urls", f"{local}:2380",
        "--initial-cluster", f"statebed={local}:2380", "--listen-metrics-urls", f"{local}:2381",
        "--quota-backend-bytes", str(2 * 1024**3), "--log-level", "warn",
    ]  # fmt: skip


def _apiserver(cd: ClusterDir, bin_dir: Path, net: Network) -> list[str]:
    p = cd.pki
    return [
        str(bin_dir / "kube-apiserver"),
        "--etcd-servers=http://127.0.0.1:2379",
        f"--advertise-address={net.node_ip}", f"--bind-address={net.node_ip}", f"--secure-port={net.api_port}",
        f"--service-cluster-ip-range={net.service_cidr}",
        f"--client-ca-file={p / 'ca.crt'}", f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
        f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
        "--kubelet-preferred-address-types=InternalIP",  # the node's name resolves to the host's loopback
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={p / 'sa.pub'}", f"--service-account-signing-key-file={p / 'sa.key'}",
        "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction", "--allow-privileged=true",
        f"--proxy-client-cert-file={p / 'front-proxy-client.crt'}", f"--proxy-client-key-file={p / 'front-proxy-client.key'}",
        f"--requestheader-client-ca-file={p / 'front-proxy-ca.crt'}", "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-", "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-username-headers=X-Remote-User",
        "--profiling=false", "--v=1",
    ]  # fmt: skip


def _controller_manager(cd: ClusterDir, bin_dir: Path, net: Network) -> list[str]:
    p, conf = cd.pki, cd.kubeconfig("controller-manager")
    return [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={conf}", f"--authentication-kubeconfig={conf}", f"--authorization-kubeconfig={conf}",
        "--bind-address=127.0.0.1", "--leader-elect=false", "--use-service-account-credentials=true",
        f"--client-ca-file={p / 'ca.crt'}", f"--root-ca-file={p / 'ca.crt'}",
        f"--cluster-signing-cert-file={p / 'ca.crt'}", f"--cluster-signing-key-file={p / 'ca.key'}",
        f"--service-account-private-key-file={p / 'sa.key'}", f"--service-cluster-ip-range={net.service_cidr}",
        f"--cluster-cidr={net.pod_cidr}", "--allocate-node-cidrs=false",
        f"--requestheader-client-ca-file={p / 'front-proxy-ca.crt'}",
        "--controllers=*,bootstrapsigner,tokencleaner", "--profiling=false",
    ]  # fmt: skip


def _scheduler(cd: ClusterDir, bin_dir: Path) -> list[str]:
    conf = cd.kubeconfig("scheduler")
    return [
        str(bin_dir / "kube-scheduler"),
        f"--kubeconfig={conf}", f"--authentication-kubeconfig={conf}", f"--authorization-kubeconfig={conf}",
        "--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false",
    ]  # fmt: skip


def kubectl(cd: ClusterDir, bin_dir: Path, *args: str, timeout: float = 60.0, who: str = "admin") -> subprocess.CompletedProcess[str]:
    """kubectl inside the namespace with `who`'s kubeconfig."""
    return netns.run(NETNS, [str(bin_dir / "kubectl"), f"--kubeconfig={cd.kubeconfig(who)}", *args], timeout=timeout)


def start_control_plane(cd: ClusterDir, bin_dir: Path, etcd: Path, net: Network) -> None:
    """etcd, then the API server (ready), then the controller manager and the scheduler."""
    start(cd, "etcd", _etcd(cd, etcd))
    api = start(cd, "kube-apiserver", _apiserver(cd, bin_dir, net))
    wait_ready(cd, bin_dir, lambda: api.proc.poll() is None, who="super-admin")
    _bind_admins(cd, bin_dir)
    start(cd, "kube-controller-manager", _controller_manager(cd, bin_dir, net))
    start(cd, "kube-scheduler", _scheduler(cd, bin_dir))
    _wait_default_account(cd, bin_dir)


def _wait_default_account(cd: ClusterDir, bin_dir: Path) -> None:
    """Until the controller manager made `default/default` (pods are refused before it exists)."""
    account = ("get", "serviceaccount", "default", "-n", "default")
    until(cd, lambda: kubectl(cd, bin_dir, *account, timeout=15).returncode == 0, "kube-controller-manager", ApiNotReady)


def _bind_admins(cd: ClusterDir, bin_dir: Path) -> None:
    """What `kubeadm init` does after its phases: admin.conf's group (kubeadm:cluster-admins) is
    cluster-admin; super-admin.conf (system:masters, past RBAC) is used for this step only."""
    done = kubectl(
        cd, bin_dir, "create", "clusterrolebinding", "kubeadm:cluster-admins",
        "--clusterrole=cluster-admin", "--group=kubeadm:cluster-admins", who="super-admin",
    )  # fmt: skip
    if done.returncode != 0:
        raise ApiNotReady(f"binding kubeadm:cluster-admins: {done.stderr.strip()}")


def wait_ready(cd: ClusterDir, bin_dir: Path, alive: Callable[[], bool], who: str = "admin") -> None:
    """Until /readyz answers ok (bounded; the API server exiting ends it early)."""

    def ready() -> bool:
        return kubectl(cd, bin_dir, "get", "--raw", "/readyz", timeout=15, who=who).stdout.strip() == "ok"

    until(cd, ready, "kube-apiserver", ApiNotReady, alive)
