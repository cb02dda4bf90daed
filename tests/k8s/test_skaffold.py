"""skaffold.yaml: valid against skaffold's published v4beta14 schema (vendored, see SOURCES.md)
and consistent with the charts: every chart and values file exists, every built image is wired
into the release and used by the verifiers, and the verify Job sees what the driver wrote."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from k8s_render import K8S_VERSIONS, ROOT, containers, one, render

SCHEMA = json.loads((Path(__file__).parent / "skaffold-v4beta14.schema.json").read_text())
SKAFFOLD = yaml.safe_load((ROOT / "skaffold.yaml").read_text())


def _profile(name: str) -> dict[str, Any]:
    """skaffold.yaml with one profile's patches applied (the "add ... /-" form this file uses)."""
    doc = copy.deepcopy(SKAFFOLD)
    (profile,) = [p for p in SKAFFOLD["profiles"] if p["name"] == name]
    for patch in profile.get("patches", []):
        assert patch["op"] == "add" and patch["path"].endswith("/-"), patch
        node: Any = doc
        for part in patch["path"].strip("/").split("/")[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node.append(patch["value"])
    return doc


def test_validates_against_the_published_v4beta14_schema() -> None:
    assert SKAFFOLD["apiVersion"] == "skaffold/v4beta14"
    jsonschema.Draft7Validator(SCHEMA).validate(SKAFFOLD)


def test_the_schema_rejects_what_skaffold_would() -> None:
    bad = copy.deepcopy(SKAFFOLD)
    bad["deploy"]["helm"]["releases"][0]["setValueTemplate"] = {}  # a typo of setValueTemplates
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(SCHEMA).validate(bad)


@pytest.mark.parametrize("profile", ["kind", "minikube"])
def test_profiles_deploy_existing_charts_with_their_values(profile: str) -> None:
    doc = _profile(profile)
    (release,) = doc["deploy"]["helm"]["releases"]
    assert (ROOT / release["chartPath"] / "Chart.yaml").is_file()
    assert release["valuesFiles"] == ["charts/statebed/values.yaml", f"charts/statebed/values-{profile}.yaml"]
    assert all((ROOT / f).is_file() for f in release["valuesFiles"])
    assert release["name"] == "statebed" and release["namespace"] == "statebed"  # what k8s/verify-job.yaml assumes


def test_every_built_image_is_wired_into_the_release_and_the_verifiers() -> None:
    images = {a["image"] for a in SKAFFOLD["build"]["artifacts"]}
    assert images == {"statebed"}
    assert (ROOT / SKAFFOLD["build"]["artifacts"][0]["docker"]["dockerfile"]).is_file()
    templates = SKAFFOLD["deploy"]["helm"]["releases"][0]["setValueTemplates"]
    for image in images:
        assert templates["global.image.repository"] == f"{{{{.IMAGE_REPO_{image}}}}}"
        assert templates["global.image.tag"] == f"{{{{.IMAGE_TAG_{image}}}}}"
    assert {v["container"]["image"] for v in SKAFFOLD["verify"]} <= images
    # the keys it sets exist in the chart's values
    values = yaml.safe_load((ROOT / "charts/statebed/values.yaml").read_text())
    for key in templates:
        node = values
        for part in key.split("."):
            assert part in node, f"setValueTemplates {key}: no such value in charts/statebed/values.yaml"
            node = node[part]


@pytest.mark.parametrize("platform", ["kind", "minikube"])
def test_verifiers_read_what_the_driver_writes(platform: str) -> None:
    docs = render(platform)
    script = containers(one(docs, "Job", "statebed-driver"))[0]["args"][0]
    checkpoint = re.search(r"--checkpoint (\S+)", script)
    assert checkpoint
    by_name = {v["name"]: v["container"]["args"] for v in SKAFFOLD["verify"]}
    assert by_name["lineage"][:3] == ["verify", "lineage", checkpoint.group(1)]
    values = yaml.safe_load((ROOT / "charts/statebed/values.yaml").read_text())["global"]["runs"]
    assert by_name["state"] == ["verify", "state", f"{values['mountPath']}/statebed-driver"]
    assert f"RUN={values['mountPath']}/statebed-driver" in script
    job = yaml.safe_load((ROOT / SKAFFOLD["verify"][0]["executionMode"]["kubernetesCluster"]["jobManifestPath"]).read_text())
    driver_volumes = {v["name"]: v for v in one(docs, "Job", "statebed-driver")["spec"]["template"]["spec"]["volumes"]}
    assert job["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] == driver_volumes["runs"]["hostPath"]["path"]
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    driver_env = {e["name"]: e for e in containers(one(docs, "Job", "statebed-driver"))[0]["env"]}
    for name in ("STATEBED_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[name] == driver_env[name], name


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_verify_job_manifest_validates(version: str) -> None:
    job = yaml.safe_load((ROOT / "k8s/verify-job.yaml").read_text())
    kubernetes_validate.validate(job, version, strict=True)


def _skaffold_verify_job(verify: dict[str, Any]) -> dict[str, Any]:
    """The Job skaffold runs for one verify entry with a jobManifestPath: skaffold's own merge rule
    (pkg/skaffold/verify/k8sjob/verify.go, createJobFromManifestPath + patchToK8sContainer): the
    manifest container whose name equals the verify container's name is the base (none: an empty
    container), its image, name, command and args are replaced, env is appended; it becomes the only
    container. The pod's own fields (volumes, securityContext) stay."""
    job = yaml.safe_load((ROOT / verify["executionMode"]["kubernetesCluster"]["jobManifestPath"]).read_text())
    want = verify["container"]
    base = next((c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == want["name"]), {})
    merged = {**copy.deepcopy(base), "image": want["image"], "name": want["name"]}
    for key in ("command", "args"):
        if key in want:
            merged[key] = want[key]
    merged["env"] = [*merged.get("env", []), *want.get("env", [])]
    job["spec"]["template"]["spec"]["containers"] = [merged]
    return job


@pytest.mark.parametrize("name", ["lineage", "state"])
def test_verify_containers_keep_the_manifests_env_mounts_and_security_after_skaffolds_merge(name: str) -> None:
    (verify,) = [v for v in SKAFFOLD["verify"] if v["name"] == name]
    manifest = yaml.safe_load((ROOT / "k8s/verify-job.yaml").read_text())
    assert verify["container"]["name"] in [c["name"] for c in manifest["spec"]["template"]["spec"]["containers"]]
    job = _skaffold_verify_job(verify)
    (c,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"] for e in c["env"]}
    assert {"STATEBED_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} <= env
    assert {"name": "runs", "mountPath": "/runs", "readOnly": True} in c["volumeMounts"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and c["resources"]["limits"]
    assert c["command"] == ["statebed"] and c["args"] == verify["container"]["args"]
    kubernetes_validate.validate(job, K8S_VERSIONS[-1], strict=True)


def test_the_merge_rule_loses_env_and_mounts_for_a_container_name_not_in_the_manifest() -> None:
    """The skaffold.yaml this project had (verify-lineage / verify-state against a manifest container `verify`)."""
    (verify,) = [copy.deepcopy(v) for v in SKAFFOLD["verify"] if v["name"] == "lineage"]
    verify["container"]["name"] = "verify-lineage"
    (c,) = _skaffold_verify_job(verify)["spec"]["template"]["spec"]["containers"]
    assert "volumeMounts" not in c and c["env"] == []
