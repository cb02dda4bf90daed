"""The Toxiproxy-API proxy, driven by the real toxiproxy-python client, against a TCP echo server
and the real SeaweedFS S3 server; and the managed S3 + proxy services of an experiment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests
from minio.error import S3Error
from proxy_helpers import connect, echo_server, proxy_api, records, recv_all, wait_for
from s3server import ACCESS_KEY, SECRET_KEY, S3Server
from statebed_base.errors import AlreadyExistsError
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists
from toxiproxy.proxy import Proxy

from statebed_chaos.infra import storage_services
from statebed_chaos.targets import LocalTargets
from statebed_store import S3Settings
from statebed_store.storage import S3Storage

STATEBED = str(Path(sys.executable).parent / "statebed")


def test_client_manages_proxies_and_toxics() -> None:
    with proxy_api() as (server, client), echo_server() as upstream:
        assert client.version() == b"statebed-toxiproxy-2.0"
        proxy = client.create(upstream=upstream, name="echo")
        assert proxy.listen.startswith("127.0.0.1:") and not proxy.listen.endswith(":0")
        assert set(client.proxies()) == {"echo"} and client.get_proxy("echo").upstream == upstream
        proxy.add_toxic(type="latency", attributes={"latency": 50})
        proxy.add_toxic(type="bandwidth", stream="upstream", name="slow", toxicity=0.5, attributes={"rate": 10})
        toxics = proxy.toxics()
        assert set(toxics) == {"latency_downstream", "slow"}
        assert (toxics["latency_downstream"].attributes, toxics["slow"].stream, toxics["slow"].toxicity) == (
            {"latency": 50, "jitter": 0},
            "upstream",
            0.5,
        )
        r = requests.post(f"{server.url}/proxies/echo/toxics/slow", json={"attributes": {"rate": 20}}, timeout=5)
        assert r.status_code == 200 and proxy.get_toxic("slow").attributes == {"rate": 20}
        assert proxy.destroy_toxic("slow") and proxy.get_toxic("slow") is None
        proxy.disable()
        assert client.get_proxy("echo").enabled is False
        assert client.reset() and client.get_proxy("echo").enabled is True and proxy.toxics() == {}
        assert proxy.destroy() and client.proxies() == {}


def test_api_errors_like_toxiproxy() -> None:
    with proxy_api() as (server, client), echo_server() as upstream:
        proxy = client.create(upstream=upstream, name="echo")
        dup = requests.post(f"{server.url}/proxies", json={"name": "echo", "upstream": upstream}, timeout=5)
        assert (dup.status_code, dup.json()) == (409, {"error": "proxy already exists", "status": 409})
        with pytest.raises(NotFound):
            Proxy(name="nope", upstream=upstream, enabled=True, listen="127.0.0.1:1").toxics()
        with pytest.raises(NotFound):
            proxy.destroy_toxic("never-added")
        proxy.add_toxic(type="latency", attributes={"latency": 1})
        with pytest.raises(ProxyExists):
            proxy.add_toxic(type="latency", attributes={"latency": 2})
        with pytest.raises(InvalidToxic, match="invalid toxic type"):
            proxy.add_toxic(type="slicer")
        with pytest.raises(InvalidToxic, match="not a loopback address"):
            client.create(upstream=upstream, name="open", listen="0.0.0.0:0")
        assert set(client.proxies()) == {"echo"}


def test_latency_delays_an_s3_get_by_at_least_the_latency(s3_server: S3Server, tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    with proxy_api(record) as (_, client):
        proxy = client.create(upstream=s3_server.endpoint.removeprefix("http://"), name="s3")
        through = S3Storage(f"s3://statebed-test/{uuid.uuid4().hex}", S3Settings(f"http://{proxy.listen}", ACCESS_KEY, SECRET_KEY))
        through.write("obj", b"x" * 1000)
        proxy.add_toxic(type="latency", attributes={"latency": 300})
        start = time.monotonic()
        assert through.read("obj") == b"x" * 1000
        assert time.monotonic() - start >= 0.3  # a lower bound: every response chunk waited 300 ms
        proxy.destroy_toxic("latency_downstream")
        acts = records(record)
        assert acts and {(r["proxy"], r["toxic"], r["type"], r["stream"]) for r in acts} == {
            ("s3", "latency_downstream", "latency", "downstream")
        }
        assert all(r["bytes"] > 0 for r in acts)


def test_bandwidth_throttles_to_the_rate() -> None:
    with proxy_api() as (_, client), echo_server() as upstream:
        proxy = client.create(upstream=upstream, name="echo")
        proxy.add_toxic(type="bandwidth", attributes={"rate": 100})  # 100 KB/s downstream
        s = connect(proxy.listen)
        start = time.monotonic()
        s.sendall(b"y" * 50_000)
        got = 0
        while got < 50_000:
            got += len(s.recv(65536))
        assert time.monotonic() - start >= 0.45  # 50 kB at 100 kB/s: at least ~0.5 s
        s.close()


def test_timeout_zero_holds_data_until_removed_then_closes(tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    with proxy_api(record) as (_, client), echo_server() as upstream:
        proxy = client.create(upstream=upstream, name="echo")
        proxy.add_toxic(type="timeout", attributes={"timeout": 0})
        s = connect(proxy.listen)
        done = threading.Event()
        got: list[bytes] = []

        def request() -> None:
            s.sendall(b"ping")
            got.append(recv_all(s))
            done.set()

        threading.Thread(target=request, daemon=True).start()
        wait_for(lambda: any(r["bytes"] == 4 for r in records(record)))  # the proxy holds the echoed reply
        assert not done.is_set()
        proxy.destroy_toxic("timeout_downstream")
        assert done.wait(10) and got == [b""]  # nothing got through; the held connection was closed
        s.close()


def test_reset_peer_resets_the_connection() -> None:
    with proxy_api() as (_, client), echo_server() as upstream:
        proxy = client.create(upstream=upstream, name="echo")
        proxy.add_toxic(type="reset_peer", attributes={"timeout": 0})
        s = connect(proxy.listen)
        with pytest.raises(ConnectionResetError):
            s.sendall(b"ping")
            recv_all(s)
        s.close()


def test_limit_data_closes_after_n_bytes() -> None:
    with proxy_api() as (_, client), echo_server() as upstream:
        proxy = client.create(upstream=upstream, name="echo")
        proxy.add_toxic(type="limit_data", attributes={"bytes": 10})
        s = connect(proxy.listen)
        s.sendall(b"z" * 100)
        assert recv_all(s) == b"z" * 10
        s.close()


def test_disable_closes_connections_and_stops_listening() -> None:
    with proxy_api() as (_, client), echo_server() as upstream:
        proxy = client.create(upstream=upstream, name="echo")
        s = connect(proxy.listen)
        s.sendall(b"a")
        assert s.recv(10) == b"a"
        proxy.disable()
        assert recv_all(s) == b""
        with pytest.raises(ConnectionRefusedError):
            connect(proxy.listen)
        proxy.enable()
        t = connect(proxy.listen)
        t.sendall(b"b")
        assert t.recv(10) == b"b"
        s.close()
        t.close()


def test_s3_through_the_proxy_keeps_create_only_puts(s3_server: S3Server) -> None:
    with proxy_api() as (_, client):
        proxy = client.create(upstream=s3_server.endpoint.removeprefix("http://"), name="s3")
        prefix = uuid.uuid4().hex
        store = S3Storage(f"s3://statebed-test/{prefix}", S3Settings(f"http://{proxy.listen}", ACCESS_KEY, SECRET_KEY))
        store.write("a", b"first", create_only=True)
        with pytest.raises(AlreadyExistsError):
            store.write("a", b"second", create_only=True)
        assert store.read("a") == b"first"
        with pytest.raises(S3Error) as e:  # the raw If-None-Match PUT: SeaweedFS's 412 passes the proxy unchanged
            store.client._put_object("statebed-test", f"{prefix}/a", b"x", headers={"If-None-Match": "*"})
        assert e.value.response.status == 412


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pids(run: Path) -> list[int]:
    return [t.pid for kind in ("s3", "proxy") for t in LocalTargets(run).find(kind)]


def test_storage_services_start_and_stop_everything(tmp_path: Path) -> None:
    with storage_services(tmp_path / "infra", run_dir=tmp_path / "run") as svc:
        pids = _pids(tmp_path / "run")
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        store = S3Storage("s3://statebed-test/services", svc.settings)
        store.write("k", b"v")
        assert store.read("k") == b"v" and svc.endpoint != svc.direct and svc.record is not None
        assert svc.proxy.name == "s3" and svc.endpoint == f"http://{svc.proxy.listen}"
    assert not any(_alive(p) for p in pids)


def test_storage_services_stop_everything_on_error(tmp_path: Path) -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="boom"), storage_services(tmp_path / "infra", run_dir=tmp_path / "run"):
        pids = _pids(tmp_path / "run")
        raise RuntimeError("boom")
    assert len(pids) == 2 and not any(_alive(p) for p in pids)


def test_statebed_proxy_cli_exits_cleanly(tmp_path: Path) -> None:
    bad = subprocess.run([STATEBED, "proxy", "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--public" in bad.stderr and len(bad.stderr.splitlines()) == 1
    proc = subprocess.Popen([STATEBED, "proxy", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("statebed proxy: API on http://127.0.0.1:")
        assert requests.get(line.split()[-1] + "/version", timeout=5).text == "statebed-toxiproxy-2.0"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert proc.stderr is not None and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_browsers_are_refused_with_403_like_toxiproxy() -> None:
    """Toxiproxy's stopBrowsersMiddleware: a `Mozilla/` user agent gets 403; so does any `Origin` header
    (a web page's request carries one), on reads and writes alike, and nothing changes."""
    with proxy_api() as (server, client), echo_server() as upstream:
        client.create(upstream=upstream, name="echo").add_toxic(type="latency", attributes={"latency": 1})
        browser = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0"}
        page = {"Origin": "http://evil.example"}
        for headers in (browser, page):
            for method, path, body in (
                ("GET", "/version", None),
                ("GET", "/proxies", None),
                ("POST", "/proxies", {"name": "open", "upstream": upstream}),
                ("POST", "/reset", None),
                ("DELETE", "/proxies/echo", None),
            ):
                r = requests.request(method, server.url + path, json=body, headers=headers, timeout=5)
                assert r.status_code == 403, (headers, method, path, r.status_code)
                assert r.text.strip() in ("User agent not allowed", "Origin not allowed")
        assert set(client.proxies()) == {"echo"} and set(client.get_proxy("echo").toxics()) == {"latency_downstream"}
        assert requests.get(server.url + "/version", timeout=5).status_code == 200  # python-requests, no Origin: served


def test_writes_with_a_body_must_be_json() -> None:
    """A form or `text/plain` POST (what a page may send without a CORS preflight) is 415; toxiproxy-python's
    writes carry `application/json` (requests' `json=`) and its bodyless POST /reset and DELETEs need none."""
    with proxy_api() as (server, client), echo_server() as upstream:
        body = json.dumps({"name": "p", "upstream": upstream})
        for headers in ({"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"}, {}):
            r = requests.post(server.url + "/proxies", data=body, headers=headers, timeout=5)
            assert (r.status_code, r.json()["status"]) == (415, 415), headers
            assert "application/json" in r.json()["error"]
        assert client.proxies() == {}
        sent = requests.Request("POST", server.url + "/proxies", json={"name": "p"}).prepare()
        assert sent.headers["Content-Type"] == "application/json"  # what toxiproxy-python's APIConsumer.post sends
        r = requests.post(server.url + "/proxies", data=body, headers={"Content-Type": "Application/JSON; charset=utf-8"}, timeout=5)
        assert r.status_code == 201
        proxy = client.get_proxy("p")
        proxy.add_toxic(type="latency", attributes={"latency": 1})
        assert client.reset() and proxy.toxics() == {}  # POST /reset: no body, no content type
        assert proxy.destroy() and client.proxies() == {}


def test_deeply_nested_json_is_400_not_a_dropped_connection() -> None:
    with proxy_api() as (server, client):
        r = requests.post(
            server.url + "/proxies", data=b"[" * 30_000 + b"]" * 30_000, headers={"Content-Type": "application/json"}, timeout=5
        )
        assert (r.status_code, r.json()["status"]) == (400, 400) and "nested" in r.json()["error"]
        assert client.proxies() == {}


def test_non_loopback_listen_and_upstream_are_refused_unless_allowed() -> None:
    off = "198.51.100.7:80"  # TEST-NET-2: never on this machine; nothing connects to it below
    with proxy_api() as (server, client), echo_server() as upstream:
        for listen, up in (
            ("127.0.0.1:0", off),
            ("127.0.0.1:0", "[::ffff:198.51.100.7]:80"),
            ("198.51.100.7:0", upstream),
            ("0.0.0.0:0", upstream),
        ):
            r = requests.post(server.url + "/proxies", json={"name": "x", "listen": listen, "upstream": up}, timeout=5)
            assert r.status_code == 400 and "--allow-upstream" in r.json()["error"], (listen, up, r.text)
        proxy = client.create(upstream=upstream, name="echo")
        r = requests.post(f"{server.url}/proxies/echo", json={"upstream": off}, timeout=5)
        assert r.status_code == 400 and client.get_proxy("echo").upstream == upstream
        assert client.create(upstream="localhost:" + upstream.rpartition(":")[2], name="named").upstream.startswith("localhost:")
        unresolved = requests.post(server.url + "/proxies", json={"name": "u", "upstream": "nosuch.invalid:80"}, timeout=5)
        assert unresolved.status_code == 400 and "nosuch.invalid" in unresolved.json()["error"]
        assert set(client.proxies()) == {"echo", "named"} and proxy.destroy()
    with proxy_api(allow=["198.51.100.0/24"]) as (server, client):
        assert client.create(upstream=off, name="far", enabled=False).upstream == off  # named by --allow-upstream
        r = requests.post(server.url + "/proxies", json={"name": "y", "listen": "198.51.100.7:0", "upstream": off}, timeout=5)
        assert r.status_code == 400 and "--public" in r.json()["error"]  # a listener beyond loopback also needs --public
        assert requests.post(server.url + "/proxies", json={"name": "z", "upstream": "203.0.113.9:80"}, timeout=5).status_code == 400


def test_statebed_proxy_refuses_bad_addresses_in_one_line() -> None:
    for args, named in (
        (["--host", "198.51.100.7"], "--public"),
        (["--host", "nosuch.invalid", "--public"], "nosuch.invalid"),
        (["--port", "70000"], "--port"),
        (["--allow-upstream", "10.0.0.0/33"], "--allow-upstream"),
        (["--allow-upstream", "not-a-cidr"], "--allow-upstream"),
    ):
        bad = subprocess.run([STATEBED, "proxy", *args], capture_output=True, text=True, timeout=60)
        assert (bad.returncode, len(bad.stderr.splitlines()), bad.stdout) == (2, 1, ""), (args, bad.stderr)
        assert named in bad.stderr, (args, bad.stderr)


def test_hostile_addresses_are_400_not_a_crash() -> None:
    with proxy_api() as (server, client), echo_server() as upstream:
        for up in ("a" * 100 + ":80", "..:80", "\x1b[2J:80"):  # names IDNA or the resolver refuse
            r = requests.post(server.url + "/proxies", json={"name": "h", "upstream": up}, timeout=5)
            assert (r.status_code, "cannot resolve" in r.json()["error"]) == (400, True), (up, r.text)
        mapped = client.create(upstream="[::ffff:127.0.0.1]:" + upstream.rpartition(":")[2], name="mapped")  # loopback, IPv4-mapped
        s = connect(mapped.listen)
        s.sendall(b"m")
        assert s.recv(10) == b"m"
        s.close()
        assert set(client.proxies()) == {"mapped"}
