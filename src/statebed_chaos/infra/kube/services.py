"""Service networking: kube-proxy (Services' virtual IPs) and CoreDNS (their names), both
processes in the cluster's namespace, as kubeadm would run them as pods.

kube-proxy programs iptables inside the namespace only (the rules vanish with it) and
masquerades all Service traffic: a pod reaching a Service whose endpoint sits on the same
bridge gets its reply back through the node, without br_netfilter. CoreDNS serves
`cluster.local` from the API (its kubernetes plugin) on the node address, the kubelet's
`clusterDNS`; it forwards nothing, so no name outside the cluster resolves and no query leaves
the machine. The node itself reaches Services through a route for their range. Both read the API through the admin kubeconfig (no ServiceAccount of their own:
they are not pods).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from statebed_base.errors import StatebedError
from statebed_base.localfs import atomic_write

from . import netns
from .layout import NETNS, ClusterDir, Network
from .pki import node_name
from .procs import start, until

__all__ = ["DNS_READY_PORT", "ServicesNotReady", "start_services"]

DNS_READY_PORT = 8181  # CoreDNS's ready plugin, on the namespace's loopback


class ServicesNotReady(StatebedError):
    """kube-proxy or CoreDNS did not come up (their logs' tails say why)."""


def _proxy_config(cd: ClusterDir, net: Network) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(cd.kubeconfig("admin"))},
        "mode": "iptables",
        "clusterCIDR": net.pod_cidr,
        "bindAddress": net.node_ip,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "hostnameOverride": node_name(),
        "iptables": {"masqueradeAll": True},
        "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},  # no host sysctls
    }


def _corefile(cd: ClusterDir, net: Network) -> str:
    return f""".:53 {{
    bind {net.node_ip}
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {cd.kubeconfig("admin")}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
    ready 127.0.0.1:{DNS_READY_PORT}
}}
"""


def _in_netns(*argv: str) -> subprocess.CompletedProcess[str]:
    return netns.run(NETNS, list(argv), timeout=15)


def _proxy_ready() -> bool:
    """The `kubernetes` Service has its rule: kube-proxy synced the API's Services once."""
    return "default/kubernetes:https" in _in_netns("iptables", "-t", "nat", "-S", "KUBE-SERVICES").stdout


def _dns_ready() -> bool:
    probe = f"import urllib.request as u; u.urlopen('http://127.0.0.1:{DNS_READY_PORT}/ready', timeout=5)"
    return _in_netns(sys.executable, "-c", probe).returncode == 0


def _service_route(net: Network) -> None:
    """A route for the service range, so the node's own connections to a Service pass the routing
    lookup (the namespace has no default route); kube-proxy's DNAT then sends them to a pod."""
    done = _in_netns("ip", "route", "replace", net.service_cidr, "dev", "lo")
    if done.returncode != 0:
        raise ServicesNotReady(f"ip route replace {net.service_cidr} dev lo: {done.stderr.strip()}")


def start_services(cd: ClusterDir, kube: Path, coredns: Path, net: Network) -> None:
    """kube-proxy, then CoreDNS; each ready (bounded) before this returns."""
    atomic_write(cd.node / "kube-proxy.yaml", yaml.safe_dump(_proxy_config(cd, net)).encode())
    atomic_write(cd.node / "Corefile", _corefile(cd, net).encode())
    _service_route(net)
    proxy = start(cd, "kube-proxy", [str(kube / "kube-proxy"), f"--config={cd.node / 'kube-proxy.yaml'}", "--v=1"])
    until(cd, _proxy_ready, "kube-proxy", ServicesNotReady, lambda: proxy.proc.poll() is None)
    dns = start(cd, "coredns", [str(coredns), "-conf", str(cd.node / "Corefile")])
    until(cd, _dns_ready, "coredns", ServicesNotReady, lambda: dns.proc.poll() is None)
