"""The Kubernetes targets against the client's API contract: a fake transport under the real
`kubernetes` client (its REST layer's pool manager) answers list/get/delete, and a fake exec
records the commands run through pods/exec. No cluster is pretended: requests are asserted."""

from __future__ import annotations

import ast
import functools
import json
import re
import signal
import urllib.parse
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pyspark
import pytest
from kubernetes.client import ApiClient, Configuration, CoreV1Api
from kubernetes.client.exceptions import ApiException

from statebed_base.errors import StatebedError
from statebed_chaos.faults.base import FaultContext
from statebed_chaos.faults.process_faults import tree_of
from statebed_chaos.targets import IdentityMismatch
from statebed_chaos.targets import k8s as k8s_targets
from statebed_chaos.targets.k8s import API_CALLS, EXECUTOR_MAINS, K8sForbidden, K8sTargets

NS = "statebed"
SELECTOR = "statebed.io/target=executor,app.kubernetes.io/instance=statebed"
ROOT = Path(__file__).resolve().parents[2]
JARS = Path(pyspark.__file__).parent / "jars"


@functools.cache
def _jar_classes() -> dict[str, str]:
    """Every class in pyspark's jars (dotted name -> jar): what a JVM of this Spark can run."""
    out = {}
    for jar in sorted(JARS.glob("spark-*.jar")):
        with zipfile.ZipFile(jar) as z:
            out.update({n.removesuffix(".class").replace("/", "."): jar.name for n in z.namelist() if n.endswith(".class")})
    return out


def _k8s_executor_main() -> str:
    """The Kubernetes executor's main class, as Spark's own jar names it (spark-kubernetes_*.jar)."""
    (main,) = [c for c, jar in _jar_classes().items() if c.endswith(".KubernetesExecutorBackend") and jar.startswith("spark-kubernetes_")]
    return main


TINI = ["/usr/bin/tini", "-s", "--", "/opt/java/bin/java", "-cp", "/opt/spark/jars/*", _k8s_executor_main(), "--executor-id", "1"]
JAVA = TINI[3:]


class _Response:
    def __init__(self, status: int, body: Any) -> None:
        self.status, self.reason = status, {200: "OK", 403: "Forbidden", 404: "Not Found", 409: "Conflict"}.get(status, "?")
        self.data = json.dumps(body).encode()
        self.headers = {"content-type": "application/json"}


