"""Targets on Kubernetes: executor (and driver) pods found by label, acted on through the API.

- executor: Running pods matching the executor label selector (the chart's pod template sets
  `statebed.io/target=executor`); the target is the executor JVM inside the pod, found from the
  pod's process list through `pods/exec` (PID 1 is tini, never the target). Attributes:
  executor_id and app_id from Spark's own pod labels, pod, uid, container.
- python-worker: the `pyspark.daemon` and its workers inside an executor pod (`jvm_pid`, `role`).
- driver: drivers registered locally (the chaos controller's subprocesses), then driver pods
  matching the driver selector (the chart's driver Job); other kinds are local.

Acting: SIGKILL on a driver pod deletes the pod at once (grace 0) with the pod's uid as a
precondition, so a replacement pod of the same name is never hit (409 → refused); the Job
starts another. Every other signal, SIGKILL of an executor JVM among them, is `kill -<SIG>
<pid>` run in the container after checking the process's start time, so a reused PID is refused
too: a killed executor JVM ends its container, the pod fails, and Spark's pod watch removes the
executor and asks for a replacement at once. (A pod deleted at grace 0 instead vanishes from
the API; Spark 4.3 noticed that only at its next full poll, `apiPollingInterval`, 30 s, on this
project's cluster: the run had ended by then and the event log never showed the executor removed.)
An exec whose shell ends with 137 in a container that is no longer running was killed with its
container: for the SIGKILL of the executor JVM that is the kill itself taking effect; for anything
else in that pod (its Python workers) it is `IdentityMismatch`, the target gone. 404 and 409 are
`IdentityMismatch` (the target is gone); 403 is `K8sForbidden`, naming the verb the chaos
controller's Role lacks.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import CoreV1Api, V1DeleteOptions, V1Preconditions
from kubernetes.client.exceptions import ApiException

from statebed_base.errors import StatebedError
from statebed_base.processes import IdentityMismatch, ProcessIdentity

from .base import KINDS, Target, Targets

__all__ = ["API_CALLS", "EXECUTOR_MAINS", "ExecFn", "K8sForbidden", "K8sTargets", "stream_exec"]

# The executor JVM's main class: Spark on Kubernetes starts KubernetesExecutorBackend (in
# spark-kubernetes_2.13's jar; the image's entrypoint names it); standalone starts
# CoarseGrainedExecutorBackend (spark-core). tests/chaos/test_k8s_targets.py finds each in pyspark's jars.
EXECUTOR_MAINS = (
    "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
    "org.apache.spark.executor.CoarseGrainedExecutorBackend",
)
# Every CoreV1Api method this module calls -> (resource, verbs) as RBAC authorizes the request.
# `stream()` opens pods/exec as a WebSocket, an HTTP GET: authorized as `get`, and from
# Kubernetes 1.35 (AuthorizePodWebsocketUpgradeCreatePermission, on by default) also as `create`.
# The chart's chaos Role must grant exactly these (tests/k8s/test_rbac.py); a call missing here fails that test.
API_CALLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "list_namespaced_pod": ("pods", ("list",)),
    "read_namespaced_pod": ("pods", ("get",)),
    "delete_namespaced_pod": ("pods", ("delete",)),
    "connect_get_namespaced_pod_exec": ("pods/exec", ("get", "create")),
}
_PYSPARK = ("pyspark.daemon", "pyspark.worker")
# Prints every process of the container as JSON: [pid, parent pid, start time, argv].
_PS = (
    "import json, os\n"
    "out = []\n"
    "for p in os.listdir('/proc'):\n"
    "    if not p.isdigit():\n"
    "        continue\n"
    "    try:\n"
    "        f = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()\n"
    "        argv = open(f'/proc/{p}/cmdline', 'rb').read().decode(errors='replace').split('\\0')[:-1]\n"
    "    except (OSError, ValueError, IndexError):\n"
    "        continue\n"
    "    out.append([int(p), int(f[1]), int(f[19]), argv])\n"
    "print(json.dumps(out))\n"
)
EXEC_KILLED = 137  # 128 + SIGKILL: the exec's shell was killed (its container ended under it)
EXEC_NOT_STARTED = -1  # stream_exec's code for an exec the container runtime failed to start
EXEC_TRIES = 8
ExecFn = Callable[[CoreV1Api, str, str, str, list[str]], tuple[int, str]]  # (api, namespace, pod, container, argv) -> (rc, stdout)


class K8sForbidden(StatebedError):
    """The API refused (403): the chaos controller's ServiceAccount lacks a permission."""


def stream_exec(api: CoreV1Api, namespace: str, pod: str, container: str, argv: list[str]) -> tuple[int, str]:
    """Run `argv` in the container through `pods/exec` (the client's websocket stream); (exit code, stdout)."""
    from kubernetes.stream import stream

    resp = stream(
        api.connect_get_namespaced_pod_exec,
        pod,
        namespace,
        container=container,
        command=argv,
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=30)
    out = resp.read_stdout() or ""
    try:
        rc = resp.returncode
    except ValueError:  # the status channel held the runtime's failure, not an exit code
        rc = EXEC_NOT_STARTED
    finally:
        resp.close()
    return (rc if isinstance(rc, int) else 1), out


