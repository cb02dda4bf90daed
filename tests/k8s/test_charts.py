"""The charts, rendered by the real Helm engine for every platform and validated against the
Kubernetes schemas of every version the nightly runs; then the fields that matter, asserted."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
from k8s_render import K8S_VERSIONS, RELEASE, ROOT, VALUES, containers, one, render

from statebed_chaos.infra.kube.images import STATEBED_IMAGE

DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


@pytest.mark.parametrize("platform", list(VALUES))
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_validates_strictly(platform: str, version: str) -> None:
    docs = render(platform)
    assert len(docs) >= 20
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{platform} on {version}: {doc['kind']}/{doc['metadata']['name']}: {e.message} at {list(e.path)}")


@pytest.mark.parametrize("platform", [p for p in VALUES if p != "kube-up"])
def test_third_party_images_are_pinned_by_digest(platform: str) -> None:
    docs = render(platform)
    minio = containers(one(docs, "Deployment", f"{RELEASE}-minio"))[0]["image"]
    assert re.match(r"^quay\.io/minio/minio:RELEASE\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ@sha256:[0-9a-f]{64}$", minio), minio
    assert DIGEST.search(containers(one(docs, "Job", f"{RELEASE}-minio-bucket"))[0]["image"])
    toxi = containers(one(docs, "Deployment", f"{RELEASE}-toxiproxy"))[0]["image"]
    assert toxi.startswith("ghcr.io/shopify/toxiproxy:") and DIGEST.search(toxi), toxi


def test_the_kube_up_profile_runs_only_images_built_here_and_never_pulls() -> None:
    """The cluster `make kube-up` builds has no registry: every container's image is a local tag
    (imported into the node by statebed_chaos.infra.kube.images), statebed's with pullPolicy Never."""
    docs = render("kube-up")
    pods = [d for d in docs if d["kind"] in ("Deployment", "Job")]
    images = {c["image"] for d in pods for c in containers(d)}
    assert images and all(i.startswith("localhost/") and "@" not in i for i in images), images
    mine = [c for d in pods for c in containers(d) if c["image"].startswith("localhost/statebed:")]
    assert mine and all(c["imagePullPolicy"] == "Never" for c in mine)
    assert {c["image"] for c in mine} == {STATEBED_IMAGE}  # the tag images.py imports (the Makefile's SMOKE_IMAGE)
    assert f"SMOKE_IMAGE  ?= {STATEBED_IMAGE}" in (ROOT / "Makefile").read_text()


def test_statebed_image_is_wired_everywhere_and_takes_a_digest() -> None:
    digest = "sha256:" + "ab" * 32
    docs = render("default", f"global: {{image: {{repository: reg.example/statebed, tag: t1, digest: '{digest}'}}}}")
    want = f"reg.example/statebed:t1@{digest}"
    for name, kind in [("driver", "Job"), ("chaos", "Deployment"), ("ingest", "Deployment"), ("locust-master", "Deployment")]:
        assert containers(one(docs, kind, f"{RELEASE}-{name}"))[0]["image"] == want, name
    conf = one(docs, "ConfigMap", f"{RELEASE}-spark-conf")["data"]["spark-defaults.conf"]
    assert re.search(rf"^spark\.kubernetes\.container\.image\s+{re.escape(want)}$", conf, re.M)