class FakePool:
    """Stands in for urllib3's PoolManager under the client's RESTClientObject: records every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: dict[tuple[str, str], tuple[int, Any]] = {}

    def request(self, method: str, url: str, **kw: Any) -> _Response:
        parts = urllib.parse.urlsplit(url)
        body = kw.get("body")
        self.requests.append(
            {
                "method": method,
                "path": parts.path,
                "query": dict(urllib.parse.parse_qsl(parts.query)),
                "body": None if body is None else json.loads(body),
            }
        )
        status, answer = self.answers.get((method, parts.path), (404, _status(404)))
        return _Response(status, answer)


def _status(code: int) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}


def _pod(name: str, uid: str, phase: str = "Running", exec_id: str = "1", ip: str = "10.244.0.7") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid,
            "labels": {"spark-exec-id": exec_id, "spark-app-selector": "spark-app-1", "statebed.io/target": "executor"},
        },
        "spec": {"containers": [{"name": "spark-kubernetes-executor", "image": "statebed:dev"}]},
        "status": {"phase": phase, "podIP": ip},
    }


class FakeExec:
    def __init__(self, procs: list[list[Any]]) -> None:
        self.procs, self.calls, self.rc = procs, [], 0

    def __call__(self, api: CoreV1Api, namespace: str, pod: str, container: str, argv: list[str]) -> tuple[int, str]:
        self.calls.append((namespace, pod, container, argv))
        if argv[0] == "python3":
            return 0, json.dumps(self.procs)
        return self.rc, ""


@pytest.fixture
def pool() -> FakePool:
    return FakePool()


def _targets(pool: FakePool, fake_exec: FakeExec) -> K8sTargets:
    client = ApiClient(Configuration(host="https://k8s.test"))
    client.rest_client.pool_manager = pool
    return K8sTargets(CoreV1Api(client), NS, executor_selector=SELECTOR, exec_fn=fake_exec)


PROCS = [
    [1, 0, 100, TINI],
    [14, 1, 105, JAVA],
    [30, 14, 200, ["python3", "-m", "pyspark.daemon"]],
    [31, 30, 210, ["python3", "-m", "pyspark.daemon"]],
]


def _with_pods(pool: FakePool, *pods: dict[str, Any]) -> None:
    pool.answers[("GET", f"/api/v1/namespaces/{NS}/pods")] = (
        200,
        {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(pods)},
    )


def test_executors_are_running_pods_by_label_and_the_target_is_the_jvm_not_tini(pool: FakePool) -> None:
    _with_pods(pool, _pod("exec-1", "u1"), _pod("exec-2", "u2", phase="Pending", exec_id="2"))
    fake = FakeExec(PROCS)
    targets = _targets(pool, fake)
    (ex,) = targets.find("executor")
    assert pool.requests[0]["method"] == "GET" and pool.requests[0]["query"]["labelSelector"] == SELECTOR
    assert (ex.pid, ex.identity.start_time, ex.host) == (14, 105, "10.244.0.7")  # tini (PID 1) names the class too
    assert ex.attrs["executor_id"] == "1" and ex.attrs["app_id"] == "spark-app-1" and ex.attrs["uid"] == "u1"
    assert fake.calls[0][:3] == (NS, "exec-1", "spark-kubernetes-executor") and fake.calls[0][3][0] == "python3"
    assert targets.find("executor", executor_id="1") == [ex] and targets.find("executor", executor_id="9") == []
    assert len(fake.calls) == 1  # the JVM of a pod is looked up once


def test_sigkill_of_an_executor_kills_its_jvm_in_the_container_and_deletes_nothing(pool: FakePool) -> None:
    """The JVM dies by SIGKILL (start time checked first); its container ends and Spark's pod watch
    sees the pod fail. A deleted pod would vanish from the API, which Spark notices only at its next
    full poll (seen on a real cluster: the executor was never removed within the run)."""
    _with_pods(pool, _pod("exec-1", "u1"))
    fake = FakeExec(PROCS)
    targets = _targets(pool, fake)
    (ex,) = targets.find("executor")
    targets.kill(ex, signal.SIGKILL)
    assert fake.calls[-1][3][2] == 'test "$(cut -d" " -f22 /proc/14/stat 2>/dev/null)" = "105" || exit 3; exec kill -KILL 14'
    assert not [r for r in pool.requests if r["method"] == "DELETE"]


def test_a_killed_executors_tree_holds_only_the_python_workers_of_its_own_pod(pool: FakePool) -> None:
    """Every pod has its own PID namespace, so both JVMs are PID 14: the tree of exec-1's JVM must
    not take exec-2's workers (on a real cluster it did, and kill-executor hit the other executor)."""
    _with_pods(pool, _pod("exec-1", "u1"), _pod("exec-2", "u2", exec_id="2", ip="10.244.0.8"))
    targets = _targets(pool, FakeExec(PROCS))
    ex1 = next(t for t in targets.find("executor") if t.attrs["pod"] == "exec-1")
    tree = tree_of(cast(FaultContext, SimpleNamespace(targets=targets)), ex1)
    assert [t.pid for t in tree] == [14, 30, 31] and {t.attrs["pod"] for t in tree} == {"exec-1"}


