"""`make image-smoke`, second half: the chart's own containers, started from the built image.

Usage: python k8s/chart_smoke.py IMAGE. The chart is rendered by Helm (default values, the
kind platform) and every container of a Deployment or Job that runs statebed's image is started
with podman exactly as the manifest says: its command and args, its env (Secrets from the
rendered Secret, the downward API as the pod would see it), working directory, user and volumes
(the runs volume one fresh directory, ConfigMaps written out as files), after its init
containers. All of them share one network namespace that has only loopback (a "node" whose
Service names resolve to 127.0.0.1), so the chart's 0.0.0.0 binds never leave it. Then each must
reach its readiness condition:

- a container with a readiness probe answers it (httpGet: HTTP 200 from inside; exec: exit 0);
- a Locust worker registers with its master (the master's /worker-count);
- the driver Job runs its first step: spark-submit starts `statebed run`, which opens the store,
  records the run (run.json) and then reaches Spark's Kubernetes master, where it stops: there is
  no API server here;
- an executor started the way Spark on Kubernetes starts one (the image's entrypoint, argument
  `executor`, the SPARK_* environment) runs a JVM that the chaos backend's own process search
  (targets/k8s.py) finds.

A container that exits before, or never gets there, fails the smoke. The MinIO, mc and Toxiproxy
images cannot be pulled here (no registry): the node runs the same servers as the installer built
them (install/install.sh, static binaries), Toxiproxy on the chart's own ConfigMap, and
tests/k8s checks those images' args and ports.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "k8s"))

from k8s_render import RELEASE, one, render  # noqa: E402

from statebed_base.errors import StatebedError  # noqa: E402
from statebed_base.installed import installed  # noqa: E402
from statebed_chaos.targets.k8s import K8sTargets  # noqa: E402

RUNTIME = ["--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
WAIT_S = 240.0  # a smoke's own patience, not a test assertion
HOLD_PORT = 7078  # a "driver" that accepts the executor's connection and never answers
EXECUTOR_POD = "statebed-exec-1"


class Smoke:
    """The containers of one smoke run, named `<prefix>-...`; removed by those names at the end."""

    def __init__(self, image: str, work: Path) -> None:
        self.image, self.work, self.prefix = image, work, f"statebed-smoke-{work.name}"
        self.started: list[str] = []
        self.failures: list[str] = []

    def joined(self) -> list[str]:
        """In the node's network namespace, with its hosts file (podman does not share /etc/hosts with the joiner)."""
        return ["--network", f"container:{self.name('node')}", "-v", f"{self.work / 'hosts'}:/etc/hosts:ro"]

    def name(self, what: str) -> str:
        return f"{self.prefix}-{what}"

    def start(self, what: str, args: list[str]) -> str:
        name = self.name(what)
        cmd = ["podman", "run", "-d", "--name", name, *RUNTIME, *args]
        self.started.append(name)
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"podman run {name}: {out.stderr.strip()}")
        return name

    def exec(self, name: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", "exec", name, *argv], capture_output=True, text=True, timeout=60)

    def state(self, name: str) -> tuple[bool, int]:
        out = subprocess.run(["podman", "inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", name], capture_output=True, text=True)
        running, code = out.stdout.split()
        return running == "true", int(code)

    def logs(self, name: str) -> str:
        return subprocess.run(["podman", "logs", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout

    def wait(self, name: str, ready: Callable[[], bool], *, may_exit: bool = False) -> bool:
        """Poll `ready` until it holds; False once the container has exited (unless `may_exit`) or after WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if ready():
                return True
            running, code = self.state(name)
            if not running and not may_exit:
                self.failures.append(f"{name}: exited {code} before it was ready")
                return False
            time.sleep(1)
        self.failures.append(f"{name}: not ready after {WAIT_S:.0f} s")
        return False

    def check(self, what: str, ok: bool, detail: str = "") -> None:
        print(f"chart-smoke: {'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
        if not ok:
            self.failures.append(f"{what}: {detail}")

    def cleanup(self) -> None:
        for name in reversed(self.started):
            (self.work / "logs").mkdir(exist_ok=True)
            (self.work / "logs" / f"{name}.log").write_text(self.logs(name))
            subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True)


# -- the manifest, as a pod would see it ------------------------------------------------------------
def _env(c: dict[str, Any], pod: str, secrets: dict[str, dict[str, str]]) -> list[str]:
    field = {"status.podIP": "127.0.0.1", "metadata.name": pod, "metadata.namespace": "statebed"}
    out = []
    for e in c.get("env", []):
        if "value" in e:
            value = e["value"]
        elif "secretKeyRef" in e["valueFrom"]:
            ref = e["valueFrom"]["secretKeyRef"]
            value = secrets[ref["name"]][ref["key"]]
        else:
            value = field[e["valueFrom"]["fieldRef"]["fieldPath"]]
        out += ["-e", f"{e['name']}={value}"]
    return out


def _volumes(spec: dict[str, Any], c: dict[str, Any], work: Path, docs: tuple[dict[str, Any], ...]) -> list[str]:
    by_name = {v["name"]: v for v in spec.get("volumes", [])}
    out = []
    for m in c.get("volumeMounts", []):
        v = by_name[m["name"]]
        if "hostPath" in v or "persistentVolumeClaim" in v:
            host = work / "runs"
        elif "configMap" in v:
            host = work / "volumes" / v["configMap"]["name"]
            host.mkdir(parents=True, exist_ok=True)
            for key, text in one(docs, "ConfigMap", v["configMap"]["name"])["data"].items():
                (host / key).write_text(text)
        else:  # the spark ServiceAccount's token Secret: filled by Kubernetes, a placeholder here
            host = work / "volumes" / v["secret"]["secretName"]
            host.mkdir(parents=True, exist_ok=True)
            for key in ("token", "ca.crt", "namespace"):
                (host / key).write_text("chart-smoke-placeholder")  # a bearer token: one line, no newline
        out += ["-v", f"{host}:{m['mountPath']}{':ro' if m.get('readOnly') else ''}"]
    return out


def container_args(doc: dict[str, Any], c: dict[str, Any], smoke: Smoke, docs: tuple[dict[str, Any], ...]) -> list[str]:
    """`podman run` arguments for one container of the manifest: user, env, volumes, command and args."""
    spec = doc["spec"]["template"]["spec"]
    sec = {**spec.get("securityContext", {}), **c.get("securityContext", {})}
    secrets = {d["metadata"]["name"]: d["stringData"] for d in docs if d["kind"] == "Secret" and "stringData" in d}
    pod = f"{doc['metadata']['name']}-0"
    args = [*smoke.joined(), "--hostname", pod, "--user", f"{sec.get('runAsUser', 185)}:{sec.get('runAsGroup', 185)}"]
    args += _env(c, pod, secrets) + _volumes(spec, c, smoke.work, docs)
    if c.get("workingDir"):
        args += ["-w", c["workingDir"]]
    if "command" in c:
        args += ["--entrypoint", json.dumps(c["command"])]
    return [*args, smoke.image, *c.get("args", [])]


def check_paths(smoke: Smoke, workloads: list[dict[str, Any]]) -> None:
    """Every file under /opt that a container's command or args names exists in the image."""
    text = " ".join(
        a for d in workloads for c in d["spec"]["template"]["spec"]["containers"] for a in [*c.get("command", []), *c.get("args", [])]
    )
    paths = sorted(set(re.findall(r"(/opt/[\w./-]+)", text)))
    out = subprocess.run(
        ["podman", "run", "--rm", *RUNTIME, "--network", "none", smoke.image, "ls", "-d", *paths], capture_output=True, text=True
    )
    smoke.check(f"files the chart names exist in the image: {' '.join(paths)}", out.returncode == 0 and bool(paths), out.stderr.strip())


# -- the node: one network namespace, Service names on loopback, S3 on the proxy's port -----------
def start_node(smoke: Smoke, docs: tuple[dict[str, Any], ...]) -> None:
    """One container as the node: the installer's MinIO and Toxiproxy (static builds, mounted
    read-only), Toxiproxy on the chart's own ConfigMap (its listen narrowed to loopback), MinIO
    on 127.0.0.2 under its Service name: the store reaches "MinIO behind Toxiproxy" as in a cluster."""
    minio, toxiproxy = installed("minio"), installed("toxiproxy")
    secret = one(docs, "Secret", f"{RELEASE}-s3")["stringData"]
    (smoke.work / "s3" / "data").mkdir(parents=True)
    [proxy] = json.loads(one(docs, "ConfigMap", f"{RELEASE}-toxiproxy")["data"]["toxiproxy.json"])
    s3_port = int(proxy["listen"].rpartition(":")[2])
    minio_host, _, minio_port = proxy["upstream"].rpartition(":")
    proxy["listen"] = f"127.0.0.1:{s3_port}"
    (smoke.work / "s3" / "toxiproxy.json").write_text(json.dumps([proxy]))
    api_port = next(p["port"] for p in one(docs, "Service", f"{RELEASE}-toxiproxy")["spec"]["ports"] if p["name"] == "api")
    # Service names, the API server's, and each pod's own hostname (Java resolves its own, as in a pod)
    pods = {f"{d['metadata']['name']}-0" for d in docs if d["kind"] in ("Deployment", "Job")} | {EXECUTOR_POD}
    hosts = sorted({d["metadata"]["name"] for d in docs if d["kind"] == "Service"} - {minio_host} | {"kubernetes.default.svc"} | pods)
    minio_cmd = ["/minio", "server", "/s3/data", "--address", f"127.0.0.2:{minio_port}", "--quiet"]
    toxi_cmd = ["/toxiproxy", "-host", "127.0.0.1", "-port", str(api_port), "-config", "/s3/toxiproxy.json"]
    hold = f"import socket, time; s = socket.create_server(('127.0.0.1', {HOLD_PORT})); c = s.accept(); time.sleep(3600)"
    script = f"{shlex.join(minio_cmd)} > /s3/minio.log 2>&1 & {shlex.join(toxi_cmd)} > /s3/toxiproxy.log 2>&1 & exec python3 -c {shlex.quote(hold)}"
    args = [
        "--network",
        "none",
        "--user",
        "0:0",
        "-v",
        f"{minio}:/minio:ro",
        "-v",
        f"{toxiproxy}:/toxiproxy:ro",
        "-v",
        f"{smoke.work / 's3'}:/s3",
    ]
    args += ["-e", f"MINIO_ROOT_USER={secret['accessKey']}", "-e", f"MINIO_ROOT_PASSWORD={secret['secretKey']}", "-e", "MINIO_BROWSER=off"]
    args += ["-e", "MINIO_UPDATE=off", "-e", "MINIO_CI_CD=1"]
    (smoke.work / "hosts").write_text("".join(f"127.0.0.1 {h}\n" for h in ["localhost", *hosts]) + f"127.0.0.2 {minio_host}\n")
    args += ["-v", f"{smoke.work / 'hosts'}:/etc/hosts:ro"]
    node = smoke.start("node", [*args, "--entrypoint", '["/bin/bash", "-c"]', smoke.image, script])
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{s3_port}/minio/health/ready', timeout=3)"

    def s3_up() -> bool:
        return smoke.exec(node, ["python3", "-c", probe]).returncode == 0  # MinIO ready, reached through Toxiproxy

    smoke.check(
        f"node: MinIO ({minio_host}) behind Toxiproxy ({RELEASE}-toxiproxy:{s3_port}), {len(hosts) + 1} Service names on loopback",
        smoke.wait(node, s3_up),
    )


# -- each workload --------------------------------------------------------------------------------
def run_init(smoke: Smoke, doc: dict[str, Any], docs: tuple[dict[str, Any], ...]) -> None:
    for c in doc["spec"]["template"]["spec"].get("initContainers", []):
        name = smoke.start(f"{doc['metadata']['name']}-{c['name']}", container_args(doc, c, smoke, docs))
        out = subprocess.run(["podman", "wait", name], capture_output=True, text=True)
        smoke.check(
            f"{doc['metadata']['name']} init {c['name']}: {shlex.join(c['command'])}", out.stdout.strip() == "0", out.stdout.strip()
        )


def probe(smoke: Smoke, name: str, c: dict[str, Any]) -> Callable[[], bool]:
    """The container's readiness probe, run inside its network namespace."""
    p = c["readinessProbe"]
    if "exec" in p:
        return lambda: smoke.exec(name, p["exec"]["command"]).returncode == 0
    ports = {q["name"]: q["containerPort"] for q in c.get("ports", [])}
    get = p["httpGet"]
    port = ports.get(get["port"], get["port"])
    code = f"import urllib.request, sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:{port}{get['path']}', timeout=3).status != 200)"
    return lambda: smoke.exec(name, ["python3", "-c", code]).returncode == 0


def _workers_registered(smoke: Smoke, docs: tuple[dict[str, Any], ...]) -> Callable[[], bool]:
    """Locust's master counts a registered worker (its web API's /worker-count, asked inside the node)."""
    doc = one(docs, "Deployment", f"{RELEASE}-locust-master")
    (c,) = doc["spec"]["template"]["spec"]["containers"]
    web = next(p["containerPort"] for p in c["ports"] if p["name"] == "web")
    master = smoke.name(f"{RELEASE}-locust-master-{c['name']}")
    code = f"import urllib.request, json; print(json.load(urllib.request.urlopen('http://127.0.0.1:{web}/worker-count'))['worker_count'])"
    return lambda: smoke.exec(master, ["python3", "-c", code]).stdout.strip() not in ("", "0")


def start_deployment(smoke: Smoke, doc: dict[str, Any], docs: tuple[dict[str, Any], ...]) -> None:
    run_init(smoke, doc, docs)
    for c in doc["spec"]["template"]["spec"]["containers"]:
        what = f"{doc['metadata']['name']}/{c['name']}"
        name = smoke.start(what.replace("/", "-"), container_args(doc, c, smoke, docs))
        if "readinessProbe" in c:
            kind = "httpGet " + c["readinessProbe"]["httpGet"]["path"] if "httpGet" in c["readinessProbe"] else "exec"
            smoke.check(
                f"{what} ready ({kind})", smoke.wait(name, probe(smoke, name, c)), shlex.join([*c.get("command", []), *c.get("args", [])])
            )
        elif "--worker" in c.get("command", []):
            smoke.check(f"{what} registered with the master", smoke.wait(name, _workers_registered(smoke, docs)))
        else:
            smoke.check(what, False, "no readiness condition known to the smoke")


def run_driver(smoke: Smoke, doc: dict[str, Any], docs: tuple[dict[str, Any], ...]) -> None:
    run_init(smoke, doc, docs)
    (c,) = doc["spec"]["template"]["spec"]["containers"]
    name = smoke.start(f"{doc['metadata']['name']}-{c['name']}", container_args(doc, c, smoke, docs))
    run_json = smoke.work / "runs" / f"{RELEASE}-driver" / "run.json"
    smoke.wait(name, lambda: not smoke.state(name)[0], may_exit=True)
    code = smoke.state(name)[1]
    logs = smoke.logs(name)
    reached = "Connection refused: kubernetes.default.svc" in logs  # Spark's Kubernetes client at the (absent) API server
    smoke.check(
        f"{doc['metadata']['name']} first step: the run recorded, then Spark at the Kubernetes master",
        run_json.is_file() and reached and "Traceback" not in logs.split("Connection refused: kubernetes.default.svc")[0],
        f"run.json {'written' if run_json.is_file() else 'MISSING'}, exit {code}, Kubernetes master {'reached' if reached else 'NOT reached'}",
    )


def run_executor(smoke: Smoke, docs: tuple[dict[str, Any], ...]) -> None:
    """An executor as Spark on Kubernetes starts one: the image's entrypoint with `executor` and the SPARK_* env."""
    template = __import__("yaml").safe_load(one(docs, "ConfigMap", f"{RELEASE}-spark-conf")["data"]["executor-pod-template.yaml"])
    c = template["spec"]["containers"][0]
    secrets = {d["metadata"]["name"]: d["stringData"] for d in docs if d["kind"] == "Secret" and "stringData" in d}
    spark_env = {
        "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{HOLD_PORT}",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_MEMORY": "512m",
        "SPARK_APPLICATION_ID": "spark-chart-smoke",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": EXECUTOR_POD,
        "SPARK_RESOURCE_PROFILE_ID": "0",
    }
    args = [*smoke.joined(), "--hostname", EXECUTOR_POD, "--user", "185:185", *_env(c, EXECUTOR_POD, secrets)]
    args += [a for k, v in spark_env.items() for a in ("-e", f"{k}={v}")]
    args += ["-v", f"{smoke.work / 'runs'}:/runs", smoke.image, "executor"]
    name = smoke.start("executor", args)
    pod = SimpleNamespace(metadata=SimpleNamespace(name=name), spec=SimpleNamespace(containers=[SimpleNamespace(name=c["name"])]))

    def podman_exec(api: Any, namespace: str, pod: str, container: str, argv: list[str]) -> tuple[int, str]:
        out = smoke.exec(pod, argv)
        return out.returncode, out.stdout

    targets = K8sTargets(api=None, namespace="statebed", executor_selector="", exec_fn=podman_exec)  # type: ignore[arg-type]
    found: list[Any] = []

    def jvm_found() -> bool:
        try:
            found.append(targets._find_jvm(pod))
        except StatebedError:  # the container is not up yet (or has exited: wait() tells which)
            return False
        return found[-1] is not None

    smoke.wait(name, jvm_found)
    jvm = found[-1] if found else None
    smoke.check(
        "executor: the chaos backend's process search finds the executor JVM (not PID 1)",
        jvm is not None,
        "" if jvm is None else f"PID {jvm.pid}: {shlex.join((jvm.cmdline or ())[-16:])}",
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: chart_smoke.py IMAGE", file=sys.stderr)
        return 2
    work = (ROOT / "runs" / f"chart-smoke-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    (work / "runs").mkdir(parents=True)
    docs = render("kind", f"global: {{image: {{repository: {argv[0].rsplit(':', 1)[0]}, tag: {argv[0].rsplit(':', 1)[1]}}}}}")
    smoke = Smoke(argv[0], work)
    ours = [d for d in docs if d["kind"] in ("Deployment", "Job") and d["spec"]["template"]["spec"]["containers"][0]["image"] == argv[0]]
    others = sorted(
        {c["image"] for d in docs if d["kind"] in ("Deployment", "Job") for c in d["spec"]["template"]["spec"]["containers"]} - {argv[0]}
    )
    print(f"chart-smoke: {len(ours)} workloads of the chart run {argv[0]}; not runnable here (no registry): {', '.join(others)}")
    try:
        check_paths(smoke, ours)
        start_node(smoke, docs)
        for doc in sorted(ours, key=lambda d: (d["kind"], "worker" in d["metadata"]["name"])):
            (run_driver if doc["kind"] == "Job" else start_deployment)(smoke, doc, docs)
        run_executor(smoke, docs)
    finally:
        smoke.cleanup()
    print(f"chart-smoke: {'PASS' if not smoke.failures else 'FAIL'}; logs in {work / 'logs'}")
    for f in smoke.failures:
        print(f"  {f}", file=sys.stderr)
    return 1 if smoke.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
