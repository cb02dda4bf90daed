"""The node: containerd (CRI), the CNI bridge, the kubelet, in the cluster's namespace.

Nothing is pulled: the sandbox image is `pause` (built by kube-tools) in a scratch image made
with podman here and imported into containerd's `k8s.io` namespace, as is every image a pod
uses (`import_image`, `imagePullPolicy: Never`). containerd keeps its root, state, socket and
the pods' network namespaces under the cluster directory and runs Debian's runc (with
seccomp: the kubelet's sandboxes ask for RuntimeDefault); it clamps a pod's oom_score_adj to
its own (`restrict_oom_score_adj`), because this machine refuses a lower one and the sandbox
asks -998 (runc then fails with "can't get final child's PID from pipe"). The kubelet uses
cgroupfs on this machine's cgroup v1 hierarchy (`failCgroupV1: false`).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from pathlib import Path

import yaml

from statebed_base.errors import StatebedError
from statebed_base.localfs import atomic_write
from statebed_base.processes import ProcessIdentity, identify

from .control_plane import kubectl
from .images import PAUSE_IMAGE, import_image, pause_image
from .layout import ClusterDir, Network
from .pki import node_name
from .procs import start, until

__all__ = ["NodeNotReady", "drain_pods", "our_shims", "remove_containers", "start_node"]


class NodeNotReady(StatebedError):
    """containerd or the kubelet did not come up (their logs' tails say why)."""


def _containerd_config(cd: ClusterDir, cni: Path, runc: Path) -> str:
    return f"""version = 3
root = "{cd.node / "containerd"}"
state = "{cd.node / "containerd-state"}"
[grpc]
  address = "{cd.containerd_socket}"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{PAUSE_IMAGE}'
[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  enable_cdi = false
  restrict_oom_score_adj = true  # this machine refuses a lower oom_score_adj than ours (the sandbox asks -998)
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    BinaryName = '{runc}'
    SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{cni}']
    conf_dir = '{cd.node / "cni"}'
"""


def _cni_config(net: Network) -> dict[str, object]:
    gateway = net.pod_cidr.split("/")[0].rsplit(".", 1)[0] + ".1"
    return {
        "cniVersion": "1.0.0",
        "name": "statebed",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "isDefaultGateway": True,  # pods reach the node address (DNS, the API) and Services through it
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": net.pod_cidr, "gateway": gateway}]], "dataDir": ""},
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _kubelet_config(cd: ClusterDir, net: Network) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": net.node_ip,
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{cd.containerd_socket}",
        "authentication": {"x509": {"clientCAFile": str(cd.pki / "ca.crt")}, "webhook": {"enabled": True}, "anonymous": {"enabled": False}},
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local",
        "clusterDNS": [net.node_ip],  # CoreDNS (services.py) on the node address
        "resolvConf": str(cd.node / "resolv.conf"),
        "podLogsDir": str(cd.node / "pod-logs"),  # never /var/log/pods
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "registerNode": True,
        "rotateCertificates": False,
        "localStorageCapacityIsolation": False,
    }


def start_node(cd: ClusterDir, kube: Path, containerd: Path, cni: Path, pause: Path, net: Network) -> None:
    """containerd, then the pause image in it, then the kubelet; Ready within READY_TIMEOUT_S."""
    for d in ("containerd", "containerd-state", "cni", "kubelet"):
        (cd.node / d).mkdir(parents=True, exist_ok=True)
    atomic_write(cd.node / "containerd.toml", _containerd_config(cd, cni, Path(shutil.which("runc") or "runc")).encode())
    atomic_write(cd.node / "cni" / "10-statebed.conflist", json.dumps(_cni_config(net), indent=1).encode())
    atomic_write(cd.node / "resolv.conf", b"nameserver 127.0.0.1\n")  # a pod with dnsPolicy Default resolves nothing
    atomic_write(cd.node / "kubelet.yaml", yaml.safe_dump(_kubelet_config(cd, net)).encode())
    env = {**os.environ, "PATH": f"{containerd}:{os.environ.get('PATH', '')}"}
    start(cd, "containerd", [str(containerd / "containerd"), "--config", str(cd.node / "containerd.toml")], env=env)
    until(cd, cd.containerd_socket.exists, "containerd", NodeNotReady)
    import_image(cd, containerd, pause_image(cd, pause))
    start(
        cd,
        "kubelet",
        [
            str(kube / "kubelet"),
            f"--config={cd.node / 'kubelet.yaml'}",
            f"--kubeconfig={cd.kubeconfig('kubelet')}",
            f"--root-dir={cd.node / 'kubelet'}",
            f"--node-ip={net.node_ip}",
            f"--hostname-override={node_name()}",
            "--v=1",
        ],
        env=env,
    )
    until(cd, lambda: _node_ready(cd, kube), "kubelet", NodeNotReady)


def _node_ready(cd: ClusterDir, kube: Path) -> bool:
    done = kubectl(cd, kube, "get", "node", node_name(), "-o", "json", timeout=15)
    if done.returncode != 0:
        return False
    conds = json.loads(done.stdout)["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def remove_containers(cd: ClusterDir, containerd: Path) -> int:
    """Every task and container containerd runs for this cluster, killed and deleted by containerd
    itself (it started them: the shims and the containers' processes are its children, not ours);
    how many tasks were running. Nothing to do when its socket is gone."""
    if not cd.containerd_socket.exists():
        return 0

    def ctr(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(containerd / "ctr"), "--address", str(cd.containerd_socket), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    killed = 0
    for ns in [n for n in ctr("namespaces", "ls", "-q").stdout.split() if n]:
        tasks = [t for t in ctr("-n", ns, "tasks", "ls", "-q").stdout.split() if t]
        for task in tasks:
            ctr("-n", ns, "tasks", "kill", "-a", "-s", "SIGKILL", task)
        for task in tasks:
            ctr("-n", ns, "tasks", "delete", "-f", task)  # waits for the exit; the shim exits with its task
        for container in [c for c in ctr("-n", ns, "containers", "ls", "-q").stdout.split() if c]:
            ctr("-n", ns, "containers", "delete", container)
        sandboxes = [line.split()[0] for line in ctr("-n", ns, "sandboxes", "ls").stdout.splitlines()[1:] if line.strip()]
        for sandbox in sandboxes:  # a pod sandbox's shim exits only when its sandbox is removed
            ctr("-n", ns, "sandboxes", "rm", "-f", sandbox)
        killed += len(tasks)
    return killed


def drain_pods(cd: ClusterDir, kube: Path) -> bool:
    """Delete every pod through the API and wait (bounded) until they are gone: the kubelet then
    stops their containers and sandboxes through the CRI, so their shims exit too."""
    done = kubectl(cd, kube, "delete", "pods", "--all", "--all-namespaces", "--grace-period=5", "--wait", "--timeout=90s", timeout=120)
    return done.returncode == 0


def our_shims(cd: ClusterDir) -> list[ProcessIdentity]:
    """The shims still serving this cluster's containerd (their command line names its socket,
    under the cluster directory), pinned now so `down` can stop them by identity."""
    found: list[ProcessIdentity] = []
    for entry in Path("/proc").iterdir():
        ident = identify(int(entry.name)) if entry.name.isdigit() else None
        argv = ident.cmdline if ident is not None else None
        shim = argv is not None and bool(argv) and Path(argv[0]).name == "containerd-shim-runc-v2"
        if ident is not None and shim and ("-address", str(cd.containerd_socket)) in itertools.pairwise(argv or ()):
            found.append(ident)
    return found
