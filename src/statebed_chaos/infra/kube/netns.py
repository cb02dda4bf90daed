"""The cluster's network namespace: made, entered (`nsenter --net`), and removed with what is in it.

The node's address sits on the namespace's loopback (this kernel has no dummy interfaces; Linux
answers for a local address on any interface): the API server binds it, pods reach it through
their bridge's gateway, and nothing outside the namespace routes to it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from statebed_base.errors import StatebedError
from statebed_base.log import get_logger, kv

__all__ = ["NetnsError", "create", "exec_argv", "exists", "remove", "run"]

log = get_logger("kube.netns")
RUN_NETNS = Path("/run/netns")


class NetnsError(StatebedError):
    """`ip` refused a namespace operation (not root, no iproute2, a name taken)."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip() or f'exit {done.returncode}'}")


def exists(name: str) -> bool:
    return (RUN_NETNS / name).exists()


def exec_argv(name: str, argv: list[str]) -> list[str]:
    """`argv` run inside the namespace. `nsenter --net` enters the network namespace only and
    execs (the PID is the program's); `ip netns exec` would also remount /sys in a new mount
    namespace, hiding the cgroup mounts the kubelet and runc need."""
    return ["nsenter", f"--net={RUN_NETNS / name}", "--", *argv]


def run(name: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`argv` inside namespace `name`, to its end, its output captured (never raises on exit status)."""
    return subprocess.run(exec_argv(name, argv), capture_output=True, text=True, timeout=timeout, check=False)


def create(name: str, node_ip: str) -> None:
    """The namespace with loopback up, carrying `node_ip`/32 too (refused if it exists)."""
    if exists(name):
        raise NetnsError(f"network namespace {name} exists (a cluster is up, or one was left: make kube-down)")
    _ip("netns", "add", name)
    try:
        for args in (("link", "set", "lo", "up"), ("addr", "add", f"{node_ip}/32", "dev", "lo")):
            _ip("-n", name, *args)
    except NetnsError:
        remove(name)
        raise
    log.info("network namespace made", extra=kv(netns=name, node_ip=node_ip))


def remove(name: str) -> bool:
    """Remove the namespace (its interfaces, routes and iptables rules go with it); False if none."""
    if not exists(name):
        return False
    _ip("netns", "del", name)
    return True
