"""Stages 3–4 of `make kube-e2e`: the chart on the node, every image built here (values-kube-up.yaml),
Ready; Services answer by name (CoreDNS) through their virtual IPs (kube-proxy); the driver Job's
`statebed run` puts its executors in pods, its checkpoint in the in-cluster MinIO behind Toxiproxy,
and ends valid; the chaos controller's experiments act on executor pods through the API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Cluster
from test_api_stage import helm

from statebed_chaos.infra.kube.cluster import load_images
from statebed_chaos.matrix import fault_caused

CHART = ROOT / "charts" / "statebed"
RELEASE, NS = "sb", "sbrun"


@pytest.fixture(scope="module")
def chart(cluster: Cluster) -> str:
    """The chart installed with the kube-up profile; Deployments Ready (helm --wait)."""
    load_images(cluster.dir)
    helm(
        cluster, "install", RELEASE, str(CHART), "--namespace", NS, "--create-namespace",
        "-f", str(CHART / "values-kube-up.yaml"), "--set", f"global.runs.hostPath={cluster.dir.runs}",
        "--wait", "--timeout", "15m", timeout=960,
    )  # fmt: skip
    return RELEASE


def in_pod(cluster: Cluster, deploy: str, argv: list[str], timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("exec", "-n", NS, f"deploy/{deploy}", "--", *argv, timeout=timeout)


def test_the_chart_is_ready_on_images_built_here(cluster: Cluster, chart: str) -> None:
    deploys = json.loads(cluster.ok("get", "deployments", "-n", NS, "-o", "json"))["items"]
    assert {d["metadata"]["name"] for d in deploys} >= {
        f"{chart}-{p}" for p in ("minio", "toxiproxy", "chaos", "ingest", "locust-master", "locust-worker")
    }
    for d in deploys:
        assert d["status"].get("readyReplicas") == d["spec"]["replicas"], d["metadata"]["name"]
    cluster.ok("wait", "-n", NS, "--for=condition=complete", f"job/{chart}-minio-bucket", "--timeout=300s")
    pods = json.loads(cluster.ok("get", "pods", "-n", NS, "-o", "json"))["items"]
    images = {c["image"] for p in pods for c in p["spec"]["containers"]}
    assert images and all(i.startswith("localhost/") for i in images), images  # nothing pulled


def test_services_answer_by_name_from_a_pod_and_by_address_from_the_node(cluster: Cluster, chart: str) -> None:
    probe = "import urllib.request as u; print(u.urlopen('http://{}/health', timeout=10).status)"
    done = in_pod(cluster, f"{chart}-chaos", ["python3", "-c", probe.format(f"{chart}-ingest:8080")], timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "200", done.stderr
    svc = json.loads(cluster.ok("get", "service", f"{chart}-ingest", "-n", NS, "-o", "json"))
    ip = svc["spec"]["clusterIP"]
    assert ip.startswith(cluster.dir.network().service_cidr.rsplit(".", 1)[0] + ".")
    done = cluster.run([sys.executable, "-c", probe.format(f"{ip}:8080")], timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "200", done.stderr


def test_the_driver_jobs_run_has_its_executors_in_pods_and_is_valid(cluster: Cluster, chart: str) -> None:
    wait = cluster.kubectl("wait", "-n", NS, "--for=condition=complete", f"job/{chart}-driver", "--timeout=1500s", timeout=1560)
    logs = cluster.kubectl("logs", "-n", NS, f"job/{chart}-driver", "--tail=60").stdout
    assert wait.returncode == 0, f"{wait.stderr}\n{logs}"
    added = executors_added(cluster.dir.runs / f"{chart}-driver")
    pod_net = cluster.dir.network().pod_cidr.rsplit(".", 1)[0] + "."
    assert len(added) >= 2 and all(host.startswith(pod_net) for host in added.values()), added


def executors_added(run: Path) -> dict[str, str]:
    """executor id -> host, from Spark's event logs under the run directory."""
    out: dict[str, str] = {}
    for log in run.rglob("*"):
        if not log.is_file() or "events" not in log.parts:
            continue
        for line in log.read_text(errors="replace").splitlines():
            if '"SparkListenerExecutorAdded"' in line:
                event = json.loads(line)
                out[event["Executor ID"]] = event["Executor Info"]["Host"]
    return out


def chaos(cluster: Cluster, chart: str, experiment: str, out: str) -> dict:  # type: ignore[type-arg]
    """`statebed chaos run EXPERIMENT --backend k8s` in the chart's chaos controller; its verdict.json."""
    argv = [
        "statebed",
        "chaos",
        "run",
        f"/opt/statebed/examples/experiments/{experiment}.yaml",
        "--backend",
        "k8s",
        "--out",
        f"/runs/{out}",
    ]
    done = in_pod(cluster, f"{chart}-chaos", argv)
    verdict = cluster.dir.runs / out / "verdict.json"
    assert verdict.is_file(), f"exit {done.returncode}: {done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    got: dict = json.loads(verdict.read_text())  # type: ignore[type-arg]
    return got


