"""The live ingest service (real uvicorn in a subprocess): acks, bad input, storage failure, metrics."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3server import ACCESS_KEY, SECRET_KEY, S3Server

from statebed_load.managed import Managed, start_ingest
from statebed_model.sources import IngestSource
from statebed_store import S3Settings, open_storage
from statebed_store.location import parse_location


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], dict[str, object]]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Managed, str, Path]]:
    landing = tmp_path / "landing"
    proc, url = start_ingest(str(landing), tmp_path / "logs")
    try:
        yield proc, url, landing
    finally:
        assert proc.stop() == -signal.SIGTERM  # graceful: uvicorn re-raises the SIGTERM it handled (not -9: no KILL needed)


BAD = [
    (b'{"key": 1, "value": ', 400, "malformed JSON", "/event"),
    (b'{"key": NaN, "value": 1}', 400, "malformed JSON", "/event"),
    (b'{"key": 1}', 422, "missing field 'value'", "/event"),
    (b'{"key": 1, "value": 2, "extra": 3}', 422, "unknown field(s) ['extra']", "/event"),
    (b'{"key": "1", "value": 2}', 422, "event.key: expected an integer, got str", "/event"),
    (b'{"key": true, "value": 2}', 422, "event.key: expected an integer, got bool", "/event"),
    (b'{"key": 1, "value": 1.5}', 422, "event.value: expected an integer, got float", "/event"),
    (b'{"key": 9223372036854775808, "value": 1}', 422, "outside 64-bit integers", "/event"),
    (b"[1, 2]", 422, "expected an object, got list", "/event"),
    (b'{"events": []}', 422, "non-empty list", "/events"),
    (b'{"events": [{"key": 1, "value": 1}], "more": 1}', 422, '{"events": [...]} and nothing else', "/events"),
    (b'{"events": [{"key": 1, "value": 1}, {"key": 2}]}', 422, "events[1]: missing field 'value'", "/events"),
    (json.dumps({"events": [{"key": i, "value": 1} for i in range(1001)]}).encode(), 413, "1001 events, at most 1000", "/events"),
    (b'{"key": 1, "value": 1}' + b" " * (1 << 20), 413, "bytes, at most 1048576", "/event"),
]


def test_bad_input_gets_4xx_with_a_reason_and_nothing_lands(service: tuple[Managed, str, Path]) -> None:
    proc, url, landing = service
    for body, status, reason, path in BAD:
        code, _, doc = post(url + path, body)
        assert (code, reason in str(doc.get("error"))) == (status, True), (body[:60], code, doc)
    assert proc.alive()
    code, _, single = post(url + "/event", b'{"key": 5, "value": 7}')
    code2, _, batch = post(url + "/events", json.dumps({"events": [{"key": 1, "value": 2}, {"key": -3, "value": 4}]}).encode())
    assert (code, code2) == (200, 200)
    acks = IngestSource(open_storage(landing)).acks()
    assert [a.ids for a in acks] == [single["ids"], batch["ids"]]  # only the two good requests landed, each acknowledged
    assert len(set(single["ids"]) | set(batch["ids"])) == 3  # unique record ids
    records = IngestSource(open_storage(landing)).records([Path(a.file).name for a in acks])
    assert sorted(zip(records["key"].to_pylist(), records["value"].to_pylist(), strict=True)) == [(-3, 4), (1, 2), (5, 7)]
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    assert "statebed_ingest_acknowledged_records_total 3.0" in metrics
    assert 'statebed_ingest_requests_total{status="422"} 10.0' in metrics


def test_landing_failure_is_503_with_retry_after_never_an_ack(service: tuple[Managed, str, Path]) -> None:
    proc, url, landing = service
    assert post(url + "/event", b'{"key": 1, "value": 1}')[0] == 200
    shutil.rmtree(landing / "data")
    (landing / "data").write_text("not a directory")  # the landing area breaks under the service
    code, headers, doc = post(url + "/event", b'{"key": 2, "value": 2}')
    assert (code, headers.get("retry-after") or headers.get("Retry-After")) == (503, "1"), doc
    assert "landing storage unavailable" in str(doc["error"])
    (landing / "data").unlink()
    (landing / "data").mkdir()
    code, _, doc = post(url + "/event", b'{"key": 3, "value": 3}')
    assert code == 200 and proc.alive()
    acks = IngestSource(open_storage(landing)).acks()
    assert len(acks) == 2 and acks[-1].ids == doc["ids"]  # the refused request was never acknowledged


def test_overload_gets_429_with_retry_after(tmp_path: Path) -> None:
    proc, url = start_ingest(str(tmp_path / "landing"), tmp_path / "logs", extra=["--max-inflight", "0"])
    try:
        code, headers, doc = post(url + "/event", b'{"key": 1, "value": 1}')
        assert (code, headers.get("retry-after") or headers.get("Retry-After")) == (429, "1"), doc
        assert IngestSource(open_storage(tmp_path / "landing")).acks() == []
    finally:
        assert proc.stop() == -signal.SIGTERM


def test_the_service_listens_on_loopback_only(service: tuple[Managed, str, Path]) -> None:
    assert service[1].startswith("http://127.0.0.1:")


@pytest.mark.s3
def test_landing_on_s3_acknowledges_only_what_the_bucket_holds(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Kubernetes set-up: the service lands on S3 (real MinIO) through the same `Storage`."""
    for name, value in (
        ("STATEBED_S3_ENDPOINT", s3_server.endpoint),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
    ):
        monkeypatch.setenv(name, value)  # the service is a subprocess: it reads S3 settings from its environment
    landing = f"s3://statebed-test/landing-{tmp_path.name}"
    proc, url = start_ingest(landing, tmp_path / "logs")
    try:
        code, _, doc = post(url + "/events", json.dumps({"events": [{"key": k, "value": k * 10} for k in range(5)]}).encode())
        assert code == 200, doc
        assert post(url + "/event", b'{"key": 1}')[0] == 422
    finally:
        assert proc.stop() == -signal.SIGTERM
    source = IngestSource(open_storage(parse_location(landing, S3Settings.from_env())))
    acks = source.acks()
    assert [a.ids for a in acks] == [doc["ids"]]
    records = source.records([Path(a.file).name for a in acks])
    assert sorted(zip(records["key"].to_pylist(), records["value"].to_pylist(), strict=True)) == [(k, k * 10) for k in range(5)]