class K8sTargets(Targets):
    def __init__(
        self,
        api: CoreV1Api,
        namespace: str,
        *,
        executor_selector: str,
        driver_selector: str = "statebed.io/target=driver",
        local: Targets | None = None,
        exec_fn: ExecFn = stream_exec,
    ) -> None:
        self.api, self.namespace = api, namespace
        self.executor_selector, self.driver_selector = executor_selector, driver_selector
        self.local, self.exec_fn = local, exec_fn
        self._jvms: dict[str, ProcessIdentity] = {}  # pod uid -> its executor JVM (found once per pod)

    # -- finding ------------------------------------------------------------------------------
    def find(self, kind: str, **filters: Any) -> list[Target]:
        if kind not in KINDS:
            raise StatebedError(f"unknown target kind {kind!r}; known: {', '.join(KINDS)}")
        if kind == "executor":
            found = self._executors()
        elif kind == "python-worker":
            found = [w for e in self._executors() for w in self._python_workers(e)]
        else:
            found = [] if self.local is None else self.local.find(kind)
            if kind == "driver":
                found += [self._pod_target("driver", p, ProcessIdentity(0, 0)) for p in self._pods(self.driver_selector)]
        return [t for t in found if t.matches(filters)]

    def _pods(self, selector: str) -> list[Any]:
        pods = self._call("list pods", lambda: self.api.list_namespaced_pod(self.namespace, label_selector=selector))
        return [p for p in pods.items if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]

    def _executors(self) -> list[Target]:
        out = []
        for pod in self._pods(self.executor_selector):
            jvm = self._jvms.get(pod.metadata.uid) or self._find_jvm(pod)
            if jvm is not None:
                self._jvms[pod.metadata.uid] = jvm
                out.append(self._pod_target("executor", pod, jvm))
        return out

    def _pod_target(self, kind: str, pod: Any, ident: ProcessIdentity) -> Target:
        labels = pod.metadata.labels or {}
        attrs = {
            "pod": pod.metadata.name,
            "uid": pod.metadata.uid,
            "container": pod.spec.containers[0].name,
            "executor_id": labels.get("spark-exec-id", ""),
            "app_id": labels.get("spark-app-selector", ""),
        }
        return Target(kind, pod.metadata.name, pod.status.pod_ip or "", ident, attrs)

    def _processes(self, pod: str, container: str) -> list[tuple[int, int, int, tuple[str, ...]]]:
        rc, out = self._exec(pod, container, ["python3", "-c", _PS])
        if rc != 0:
            raise StatebedError(f"pod {pod}: listing its processes failed (exit {rc})")
        return [(int(p), int(pp), int(st), tuple(argv)) for p, pp, st, argv in json.loads(out)]

    def _find_jvm(self, pod: Any) -> ProcessIdentity | None:
        """The executor JVM of a pod: the process running an executor main class, never PID 1 (tini)."""
        container = pod.spec.containers[0].name
        for pid, _, start, argv in self._processes(pod.metadata.name, container):
            if pid != 1 and any(m in argv for m in EXECUTOR_MAINS):
                return ProcessIdentity(pid, start, argv)
        return None

    def _python_workers(self, jvm: Target) -> list[Target]:
        procs = self._processes(jvm.attrs["pod"], jvm.attrs["container"])
        daemons = [p for p in procs if p[1] == jvm.pid and any(m in p[3] for m in _PYSPARK)]
        out = []
        for pid, _, start, argv in daemons:
            base = {**jvm.attrs, "jvm_pid": str(jvm.pid)}
            out.append(
                Target(
                    "python-worker",
                    f"python-daemon-{pid}@{jvm.name}",
                    jvm.host,
                    ProcessIdentity(pid, start, argv),
                    {**base, "role": "daemon"},
                )
            )
            out += [
                Target(
                    "python-worker", f"python-worker-{w}@{jvm.name}", jvm.host, ProcessIdentity(w, ws, wargv), {**base, "role": "worker"}
                )
                for w, parent, ws, wargv in procs
                if parent == pid
            ]
        return out

    # -- acting -------------------------------------------------------------------------------
    def kill(self, target: Target, sig: int = signal.SIGKILL) -> None:
        if "pod" not in target.attrs:
            if self.local is None:
                raise StatebedError(f"{target.name}: not a pod, and no local targets to act on it")
            self.local.kill(target, sig)
        elif sig == signal.SIGKILL and target.kind == "driver":
            self._delete_pod(target)
        else:
            self._signal(target, sig)

    def _delete_pod(self, target: Target) -> None:
        """Delete the very pod found (uid precondition), at once: its processes die with it."""
        body = V1DeleteOptions(grace_period_seconds=0, preconditions=V1Preconditions(uid=target.attrs["uid"]))
        self._call(
            f"delete pod {target.attrs['pod']}",
            lambda: self.api.delete_namespaced_pod(target.attrs["pod"], self.namespace, body=body),
            target,
        )

    def _signal(self, target: Target, sig: int) -> None:
        """`kill -<SIG> <pid>` in the pod, only while the PID still has the recorded start time."""
        if target.pid <= 1:
            raise StatebedError(f"{target.name}: refusing to signal PID {target.pid} (PID 1 is the container's init)")
        name = signal.Signals(sig).name.removeprefix("SIG")
        stat = f"/proc/{target.pid}/stat"
        script = f'test "$(cut -d" " -f22 {stat} 2>/dev/null)" = "{target.identity.start_time}" || exit 3; exec kill -{name} {target.pid}'
        rc, _ = self._exec(target.attrs["pod"], target.attrs["container"], ["sh", "-c", script], target)
        if rc == 3:
            raise IdentityMismatch(f"{target.name}: process {target.pid} has exited or its PID was reused")
        if rc == EXEC_KILLED and not self._container_running(target):
            # The exec's shell was SIGKILLed because its container ended: the container's init
            # (tini) exits when the executor JVM dies, and the runtime kills what is left.
            if target.kind == "executor" and sig == signal.SIGKILL:
                return  # this very kill ended the JVM (and the container with it) before the shell returned
            raise IdentityMismatch(f"{target.name}: its container ended (the executor JVM is gone), so process {target.pid} is gone")
        if rc != 0:
            raise StatebedError(f"{target.name}: kill -{name} {target.pid} failed in pod {target.attrs['pod']} (exit {rc})")

    def _container_running(self, target: Target) -> bool:
        """The target's pod is the one found (same uid) and its container is still running."""
        pod = self._own_pod(target)
        states = [c.state for c in (pod.status.container_statuses or []) if c.name == target.attrs["container"]] if pod else []
        return bool(states) and states[0] is not None and states[0].running is not None

    def alive(self, target: Target) -> bool:
        if "pod" not in target.attrs:
            return self.local is not None and self.local.alive(target)
        pod = self._own_pod(target)
        return bool(pod is not None and pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None)

    def _own_pod(self, target: Target) -> Any:
        """The target's pod as the API shows it now, or None when it is gone or replaced (another uid)."""
        try:
            pod = self._call("get pod", lambda: self.api.read_namespaced_pod(target.attrs["pod"], self.namespace), target)
        except IdentityMismatch:
            return None
        return pod if pod.metadata.uid == target.attrs["uid"] else None

    # -- the API ------------------------------------------------------------------------------
    def _exec(self, pod: str, container: str, argv: list[str], target: Target | None = None) -> tuple[int, str]:
        """`argv` in the container; an exec the runtime could not start is tried again, at most
        EXEC_TRIES times over about 10 s (seen on this project's cluster, Debian's runc 1.1.5,
        into a busy executor: "read init-p: connection reset by peer", "write init-p: broken
        pipe", three times in a row 0.5 s apart). Nothing ran, so a retry repeats nothing; kill
        scripts check the target's start time on every try."""
        for attempt in range(EXEC_TRIES):
            rc, out = self._call(f"exec in pod {pod}", lambda: self.exec_fn(self.api, self.namespace, pod, container, argv), target)
            if rc != EXEC_NOT_STARTED:
                return int(rc), str(out)
            time.sleep(min(0.25 * 2**attempt, 2.0))
        raise StatebedError(f"exec in pod {pod}: the container runtime could not start {argv[0]} ({EXEC_TRIES} tries over ~10 s)")

    def _call(self, what: str, call: Callable[[], Any], target: Target | None = None) -> Any:
        """One API call, its refusals mapped: 404/409 → the target is gone, 403 → a missing permission."""
        try:
            return call()
        except ApiException as e:
            who = f"{target.name}: " if target is not None else ""
            status = _status_of(e)
            if status in (404, 409):
                why = "no longer exists" if status == 404 else "was replaced (uid precondition failed)"
                raise IdentityMismatch(f"{who}{what}: the pod {why}") from None
            if status == 403:
                raise K8sForbidden(
                    f"{who}{what} in namespace {self.namespace}: forbidden (403); the chaos controller's Role needs {_needs()}"
                ) from None
            raise StatebedError(f"{who}{what} in namespace {self.namespace}: Kubernetes API error {e.status} {e.reason}") from None


def _status_of(e: ApiException) -> int:
    """The HTTP status of a refusal. A pods/exec stream refused at its WebSocket handshake (the pod
    was deleted a moment ago, e.g. by kill-executor) comes as status 0 with the status in its reason:
    "Handshake status 404 Not Found" (seen on a real API server)."""
    if e.status:
        return int(e.status)
    m = re.search(r"Handshake status (\d{3})", str(e.reason or ""))
    return int(m.group(1)) if m else 0


def _needs() -> str:
    """The permissions API_CALLS adds up to, for a 403's message: `delete/get/list on pods; create/get on pods/exec`."""
    by: dict[str, set[str]] = {}
    for resource, verbs in API_CALLS.values():
        by.setdefault(resource, set()).update(verbs)
    return "; ".join(f"{'/'.join(sorted(v))} on {r}" for r, v in sorted(by.items()))
