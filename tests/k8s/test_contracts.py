"""Contracts between the rendered chart (every platform), the image and the code, checked without an
API server: each command a container runs parses with the real CLI it names, each file a manifest
names is one the Dockerfile puts in the image, and the images we cannot run here (MinIO, mc,
Toxiproxy) get flags and ports their programs define. `make image-smoke` (k8s/chart_smoke.py) then
starts the statebed containers themselves from the built image."""

from __future__ import annotations

import argparse
import re
import shlex
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import pyspark
import pytest
from k8s_render import RELEASE, ROOT, VALUES, containers, one, render

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _workloads(platform: str) -> list[tuple[str, dict[str, Any]]]:
    docs = render(platform)
    return [(f"{d['metadata']['name']}/{c['name']}", c) for d in docs if d["kind"] in ("Deployment", "Job") for c in containers(d)]


def _parses(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    """'' when `argv` parses, else argparse's own error (it exits 2 on one)."""
    err = StringIO()
    try:
        with redirect_stderr(err), redirect_stdout(StringIO()):
            parser.parse_args(argv)
    except SystemExit as e:
        return err.getvalue().strip().splitlines()[-1] if e.code else ""
    return ""


def _statebed(argv: list[str]) -> str:
    from statebed_cli.main import build_parser

    return _parses(build_parser(), argv)


def _module(module: str, argv: list[str]) -> str:
    import importlib

    return _parses(importlib.import_module(module)._parser(), argv)


def _locust(argv: list[str]) -> str:
    """Locust's own parser, in a child process (importing locust monkey-patches this one with gevent)."""
    import subprocess
    import sys

    code = "import sys; from locust.argument_parser import get_parser; get_parser(default_config_files=[]).parse_args(sys.argv[1:])"
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    return "" if out.returncode == 0 else (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]


def _driver_runs(script: str) -> list[list[str]]:
    """The driver Job's two `statebed run` command lines: a fresh run and a resumed one."""
    fresh = re.search(r"else set -- (.*?); fi", script)
    run = re.search(r"/opt/statebed/statebed\.py (run .*?) \"\$@\"", script.replace("\\\n", " "))
    assert fresh and run, script
    base = shlex.split(run.group(1).replace('"$RUN"', "/runs/statebed-driver"))
    return [base + shlex.split(fresh.group(1)), [*base, "--resume"]]


def _commands(c: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(what parses it, argv) for each statebed / python -m / locust invocation in a container."""
    argv = [*c.get("command", []), *c.get("args", [])]
    if argv[:2] == ["/bin/bash", "-ec"]:
        return [("statebed", run) for run in _driver_runs(argv[2])]
    if argv[0] == "statebed":
        return [("statebed", argv[1:])]
    if argv[0] in ("python", "python3") and argv[1] == "-m":
        return [(argv[2], argv[3:])]
    if argv[0] == "locust":
        return [("locust", argv[1:])]
    return []


@pytest.mark.parametrize("platform", list(VALUES))
def test_every_statebed_python_and_locust_command_parses_with_the_real_cli(platform: str) -> None:
    checked, errors = 0, []
    for what, c in _workloads(platform):
        for kind, argv in _commands(c):
            err = _statebed(argv) if kind == "statebed" else _locust(argv) if kind == "locust" else _module(kind, argv)
            checked += 1
            if err:
                errors.append(f"{what}: {kind} {shlex.join(argv)}: {err}")
        probe = c.get("readinessProbe", {}).get("exec", {}).get("command")
        if probe and probe[0] == "statebed":
            checked += 1
            assert not _statebed(probe[1:]) or probe[1:] == ["--help"], what
    assert not errors, "\n".join(errors)
    assert checked >= 5  # driver (fresh, resume), ingest, locust master and worker at least


def test_the_ingest_service_binds_the_pod_address_only_with_public() -> None:
    docs = render("default")
    c = containers(one(docs, "Deployment", f"{RELEASE}-ingest"))[0]
    argv = [*c["command"], *c["args"]]
    assert argv[:3] == ["python3", "-m", "statebed_load.service"]
    assert "0.0.0.0" in argv and "--public" in argv and "--landing" in argv
    from statebed_base.errors import UsageError
    from statebed_base.netaddr import check_bind
    from statebed_load.service import _parser

    args = _parser().parse_args(argv[3:])
    assert check_bind(args.host, args.port, public=args.public)  # allowed, with its warning line
    with pytest.raises(UsageError):  # what the service does without --public
        check_bind(args.host, args.port, public=False)
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"  # the route service.py serves


def _image_path(path: str) -> bool:
    """Whether the Dockerfile puts `path` in the image: a COPY destination (of an existing source), a file
    a RUN writes (`> path`), or under /opt/spark (a link to the installed pyspark package)."""
    for src, dst in re.findall(r"^COPY (\S+) (\S+)$", DOCKERFILE, re.M):
        if path == dst:
            return (ROOT / src).is_file()
        if path.startswith(dst.rstrip("/") + "/"):
            return (ROOT / src / path[len(dst.rstrip("/")) + 1 :]).exists()
    if re.search(rf"> {re.escape(path)};", DOCKERFILE):
        return True
    if path.startswith("/opt/spark/") and "/opt/spark;" in DOCKERFILE:
        return (Path(pyspark.__file__).parent / path.removeprefix("/opt/spark/")).exists()
    return False


@pytest.mark.parametrize("platform", list(VALUES))
def test_every_image_file_a_manifest_names_is_in_the_image(platform: str) -> None:
    paths = set()
    for _, c in _workloads(platform):
        if "statebed" not in c["image"]:
            continue
        text = " ".join([*c.get("command", []), *c.get("args", [])])
        paths |= set(re.findall(r"(/opt/[\w./-]+)", text))
    assert {"/opt/statebed/locustfile.py", "/opt/spark/bin/spark-submit", "/opt/statebed/statebed.py"} <= paths
    missing = sorted(p for p in paths if not _image_path(p))
    assert not missing, f"named by the chart, not in the image: {missing}"


def test_the_image_path_check_can_fail() -> None:
    assert not _image_path("/opt/statebed/nothing-here.py") and _image_path("/opt/statebed/src/src/statebed_load/__init__.py")


# -- images that cannot run here: their programs' flags and ports -------------------------------
# toxiproxy-server's flags (Shopify/toxiproxy cmd/server/server.go): -host -port -config -seed
# -runtime-metrics -proxy-metrics -version; the image's entrypoint is the server.
TOXIPROXY_FLAGS = {"host", "port", "config", "seed", "runtime-metrics", "proxy-metrics", "version"}


def test_toxiproxy_args_are_flags_of_toxiproxy_server_and_its_config_is_mounted() -> None:
    docs = render("default")
    c = containers(one(docs, "Deployment", f"{RELEASE}-toxiproxy"))[0]
    assert "command" not in c
    flags = dict(a.lstrip("-").split("=", 1) for a in c["args"])
    assert set(flags) <= TOXIPROXY_FLAGS, flags
    mount = next(m for m in c["volumeMounts"] if flags["config"].startswith(m["mountPath"] + "/"))
    cm = one(docs, "ConfigMap", f"{RELEASE}-toxiproxy")
    assert flags["config"].removeprefix(mount["mountPath"] + "/") in cm["data"]
    assert {p["containerPort"] for p in c["ports"]} == {int(flags["port"]), 9000}


@pytest.mark.parametrize("platform", list(VALUES))
def test_every_probe_and_service_port_names_a_declared_container_port(platform: str) -> None:
    docs = render(platform)
    for d in docs:
        if d["kind"] not in ("Deployment", "Job"):
            continue
        for c in containers(d):
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe"):
                port = next((v["port"] for k, v in c.get(probe, {}).items() if k in ("httpGet", "tcpSocket")), None)
                assert port is None or port in ports or port in ports.values(), f"{d['metadata']['name']} {probe} port {port}"
    for svc in (d for d in docs if d["kind"] == "Service"):
        selector = svc["spec"]["selector"]
        (target,) = [
            d
            for d in docs
            if d["kind"] == "Deployment" and all(d["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in selector.items())
        ]
        names = {p["name"] for c in containers(target) for p in c.get("ports", [])}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= names, svc["metadata"]["name"]


def test_minio_serves_on_the_ports_its_probes_and_service_use() -> None:
    c = containers(one(render("default"), "Deployment", f"{RELEASE}-minio"))[0]
    assert c["args"][:2] == ["server", "/data"] and "command" not in c  # the image's entrypoint is minio
    addr = dict(zip(c["args"][2::2], c["args"][3::2], strict=True))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert addr == {"--address": f":{ports['s3']}", "--console-address": f":{ports['console']}"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/minio/health/ready", "port": "s3"}