def test_kill_executor_on_v2_kills_an_executor_pods_jvm_spark_replaces_it_and_the_run_is_valid(cluster: Cluster, chart: str) -> None:
    v = chaos(cluster, chart, "kill-executor-count-v2", "kube-kill-executor-v2")
    (fault,) = v["faults"]
    assert fault["fired"] is True, fault["detail"]
    assert v["valid"] is True and v["exit_code"] == 0, v["reasons"]
    signalled = fault["proof"][0]["signal"]["signalled"]
    pods = {s["name"].rsplit("@", 1)[-1] for s in signalled}
    assert len(pods) == 1, signalled  # the JVM and only its own pod's Python workers
    (pod,) = pods
    removed = fault["proof"][1]["executor_removed"]
    assert "exit code 137" in removed["reason"], removed  # Spark relays the pod's container status: SIGKILL
    # Spark asked Kubernetes for a replacement: a third executor pod of the app (the cluster's
    # events; it may join after the run's last batch, so Spark's event log need not show it).
    prefix = pod.rsplit("-exec-", 1)[0] + "-exec-"
    events = json.loads(cluster.ok("get", "events", "-n", NS, "-o", "json"))["items"]
    pods_of_app = {e["involvedObject"]["name"] for e in events if e["involvedObject"]["name"].startswith(prefix)}
    assert len(pods_of_app) >= 3, pods_of_app


def test_pause_executor_on_v2_freezes_an_executor_pod_spark_speculates_and_the_run_is_valid(cluster: Cluster, chart: str) -> None:
    v = chaos(cluster, chart, "pause-executor-count-v2", "kube-pause-executor-v2")
    fired = {f["id"]: f for f in v["faults"]}
    assert fired["f1"]["fired"] is True, fired["f1"]["detail"]  # a copy launched during the pause (Spark's event log)
    assert v["valid"] is True and v["exit_code"] == 0, v["reasons"]


@pytest.mark.parametrize(("fmt", "valid"), [("v1", False), ("v2", True)])
def test_a_zombie_upload_across_executor_pods_is_caught_on_v1_and_valid_on_v2(cluster: Cluster, chart: str, fmt: str, valid: bool) -> None:
    """The seed's appendix on Kubernetes: a speculative copy on the other executor pod, held, then
    released over the winner's changelog. V1 loads by name and serves the zombie's rows; V2 does not."""
    v = chaos(cluster, chart, f"zombie-upload-sample3-{fmt}", f"kube-zombie-{fmt}")
    (fault,) = v["faults"]
    assert fault["fired"] is True, fault["detail"]
    assert v["valid"] is valid, v["reasons"]
    base = v["checks"]["baseline"]
    assert base["itself_invalid"] == [] and not base["error"], base  # the fault-free run was valid: the finding is the fault's
    run = json.loads((cluster.dir.runs / f"kube-zombie-{fmt}" / "faulted" / "run.json").read_text())
    assert str(run["checkpoint"]).startswith("s3://"), run  # the checkpoint was in the in-cluster MinIO, not the hostPath
    if not valid:
        assert v["exit_code"] == 1 and fault_caused(v["anomalies"], {2}, baseline_itself_invalid=False), v["anomalies"]
        assert any(a["check"] == "state" for a in v["anomalies"]), v["anomalies"]


def locust(cluster: Cluster, chart: str, path: str, form: dict[str, int] | None = None) -> dict:  # type: ignore[type-arg]
    """POST to the Locust master's web API through its Service's virtual IP, from the node."""
    ip = json.loads(cluster.ok("get", "service", f"{chart}-locust", "-n", NS, "-o", "json"))["spec"]["clusterIP"]
    body = "&".join(f"{k}={v}" for k, v in (form or {}).items())
    script = (
        "import sys, urllib.request as u; "
        f"print(u.urlopen(u.Request('http://{ip}:8089{path}', data=sys.argv[1].encode()), timeout=20).read().decode())"
    )
    done = cluster.run([sys.executable, "-c", script, body], timeout=60)
    assert done.returncode == 0, done.stderr
    got: dict = json.loads(done.stdout)  # type: ignore[type-arg]
    return got


def test_a_load_run_locust_to_ingest_to_a_spark_job_on_executor_pods_is_valid(cluster: Cluster, chart: str) -> None:
    """Locust's workers (pods) post records to the ingest Service; a `statebed run --source ingest`
    in the chaos controller reads what landed, with executors as pods; both verifiers valid."""
    assert locust(cluster, chart, "/swarm", {"user_count": 4, "spawn_rate": 4})["success"] is True
    try:
        argv = [
            "statebed", "run", "--source", "ingest", "--landing", f"/runs/{chart}-ingest", "--until-records", "3000",
            "--workload", "count", "--format", "v2", "--checkpoint", "s3://statebed/kube-load", "--run-dir", "/runs/kube-load",
            "--master", "k8s://https://kubernetes.default.svc", "--json",
        ]  # fmt: skip
        done = in_pod(cluster, f"{chart}-chaos", argv)
    finally:
        locust(cluster, chart, "/stop")
    assert done.returncode == 0, done.stdout[-3000:]
    summary = json.loads(done.stdout)
    assert summary["records"] >= 3000 and summary["batches"] >= 1, summary
    assert all(v["valid"] is True for v in summary["verdicts"].values()), summary["verdicts"]
    assert len(executors_added(cluster.dir.runs / "kube-load")) >= 2