def test_writes_from_a_web_page_or_not_json_are_refused_and_nothing_lands(service: tuple[Managed, str, Path]) -> None:
    """An `Origin` header (a browser's request) is 403; a write whose Content-Type is not application/json
    (a form or text/plain POST, which needs no CORS preflight) is 415. Reads stay open (Prometheus scrapes)."""
    proc, url, landing = service
    event = b'{"key": 1, "value": 1}'
    for path in ("/event", "/events"):
        body = event if path == "/event" else b'{"events": [' + event + b"]}"
        assert post(url + path, body, {"Origin": "http://evil.example"})[:3:2] == (
            403,
            {"error": "Origin header: requests from web pages are refused"},
        )
        for ctype in ("text/plain", "application/x-www-form-urlencoded", ""):
            code, _, doc = post(url + path, body, {"Content-Type": ctype})
            assert code == 415 and "application/json" in str(doc["error"]), (path, ctype, doc)
    assert post(url + "/event", event, {"Content-Type": "application/json; charset=utf-8"})[0] == 200
    assert len(IngestSource(open_storage(landing)).acks()) == 1 and proc.alive()
    with urllib.request.urlopen(urllib.request.Request(url + "/health", headers={"Origin": "http://x"}), timeout=30) as r:
        assert r.status == 200


def test_json_nested_beyond_the_depth_limit_is_400(service: tuple[Managed, str, Path]) -> None:
    proc, url, landing = service
    for body in (b"[" * 100_000 + b"]" * 100_000, b'{"key": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_001):
        code, _, doc = post(url + "/event", body)
        assert code == 400 and "nested deeper than" in str(doc["error"]), (code, doc)
    assert (
        post(url + "/events", b'{"events": [{"key": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "value": 1}]}')[0] == 422
    )  # brackets in a string
    assert post(url + "/event", b'{"key": [[[1]]], "value": 1}')[0] == 422  # nested, within the limit: the schema's answer
    assert proc.alive() and IngestSource(open_storage(landing)).acks() == []


def _one_line_exit_2(args: list[str], tmp_path: Path) -> str:
    ready = tmp_path / "ready.json"
    done = subprocess.run(
        [sys.executable, "-m", "statebed_load.service", *args, "--ready-file", str(ready)], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, len(done.stderr.splitlines()), done.stdout) == (2, 1, ""), (args, done.returncode, done.stderr)
    assert not ready.exists()
    return done.stderr


def test_bad_host_port_or_landing_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    ok = str(tmp_path / "landing")
    for args, named in (
        (["--landing", str(tmp_path / "file")], "not a directory"),
        (["--landing", str(tmp_path / "fifo")], "not a directory"),
        (["--landing", str(tmp_path / "file" / "sub")], "--landing"),
        (["--landing", ok, "--port", "70000"], "--port"),
        (["--landing", ok, "--port", "-1"], "--port"),
        (["--landing", ok, "--port", "http"], "--port"),
        (["--landing", ok, "--host", "nosuch.invalid"], "nosuch.invalid"),
        (["--landing", ok, "--host", "198.51.100.7"], "--public"),
        (["--landing", ok, "--host", "198.51.100.7", "--public"], "198.51.100.7"),  # told to, but no interface has it
        (["--landing", ok, "--max-batch", "0"], "--max-batch"),
        (["--host", "127.0.0.1"], "--landing"),
    ):
        err = _one_line_exit_2(args, tmp_path)
        assert err.startswith("python -m statebed_load.service: error: ") and named in err, (args, err)
    assert (tmp_path / "file").read_text() == "x"


def test_a_busy_port_is_one_line_exit_2(service: tuple[Managed, str, Path], tmp_path: Path) -> None:
    port = service[1].rpartition(":")[2]
    err = _one_line_exit_2(["--landing", str(tmp_path / "other"), "--port", port], tmp_path)
    assert f"127.0.0.1:{port}" in err and "in use" in err
