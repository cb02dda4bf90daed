"""Stage 2 of `make kube-e2e`: etcd and the control plane, the chart installed by Helm, its RBAC
judged by the real authorizer (SubjectAccessReview per service account), a cluster-mode
spark-submit creating what Spark's submission creates with the chart's Spark identity.

Found here, by the real authorizer, fixed in the chart: Spark 4.3's submission applies the
driver's Service, ConfigMap and NetworkPolicy server-side (PATCH ?force=true), which the Spark
Role did not allow (patch; networkpolicies)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, Cluster

from statebed_base.installed import installed
from statebed_chaos.targets.k8s import API_CALLS

CHART = ROOT / "charts" / "statebed"
PROFILES = {"default": []} | {p: ["-f", str(CHART / f"values-{p}.yaml")] for p in ("kind", "minikube", "kube-up")}
# What Spark's driver does with its Role (tests/k8s/test_rbac.py derives the same table from Spark's docs).
SPARK_CALLS = {(r, v) for r in ("pods", "configmaps", "services") for v in ("create", "get", "list", "watch", "delete")}
SPARK_CALLS |= {(r, "patch") for r in ("configmaps", "services")}
SPARK_CALLS |= {("networkpolicies", v) for v in ("create", "get", "patch", "delete")}
NEVER = {("secrets", "get"), ("secrets", "list"), ("nodes", "list"), ("pods", "patch"), ("roles", "create")}


def helm(cluster: Cluster, *args: str, timeout: float = 300) -> str:
    done = cluster.run([str(installed("helm") / "helm"), f"--kubeconfig={cluster.dir.kubeconfig('admin')}", *args], timeout=timeout)
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
    return done.stdout


def allowed(cluster: Cluster, namespace: str, account: str, resource: str, verb: str) -> bool:
    """The real authorizer's answer for a ServiceAccount (a SubjectAccessReview through the API)."""
    res, _, sub = resource.partition("/")
    group = {"roles": "rbac.authorization.k8s.io", "networkpolicies": "networking.k8s.io"}.get(res, "")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{account}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
            "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group, "resource": res, "subresource": sub},
        },
    }
    path = cluster.dir.scratch / f"sar-{uuid.uuid4().hex}.json"
    path.write_text(json.dumps(review))
    out = json.loads(cluster.ok("create", "-o", "json", "-f", str(path)))
    return bool(out["status"].get("allowed"))


@pytest.fixture(scope="module")
def installed_chart(cluster: Cluster) -> Iterator[str]:
    """The chart, default profile, in namespace `statebed` (the RBAC and submission tests' subject);
    uninstalled after them: its pods (images not here: never started) still hold CPU requests the
    chart stage's release needs on this one node."""
    runs = ["--set", f"global.runs.hostPath={cluster.dir.runs / 'statebed'}"]
    helm(cluster, "install", "statebed", str(CHART), "--namespace", "statebed", "--create-namespace", *runs)
    yield "statebed"
    helm(cluster, "uninstall", "statebed", "--namespace", "statebed", "--wait")


@pytest.mark.parametrize("profile", [p for p in PROFILES if p != "default"])
def test_every_profile_installs_and_uninstalls(cluster: Cluster, profile: str) -> None:
    ns = f"profile-{profile}"
    runs = [
        "--set",
        f"global.runs.hostPath={cluster.dir.runs / ns}",
        "--set",
        "spark.driver.enabled=false",
    ]  # nothing outside the cluster's directory
    helm(cluster, "install", "statebed", str(CHART), "--namespace", ns, "--create-namespace", *PROFILES[profile], *runs)
    status = yaml.safe_load(helm(cluster, "status", "statebed", "--namespace", ns, "-o", "yaml"))
    assert status["info"]["status"] == "deployed"
    kinds = {d["kind"] for d in yaml.safe_load_all(helm(cluster, "get", "manifest", "statebed", "--namespace", ns)) if d}
    for kind in ("Deployment", "Role", "RoleBinding", "ServiceAccount", "Service"):
        assert kind in kinds
    assert json.loads(cluster.ok("get", "deployments", "-n", ns, "-o", "json"))["items"]  # the API server admitted them
    helm(cluster, "uninstall", "statebed", "--namespace", ns, "--wait")