@pytest.mark.parametrize("status", [404, 409])
def test_a_driver_pod_gone_or_replaced_is_an_identity_mismatch(pool: FakePool, status: int) -> None:
    driver = _pod("statebed-driver-x7", "d1")
    driver["metadata"]["labels"] = {"statebed.io/target": "driver"}
    _with_pods(pool, driver)
    pool.answers[("DELETE", f"/api/v1/namespaces/{NS}/pods/statebed-driver-x7")] = (status, _status(status))
    targets = _targets(pool, FakeExec(PROCS))
    (d,) = targets.find("driver")
    with pytest.raises(IdentityMismatch, match="no longer exists" if status == 404 else "was replaced"):
        targets.kill(d)


def test_an_exec_refused_at_its_handshake_because_the_pod_is_gone_is_an_identity_mismatch(pool: FakePool) -> None:
    """kill-executor deletes the pod, then signals its Python workers: their exec meets the
    WebSocket handshake's 404 (status 0 in the client's exception, as a real API server answered)."""
    _with_pods(pool, _pod("exec-1", "u1"))
    targets = _targets(pool, FakeExec(PROCS))
    (ex,) = targets.find("executor")

    def gone(*_: Any) -> tuple[int, str]:
        raise ApiException(status=0, reason="Handshake status 404 Not Found -+-+- {'audit-id': 'x'} -+-+- b'not found'")

    targets.exec_fn = gone
    with pytest.raises(IdentityMismatch, match="no longer exists"):
        targets.pause(ex)


