"""RBAC derived from the code: the Kubernetes API calls the chaos backend and the Spark driver make,
each as RBAC authorizes it (resource, verb), checked against the Roles the chart renders.

The chaos backend's calls are its own table, `API_CALLS` in src/statebed_chaos/targets/k8s.py
(tests/chaos/test_k8s_targets.py fails when a call has no row). `stream()` opens pods/exec as a
WebSocket (HTTP GET): RBAC checks `get`, and from Kubernetes 1.35 (AuthorizePodWebsocketUpgradeCreatePermission,
on by default) `create` as well. The driver's calls are Spark's (its Kubernetes client, see SOURCES.md)."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_render import RELEASE, VALUES, one, render

from statebed_chaos.targets.k8s import API_CALLS

# Spark's driver in client mode (ExecutorPodsAllocator, ExecutorPodsWatchSnapshotSource,
# ExecutorPodsPollingSnapshotSource, KubernetesClusterSchedulerBackend, the driver's ConfigMap of
# executor conf and, with PVC reuse, claims): what Spark's docs name for the driver's Role.
SPARK_DRIVER_CALLS: dict[str, tuple[str, ...]] = {
    "pods": ("create", "get", "list", "watch", "delete", "deletecollection"),
    "configmaps": ("create", "get", "list", "watch", "delete", "deletecollection"),
    "services": ("create", "get", "list", "watch", "delete", "deletecollection"),
    "persistentvolumeclaims": ("create", "get", "list", "watch", "delete", "deletecollection"),
}


def _needed(table: dict[str, tuple[str, tuple[str, ...]]]) -> set[tuple[str, str]]:
    return {(resource, verb) for resource, verbs in table.values() for verb in verbs}


def _granted(role: dict[str, Any]) -> set[tuple[str, str]]:
    return {(r, v) for rule in role["rules"] if rule["apiGroups"] == [""] for r in rule["resources"] for v in rule["verbs"]}


@pytest.mark.parametrize("platform", list(VALUES))
def test_the_chaos_role_grants_exactly_what_the_chaos_backend_calls(platform: str) -> None:
    docs = render(platform)
    role = one(docs, "Role", f"{RELEASE}-chaos")
    assert _granted(role) == _needed(API_CALLS)
    assert ("pods/exec", "get") in _granted(role) and ("pods/exec", "create") in _granted(role)
    binding = one(docs, "RoleBinding", f"{RELEASE}-chaos")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{RELEASE}-chaos"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{RELEASE}-chaos", "namespace": "statebed"}]
    assert one(docs, "Deployment", f"{RELEASE}-chaos")["spec"]["template"]["spec"]["serviceAccountName"] == f"{RELEASE}-chaos"
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]


# A cluster-mode submission with the Spark account (the chaos controller's drivers) applies the
# driver's Service, ConfigMap and, in 4.3, NetworkPolicy server-side (PATCH ?force=true): found
# by a real API server's authorizer (tests/kube/test_api_stage.py), (group, resource) -> verbs.
SPARK_SUBMISSION_CALLS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "services"): ("create", "patch", "delete"),
    ("", "configmaps"): ("create", "patch", "delete"),
    ("networking.k8s.io", "networkpolicies"): ("create", "patch", "delete"),
}


@pytest.mark.parametrize("platform", list(VALUES))
def test_the_spark_role_grants_what_the_driver_calls(platform: str) -> None:
    docs = render(platform)
    role = one(docs, "Role", f"{RELEASE}-spark")
    granted = _granted(role)
    needed = {(r, v) for r, verbs in SPARK_DRIVER_CALLS.items() for v in verbs}
    assert needed <= granted, sorted(needed - granted)
    by_group = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    submission = {(g, r, v) for (g, r), verbs in SPARK_SUBMISSION_CALLS.items() for v in verbs}
    assert submission <= by_group, sorted(submission - by_group)
    assert ("", "pods", "patch") not in by_group  # patch only where the submission applies objects
    assert one(docs, "Job", f"{RELEASE}-driver")["spec"]["template"]["spec"]["serviceAccountName"] == f"{RELEASE}-spark"


def test_the_check_fails_on_an_exec_role_with_create_alone() -> None:
    """The Role this chart had: create on pods/exec only. Every stream() exec would be 403."""
    old = {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
                     {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]}  # fmt: skip
    assert _needed(API_CALLS) - _granted(old) == {("pods/exec", "get")}