def test_the_chaos_account_may_make_exactly_the_chaos_backends_calls(cluster: Cluster, installed_chart: str) -> None:
    needed = {(r, v) for r, verbs in API_CALLS.values() for v in verbs}
    for resource, verb in sorted(needed):
        assert allowed(cluster, "statebed", f"{installed_chart}-chaos", resource, verb), (resource, verb)
    for resource, verb in sorted(NEVER | {("pods", "create"), ("services", "delete"), ("configmaps", "create")}):
        assert not allowed(cluster, "statebed", f"{installed_chart}-chaos", resource, verb), (resource, verb)
    assert not allowed(cluster, "default", f"{installed_chart}-chaos", "pods", "delete")  # its namespace only


def test_the_spark_account_may_make_the_drivers_calls_and_no_others(cluster: Cluster, installed_chart: str) -> None:
    for resource, verb in sorted(SPARK_CALLS):
        assert allowed(cluster, "statebed", f"{installed_chart}-spark", resource, verb), (resource, verb)
    for resource, verb in sorted(NEVER | {("pods/exec", "create")}):
        assert not allowed(cluster, "statebed", f"{installed_chart}-spark", resource, verb), (resource, verb)


def test_a_cluster_mode_submission_with_the_spark_token_creates_the_drivers_objects(cluster: Cluster, installed_chart: str) -> None:
    """spark-submit --deploy-mode cluster, authenticated as the chart's Spark account (a token the
    API issues for it): the driver pod, its Service and ConfigMap appear (no node yet: the pod stays
    Pending). A call the Role lacks would fail the submission with a 403, named in its output."""
    sa = f"{installed_chart}-spark"
    token = cluster.dir.scratch / "spark.token"
    token.write_text(cluster.ok("create", "token", sa, "-n", "statebed", "--duration=10m").strip())
    app = f"submit-{uuid.uuid4().hex[:8]}"
    net = cluster.dir.network()
    done = cluster.run(
        [
            str(Path(pyspark_home()) / "bin" / "spark-submit"),
            "--master", f"k8s://{net.api_url}", "--deploy-mode", "cluster", "--name", app,
            "--conf", "spark.kubernetes.namespace=statebed",
            "--conf", f"spark.kubernetes.authenticate.submission.caCertFile={cluster.dir.pki / 'ca.crt'}",
            "--conf", f"spark.kubernetes.authenticate.submission.oauthTokenFile={token}",
            "--conf", f"spark.kubernetes.authenticate.driver.serviceAccountName={sa}",
            "--conf", "spark.kubernetes.container.image=localhost/statebed:smoke",
            "--conf", "spark.kubernetes.container.image.pullPolicy=Never",
            "--conf", "spark.kubernetes.submission.waitAppCompletion=false",
            "--conf", f"spark.kubernetes.driver.pod.name={app}-driver",
            "local:///opt/statebed/statebed.py", "run",
        ],
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, "\n".join(ln for ln in done.stderr.splitlines() if not ln.lstrip().startswith("at "))[-4000:]
    pod = json.loads(cluster.ok("get", "pod", f"{app}-driver", "-n", "statebed", "-o", "json"))
    assert pod["spec"]["serviceAccountName"] == sa and pod["status"]["phase"] == "Pending"
    kinds = ("services", "configmaps", "networkpolicies.networking.k8s.io")
    owned = {(o["kind"], o["metadata"]["name"]) for kind in kinds for o in _owned_by(cluster, kind, pod)}
    assert {k for k, _ in owned} == {"Service", "ConfigMap", "NetworkPolicy"}, owned
    cluster.ok("delete", "pod", f"{app}-driver", "-n", "statebed", "--wait=true")


def _owned_by(cluster: Cluster, kind: str, pod: dict) -> list[dict]:  # type: ignore[type-arg]
    items = json.loads(cluster.ok("get", kind, "-n", "statebed", "-o", "json"))["items"]
    return [o for o in items if any(r.get("uid") == pod["metadata"]["uid"] for r in o["metadata"].get("ownerReferences", []))]


def pyspark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)
