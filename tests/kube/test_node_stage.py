"""Stage 3 of `make kube-e2e`: containerd, the CNI bridge and the kubelet in the cluster's
namespace; a pod from an image built here (never pulled) runs with an address on the bridge."""

from __future__ import annotations

import json
import subprocess

from conftest import Cluster

from statebed_chaos.infra.kube.images import PAUSE_IMAGE


def test_the_node_is_ready_and_runs_a_pod_from_an_image_built_here(cluster: Cluster) -> None:
    nodes = json.loads(cluster.ok("get", "nodes", "-o", "json"))["items"]
    assert len(nodes) == 1 and nodes[0]["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sleeper", "namespace": "default"},
        "spec": {"automountServiceAccountToken": False, "containers": [{"name": "c", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}]},
    }
    manifest = cluster.dir.scratch / "sleeper.json"
    manifest.write_text(json.dumps(pod))
    cluster.ok("apply", "-f", str(manifest))
    cluster.ok("wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s")
    got = json.loads(cluster.ok("get", "pod", "sleeper", "-o", "json"))
    net = cluster.dir.network()
    assert got["status"]["podIP"].startswith(net.pod_cidr.rsplit(".", 1)[0] + ".")
    outside = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    assert net.pod_cidr.rsplit(".", 1)[0] not in outside  # the pod network lives in the cluster's namespace only
    cluster.ok("delete", "pod", "sleeper", "--wait=true")
