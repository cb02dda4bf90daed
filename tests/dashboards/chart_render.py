"""The umbrella chart rendered with and without the Prometheus operator's API, and the
operator's CRD schemas (vendored, see schemas/SOURCES.md) made strict."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import yaml
from helm_python import Chart, _native

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "statebed"
DASHBOARD = CHART / "dashboards" / "statebed.json"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
MONITORING_API = "monitoring.coreos.com/v1"
RELEASE, NAMESPACE = "statebed", "statebed"


@functools.cache
def render(api_versions: tuple[str, ...] = (), values_json: str = "{}") -> tuple[dict[str, Any], ...]:
    """Every manifest, rendered by the real Helm engine as on a cluster serving `api_versions`.

    helm-python-sdk's `Chart.render` has no parameter for the cluster's API versions; its native
    `helm_render` takes them (`api_versions`, Helm's `--api-versions`), so the call is made here."""
    opts = {"name": RELEASE, "namespace": NAMESPACE, "api_versions": list(api_versions)}
    with Chart.load(CHART) as chart:
        out = json.loads(_native.call_string("helm_render", chart._raw(), values_json, json.dumps(opts)))
    return tuple(doc for _, text in sorted(out.items()) for doc in yaml.safe_load_all(text) if doc)


def strict(schema: Any) -> Any:
    """The schema with every object that declares properties closed to others (unless it keeps unknown fields)."""
    s = copy.deepcopy(schema)

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for v in node.values():
                close(v)
        elif isinstance(node, list):
            for v in node:
                close(v)

    close(s)
    return s


@functools.cache
def crd_schema(kind: str) -> dict[str, Any]:
    """The strict v1 openAPIV3Schema of the operator's `kind` (PodMonitor, ServiceMonitor)."""
    crd = yaml.safe_load((SCHEMAS / f"monitoring.coreos.com_{kind.lower()}s.yaml").read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return dict(strict(v1["schema"]["openAPIV3Schema"]))
