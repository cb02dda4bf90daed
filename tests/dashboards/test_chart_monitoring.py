"""The chart's dashboard ConfigMap and its PodMonitor/ServiceMonitor: rendered with and without
the Prometheus operator's API, every manifest validated (built-in kinds with kubernetes-validate
--strict, the monitors against the operator's own CRD schema, made strict)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chart_render import DASHBOARD, MONITORING_API, RELEASE, crd_schema, render, strict

K8S_VERSION = "1.35.0"
MONITOR_KINDS = {"PodMonitor", "ServiceMonitor"}


def validate(docs: tuple[dict, ...]) -> None:  # type: ignore[type-arg]
    for doc in docs:
        if doc["kind"] in MONITOR_KINDS:
            assert doc["apiVersion"] == MONITORING_API
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"]), doc["metadata"]
            jsonschema.validate(doc, crd_schema(doc["kind"]))
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("api", [(), (MONITORING_API,)], ids=["no-operator", "operator"])
def test_rendered_chart_validates_with_and_without_the_monitoring_api(api: tuple[str, ...]) -> None:
    docs = render(api)
    validate(docs)
    kinds = {d["kind"] for d in docs}
    assert (kinds & MONITOR_KINDS) == (MONITOR_KINDS if api else set())


def test_monitors_scrape_the_ingest_pods_and_the_proxy_api_with_the_run_label() -> None:
    docs = render((MONITORING_API,), json.dumps({"monitoring": {"monitors": {"labels": {"release": "kps"}}}}))
    validate(docs)
    pod = next(d for d in docs if d["kind"] == "PodMonitor")
    svc = next(d for d in docs if d["kind"] == "ServiceMonitor")
    assert pod["metadata"]["labels"]["release"] == svc["metadata"]["labels"]["release"] == "kps"
    assert pod["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "ingest"}
    ingest = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == f"{RELEASE}-ingest")
    ports = {p["name"] for c in ingest["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    (endpoint,) = pod["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == f"{RELEASE}-toxiproxy")
    assert svc["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert svc["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    for m in (pod, svc):
        rules = (m["spec"].get("podMetricsEndpoints") or m["spec"]["endpoints"])[0]["relabelings"]
        assert {"run", "job"} <= {r["targetLabel"] for r in rules}


def test_strict_schema_refuses_an_unknown_field() -> None:
    """Positive control: the CRD schema made strict catches a misspelt field."""
    pod = next(d for d in render((MONITORING_API,)) if d["kind"] == "PodMonitor")
    bad = json.loads(json.dumps(pod))
    bad["spec"]["podMetricsEndpoints"][0]["intervall"] = "5s"
    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        jsonschema.validate(bad, crd_schema("PodMonitor"))
    assert strict({"type": "object", "properties": {"a": {}}})["additionalProperties"] is False


def test_dashboard_configmap_carries_the_sidecar_label_and_the_dashboard() -> None:
    docs = render()
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == f"{RELEASE}-dashboards"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["statebed.json"]) == json.loads(DASHBOARD.read_text())
    off = render((), json.dumps({"monitoring": {"dashboards": {"enabled": False}}}))
    assert not [d for d in off if d["metadata"]["name"] == f"{RELEASE}-dashboards"]


def test_dashboard_has_namespace_and_run_variables_and_fault_annotations() -> None:
    dash = json.loads(DASHBOARD.read_text())
    names = [v["name"] for v in dash["templating"]["list"]]
    assert {"namespace", "run"} <= set(names)
    faults = [a for a in dash["annotations"]["list"] if a.get("name") == "faults"]
    assert len(faults) == 1 and "statebed_faults_active" in faults[0]["expr"]
    for panel in dash["panels"]:
        for t in panel["targets"]:
            assert "$namespace" in t["expr"] and "$run" in t["expr"], (panel["title"], t["expr"])