def test_an_exec_the_runtime_could_not_start_is_tried_again_with_the_identity_check(
    pool: FakePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(k8s_targets.time, "sleep", lambda _s: None)  # the backoff between tries: nothing to wait for here
    _with_pods(pool, _pod("exec-1", "u1"))
    fake = FakeExec(PROCS)
    targets = _targets(pool, fake)
    (ex,) = targets.find("executor")
    fake.rc = k8s_targets.EXEC_NOT_STARTED
    with pytest.raises(StatebedError, match="could not start sh"):
        targets.pause(ex)
    tries = [c for c in fake.calls if c[3][0] == "sh"]
    assert len(tries) == k8s_targets.EXEC_TRIES and all("-f22 /proc/14/stat" in c[3][2] for c in tries)
    fake.rc = 0
    targets.pause(ex)  # a start that works is not retried
    assert len([c for c in fake.calls if c[3][0] == "sh"]) == k8s_targets.EXEC_TRIES + 1


def test_forbidden_names_the_missing_permission(pool: FakePool) -> None:
    pool.answers[("GET", f"/api/v1/namespaces/{NS}/pods")] = (403, _status(403))
    with pytest.raises(
        K8sForbidden, match=r"list pods in namespace statebed: forbidden \(403\).*delete/get/list on pods; create/get on pods/exec"
    ):
        _targets(pool, FakeExec(PROCS)).find("executor")


def test_pause_and_resume_exec_kill_stop_and_cont_on_the_java_pid_after_checking_its_start_time(pool: FakePool) -> None:
    _with_pods(pool, _pod("exec-1", "u1"))
    fake = FakeExec(PROCS)
    targets = _targets(pool, fake)
    (ex,) = targets.find("executor")
    targets.pause(ex)
    targets.resume(ex)
    stop, cont = fake.calls[-2], fake.calls[-1]
    assert stop[:3] == (NS, "exec-1", "spark-kubernetes-executor") and stop[3][:2] == ["sh", "-c"]
    assert stop[3][2] == 'test "$(cut -d" " -f22 /proc/14/stat 2>/dev/null)" = "105" || exit 3; exec kill -STOP 14'
    assert cont[3][2].endswith("exec kill -CONT 14")
    assert not [r for r in pool.requests if r["method"] == "DELETE"]


def test_a_reused_pid_is_refused_and_pid_1_is_never_signalled(pool: FakePool) -> None:
    _with_pods(pool, _pod("exec-1", "u1"))
    fake = FakeExec(PROCS)
    targets = _targets(pool, fake)
    (ex,) = targets.find("executor")
    fake.rc = 3  # the start-time check failed in the container
    with pytest.raises(IdentityMismatch, match="exited or its PID was reused"):
        targets.pause(ex)
    import dataclasses

    from statebed_base.processes import ProcessIdentity

    tini = dataclasses.replace(ex, identity=ProcessIdentity(1, 100))
    calls = len(fake.calls)
    with pytest.raises(Exception, match="refusing to signal PID 1"):
        targets.pause(tini)
    assert len(fake.calls) == calls


def test_python_workers_of_an_executor_are_found_by_jvm_pid(pool: FakePool) -> None:
    _with_pods(pool, _pod("exec-1", "u1"))
    targets = _targets(pool, FakeExec(PROCS))
    workers = targets.find("python-worker", jvm_pid="14")
    assert [(w.pid, w.attrs["role"]) for w in workers] == [(30, "daemon"), (31, "worker")]
    assert targets.find("python-worker", jvm_pid="99") == []


def test_alive_follows_the_pod_uid_and_phase(pool: FakePool) -> None:
    _with_pods(pool, _pod("exec-1", "u1"))
    targets = _targets(pool, FakeExec(PROCS))
    (ex,) = targets.find("executor")
    path = ("GET", f"/api/v1/namespaces/{NS}/pods/exec-1")
    pool.answers[path] = (200, _pod("exec-1", "u1"))
    assert targets.alive(ex)
    pool.answers[path] = (200, _pod("exec-1", "u2"))  # same name, another pod
    assert not targets.alive(ex)
    pool.answers[path] = (404, _status(404))
    assert not targets.alive(ex)


def test_driver_pods_are_found_by_the_driver_selector_and_killed_by_deletion(pool: FakePool) -> None:
    driver = _pod("statebed-driver-x7", "d1")
    driver["metadata"]["labels"] = {"statebed.io/target": "driver"}
    _with_pods(pool, driver)
    pool.answers[("DELETE", f"/api/v1/namespaces/{NS}/pods/statebed-driver-x7")] = (200, driver)
    targets = _targets(pool, FakeExec(PROCS))
    (d,) = targets.find("driver")
    assert pool.requests[0]["query"]["labelSelector"] == "statebed.io/target=driver"
    targets.kill(d)  # the Job replaces the pod: a driver restart
    delete = pool.requests[-1]
    assert delete["method"] == "DELETE" and delete["path"] == f"/api/v1/namespaces/{NS}/pods/statebed-driver-x7"
    assert delete["body"]["gracePeriodSeconds"] == 0 and delete["body"]["preconditions"] == {"uid": "d1"}


@pytest.mark.parametrize("main", EXECUTOR_MAINS)
def test_every_executor_main_class_matched_exists_in_pysparks_jars(main: str) -> None:
    assert main in _jar_classes(), f"{main}: no such class in {JARS} (Spark {pyspark.__version__})"
    assert f"{main}$" in _jar_classes()  # a Scala object: `main` is on its companion, the class java starts


def test_the_images_entrypoint_starts_an_executor_main_the_backend_matches() -> None:
    """k8s/entrypoint.sh is what a Spark executor pod runs: its main class is one the targets find."""
    script = (ROOT / "k8s" / "entrypoint.sh").read_text()
    mains = set(re.findall(r"\borg\.apache\.spark\.[\w.]+", script))
    assert mains == {_k8s_executor_main()} and _k8s_executor_main() in EXECUTOR_MAINS


def test_api_calls_table_names_every_kubernetes_call_the_chaos_backend_makes() -> None:
    """A CoreV1Api method called in targets/k8s.py or k8s_backend.py without a row in API_CALLS fails here
    (the rows are what tests/k8s/test_rbac.py holds the chart's Role to)."""
    called = set()
    for module in (Path(k8s_targets.__file__), ROOT / "src" / "statebed_chaos" / "k8s_backend.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and hasattr(CoreV1Api, node.attr)
                and re.match(r"(list|read|create|delete|patch|replace|connect)_", node.attr)
            ):
                called.add(node.attr)
    assert called == set(API_CALLS), f"called {sorted(called)}, table {sorted(API_CALLS)}"
    assert API_CALLS["connect_get_namespaced_pod_exec"] == ("pods/exec", ("get", "create"))  # a WebSocket GET, + create from 1.35


def test_the_process_listing_run_in_a_pod_works_on_a_real_proc() -> None:
    """The script targets/k8s.py runs through pods/exec, run here by a real python3 on this machine's
    /proc (entries such as /proc/self are not PIDs): it lists this test's own process with its argv."""
    import os
    import subprocess
    import sys

    from statebed_chaos.targets.k8s import _PS

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "statebed-ps-marker"])
    try:
        out = subprocess.run(["python3", "-c", _PS], capture_output=True, text=True, check=True)
        procs = {pid: (ppid, argv) for pid, ppid, _, argv in json.loads(out.stdout)}
        assert procs[child.pid] == (os.getpid(), [sys.executable, "-c", "import time; time.sleep(60)", "statebed-ps-marker"])
    finally:
        child.kill()
        child.wait()


