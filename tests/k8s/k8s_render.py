"""Rendering statebed's charts with the real Helm engine (helm-python-sdk embeds Helm v4), shared by the k8s tests."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml
from helm_python import Chart

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "statebed"
# The platforms the charts ship values for: the default (kind), and each values-<platform>.yaml.
VALUES = {
    "default": None,
    "kind": CHART / "values-kind.yaml",
    "minikube": CHART / "values-minikube.yaml",
    "kube-up": CHART / "values-kube-up.yaml",
}
# The Kubernetes versions of the nightly's kind matrix (.github/workflows/nightly.yml).
K8S_VERSIONS = ("1.32.0", "1.33.0", "1.34.0", "1.35.0")
RELEASE, NAMESPACE = "statebed", "statebed"


@functools.cache
def render(platform: str, overrides_yaml: str = "") -> tuple[dict[str, Any], ...]:
    """Every manifest the umbrella chart renders for `platform` (plus YAML overrides), parsed."""
    values: dict[str, Any] = {}
    path = VALUES[platform]
    if path is not None:
        values = yaml.safe_load(path.read_text()) or {}
    values = _merge(values, yaml.safe_load(overrides_yaml) or {})
    with Chart.load(CHART) as chart:
        out = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    return tuple(doc for _, text in sorted(out.items()) for doc in yaml.safe_load_all(text) if doc)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def one(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}: {[(d['kind'], d['metadata']['name']) for d in docs]}"
    return found[0]


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"] if doc["kind"] in ("Deployment", "Job") else doc["spec"]
    return list(spec["containers"])  # the init containers are in spec["initContainers"]