def test_executor_pods_carry_the_label_the_chaos_backend_selects_on() -> None:
    import yaml

    docs = render("default")
    data = one(docs, "ConfigMap", f"{RELEASE}-spark-conf")["data"]
    template = yaml.safe_load(data["executor-pod-template.yaml"])
    labels = template["metadata"]["labels"]
    selector = {e["name"]: e.get("value") for e in containers(one(docs, "Deployment", f"{RELEASE}-chaos"))[0]["env"]}[
        "STATEBED_K8S_EXECUTOR_SELECTOR"
    ]
    assert dict(kv.split("=") for kv in selector.split(",")) == {k: labels[k] for k in ("statebed.io/target", "app.kubernetes.io/instance")}
    assert labels["statebed.io/target"] == "executor"
    assert (
        "spark.kubernetes.executor.podTemplateFile             /etc/statebed/spark/executor-pod-template.yaml"
        in data["spark-defaults.conf"]
    )
    assert template["spec"]["containers"][0]["name"] == "executor"
    env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
    assert env["SPARK_LOCAL_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"  # attempt records name the pod IP


def test_spark_driver_job_submits_to_kubernetes_as_the_spark_service_account() -> None:
    docs = render("default")
    job = one(docs, "Job", f"{RELEASE}-driver")
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{RELEASE}-spark" and pod["restartPolicy"] == "Never"
    script = containers(job)[0]["args"][0]
    assert "spark-submit --master k8s://https://kubernetes.default.svc --deploy-mode client" in script
    assert "--resume" in script and "run.json" in script  # a replaced driver pod resumes the run
    role = one(docs, "Role", f"{RELEASE}-spark")
    creatable = {r for rule in role["rules"] if "create" in rule["verbs"] for r in rule["resources"]}
    assert {"pods", "services", "configmaps"} <= creatable
    token = one(docs, "Secret", f"{RELEASE}-spark-token")
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == f"{RELEASE}-spark"
    assert pod["securityContext"]["runAsUser"] == 185
    (init,) = pod["initContainers"]  # the hostPath runs directory handed to uid 185 first
    assert init["command"] == ["chown", "185:185", "/runs"] and init["securityContext"]["capabilities"]["add"] == ["CHOWN"]


def test_toxiproxy_listens_on_all_addresses_and_the_store_goes_through_it() -> None:
    import json

    docs = render("default")
    toxi = containers(one(docs, "Deployment", f"{RELEASE}-toxiproxy"))[0]
    assert "-host=0.0.0.0" in toxi["args"] and "-port=8474" in toxi["args"]
    proxies = json.loads(one(docs, "ConfigMap", f"{RELEASE}-toxiproxy")["data"]["toxiproxy.json"])
    assert proxies == [{"name": "s3", "listen": "0.0.0.0:9000", "upstream": f"{RELEASE}-minio:9000", "enabled": True}]
    through = f"http://{RELEASE}-toxiproxy:9000"
    for name, kind in [("driver", "Job"), ("chaos", "Deployment"), ("ingest", "Deployment")]:
        env = {e["name"]: e.get("value") for e in containers(one(docs, kind, f"{RELEASE}-{name}"))[0]["env"]}
        assert env["STATEBED_S3_ENDPOINT"] == through, name
        assert env["STATEBED_S3_DIRECT"] == f"http://{RELEASE}-minio:9000", name  # MinIO itself, past the toxics
    conf = one(docs, "ConfigMap", f"{RELEASE}-spark-conf")["data"]
    assert f"spark.hadoop.fs.s3a.endpoint                          {through}" in conf["spark-defaults.conf"]
    assert f'value: "{through}"' in conf["executor-pod-template.yaml"]
    svc = one(docs, "Service", f"{RELEASE}-toxiproxy")
    assert {p["port"] for p in svc["spec"]["ports"]} == {8474, 9000}


@pytest.mark.parametrize("platform", list(VALUES))
def test_long_running_containers_have_probes_and_every_container_resources(platform: str) -> None:
    docs = render(platform)
    for doc in docs:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        name = doc["metadata"]["name"]
        for c in [*doc["spec"]["template"]["spec"].get("initContainers", []), *containers(doc)]:
            assert c["resources"]["requests"] and c["resources"]["limits"], f"{name}/{c['name']}"
        if doc["kind"] == "Deployment" and name != f"{RELEASE}-locust-worker":  # workers serve nothing to probe
            assert all("readinessProbe" in c for c in containers(doc)), f"{name} has a container without a readiness probe"


def test_minio_creates_the_bucket_the_store_uses() -> None:
    docs = render("default")
    mc = containers(one(docs, "Job", f"{RELEASE}-minio-bucket"))[0]
    assert mc["args"] == ["mb", "--ignore-existing", "s3/statebed"] and "command" not in mc  # the image's entrypoint is mc
    names = [e["name"] for e in mc["env"]]
    value = {e["name"]: e.get("value") for e in mc["env"]}["MC_HOST_s3"]
    assert value == f"http://$(ACCESS_KEY):$(SECRET_KEY)@{RELEASE}-minio:9000"
    assert names.index("MC_HOST_s3") > names.index("SECRET_KEY")  # $(VAR) expands only variables defined before it
    assert one(docs, "Job", f"{RELEASE}-driver")  # its checkpoint is in that bucket:
    assert "--checkpoint s3://statebed/" in containers(one(docs, "Job", f"{RELEASE}-driver"))[0]["args"][0]


def test_minikube_values_differ_where_they_should() -> None:
    kind, mk = render("kind"), render("minikube")
    assert containers(one(mk, "Job", f"{RELEASE}-driver"))[0]["imagePullPolicy"] == "Never"
    assert containers(one(kind, "Job", f"{RELEASE}-driver"))[0]["imagePullPolicy"] == "IfNotPresent"
    assert one(mk, "Deployment", f"{RELEASE}-locust-worker")["spec"]["replicas"] == 1


def test_parts_can_be_switched_off() -> None:
    docs = render("default", "load: {enabled: false}\nchaos: {enabled: false}")
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", f"{RELEASE}-chaos") not in kinds and ("Deployment", f"{RELEASE}-ingest") not in kinds
    assert ("Deployment", f"{RELEASE}-minio") in kinds


@pytest.mark.parametrize("platform", list(VALUES))
def test_helm_lint_strict_finds_nothing_above_info(platform: str) -> None:
    import yaml
    from helm_python.chart import lint
    from k8s_render import CHART

    path = VALUES[platform]
    values = yaml.safe_load(path.read_text()) if path is not None else None
    report = lint(CHART, values, strict=True, namespace="statebed", kube_version="v1.35.0")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report