def _with_container(pod: dict[str, Any], phase: str, state: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API shows it with its executor container in `state` (running, terminated)."""
    container = {"name": "spark-kubernetes-executor", "image": "statebed:dev", "imageID": "", "ready": False, "restartCount": 0}
    return {**pod, "status": {**pod["status"], "phase": phase, "containerStatuses": [{**container, "state": state}]}}


ENDED = ("Failed", {"terminated": {"exitCode": 137}})  # the executor JVM was killed: tini and the container ended
RUNNING = ("Running", {"running": {"startedAt": "2026-12-02T00:00:00Z"}})


def _exec_killed(pool: FakePool, container: tuple[str, dict[str, Any]]) -> K8sTargets:
    """Targets on one executor pod whose every kill exec ends with 137, the pod then showing `container`."""
    _with_pods(pool, _pod("exec-1", "u1"))
    fake = FakeExec(PROCS)
    targets = _targets(pool, fake)
    pool.answers[("GET", f"/api/v1/namespaces/{NS}/pods/exec-1")] = (200, _with_container(_pod("exec-1", "u1"), *container))
    fake.rc = k8s_targets.EXEC_KILLED
    return targets


def test_a_python_worker_whose_exec_was_killed_with_its_ended_container_is_gone_not_a_failed_kill(pool: FakePool) -> None:
    """kill-executor's JVM SIGKILL ends the container; the follow-up kill of a Python worker then
    runs in a dying container and its shell exits 137 (seen on the cluster, 2026-12-02): that worker
    is gone with its pod, and signal_tree skips it instead of failing the inject."""
    targets = _exec_killed(pool, ENDED)
    (worker, _) = targets.find("python-worker", jvm_pid="14")
    with pytest.raises(IdentityMismatch, match="its container ended"):
        targets.kill(worker, signal.SIGKILL)


def test_a_jvm_sigkill_whose_shell_died_with_the_container_it_ended_was_delivered(pool: FakePool) -> None:
    targets = _exec_killed(pool, ENDED)
    (ex,) = targets.find("executor")
    targets.kill(ex, signal.SIGKILL)  # delivered: no exception
    with pytest.raises(IdentityMismatch, match="its container ended"):
        targets.pause(ex)  # a SIGSTOP cannot have ended the container: the JVM was already gone


def test_exit_137_in_a_container_still_running_is_a_failed_kill(pool: FakePool) -> None:
    """137 alone proves nothing: with the container still running, something else killed the shell."""
    targets = _exec_killed(pool, RUNNING)
    (ex,) = targets.find("executor")
    with pytest.raises(StatebedError, match=r"kill -KILL 14 failed in pod exec-1 \(exit 137\)") as got:
        targets.kill(ex, signal.SIGKILL)
    assert not isinstance(got.value, IdentityMismatch)  # a failed inject, not a target gone
