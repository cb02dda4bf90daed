"""The metrics the dashboard needs that no component served before: Toxiproxy's /metrics, the
run exporter (Locust's stats, the verdict, the ingest->commit histogram), and --prometheus's
refusals (a missing server, a directory a run did not claim)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from net_helpers import connect, echo_server, wait_for
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from statebed_base.errors import UsageError
from statebed_chaos.infra.proxy import start_proxy
from statebed_chaos.infra.services import toxiproxy_client
from statebed_load.prometheus import RunExporter, discover, prometheus_for_run, render_config, write_latency_histogram

ROOT = Path(__file__).resolve().parents[2]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_toxiproxy_serves_bytes_per_proxy_and_direction_as_prometheus_metrics(tmp_path: Path) -> None:
    """The real Toxiproxy as experiments start it (`-proxy-metrics`): what the dashboard's proxy panel reads."""
    toxiproxy = start_proxy(tmp_path / "toxiproxy")
    try:
        with echo_server() as upstream:
            proxy = toxiproxy_client(toxiproxy.api).create(upstream=upstream, name="s3", listen="127.0.0.1:0")
            proxy.add_toxic(type="latency", stream="downstream", attributes={"latency": 10})
            with connect(proxy.listen) as sock:
                sock.sendall(b"ping")  # no half-close: Toxiproxy ends the link at the client's FIN, maybe before the echo
                assert sock.recv(4, socket.MSG_WAITALL) == b"ping"
            # Toxiproxy counts a chunk once it passed both ends: wait for the counters, not a clock
            got = wait_for(lambda: _counted(toxiproxy.api, want=4), timeout_s=20)
    finally:
        toxiproxy.stop()
    assert (
        got[("toxiproxy_proxy_received_bytes_total", "upstream")] == 4 and got[("toxiproxy_proxy_sent_bytes_total", "downstream")] == 4
    ), got


def _counted(api: str, want: int) -> dict[tuple[str, str | None], float] | None:
    """Toxiproxy's byte counters of proxy "s3" by (metric, direction), once both directions reached `want`."""
    with urllib.request.urlopen(f"{api}/metrics", timeout=5) as r:
        text = r.read().decode()
    got = {(name, dict(labels).get("direction")): v for (name, labels), v in samples(text).items() if dict(labels).get("proxy") == "s3"}
    received = got.get(("toxiproxy_proxy_received_bytes_total", "upstream"), 0)
    sent = got.get(("toxiproxy_proxy_sent_bytes_total", "downstream"), 0)
    return got if received >= want and sent >= want else None


def test_run_exporter_serves_locust_stats_verdict_and_latency_histogram(tmp_path: Path) -> None:
    load = tmp_path / "load"
    load.mkdir()
    registry = CollectorRegistry()
    registry.register(RunExporter(tmp_path))
    assert generate_latest(registry) == b""  # nothing before the run wrote anything
    header = "Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,95%,99%,Total Request Count,Total Failure Count\n"
    (load / "locust_stats_history.csv").write_text(
        header + "1,3,,Aggregated,2.0,0.0,N/A,N/A,N/A,4,0\n" + "2,3,,Aggregated,5.5,0.5,12,40,80,11,1\n"
    )
    (load / "verdict.json").write_text(json.dumps({"valid": "unknown", "lost_acknowledged": 0, "duplicated": 2}))
    write_latency_histogram(load, [(10.0, 9.0, 3), (20.0, 5.0, 1)])  # 1 s x3, 15 s x1
    got = samples(generate_latest(registry).decode())
    assert got[("locust_requests_total", ())] == 11 and got[("locust_failures_total", ())] == 1
    assert got[("locust_response_time_seconds", (("quantile", "0.95"),))] == 0.04
    assert [got[("statebed_run_verdict", (("verdict", v),))] for v in ("valid", "invalid", "unknown")] == [0, 0, 1]
    assert got[("statebed_load_duplicated_records", ())] == 2
    h = "statebed_load_ingest_to_commit_seconds"
    assert got[(f"{h}_bucket", (("le", "1.0"),))] == 3 and got[(f"{h}_bucket", (("le", "10.0"),))] == 3
    assert got[(f"{h}_bucket", (("le", "30.0"),))] == 4 and got[(f"{h}_count", ())] == 4 and got[(f"{h}_sum", ())] == 18


def test_targets_are_discovered_from_what_the_run_publishes(tmp_path: Path) -> None:
    (tmp_path / "faulted").mkdir()
    (tmp_path / "faulted" / "driver-metrics.json").write_text('{"url": "http://127.0.0.1:4001/metrics"}')
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "ingest.ready.json").write_text('{"pid": 1, "url": "http://127.0.0.1:4002"}')
    (tmp_path / "infra" / "proxy").mkdir(parents=True)
    (tmp_path / "infra" / "proxy" / "toxiproxy.log").write_text(
        '{"level":"info","version":"2.12.0","caller":"server.go:78","message":"Starting Toxiproxy"}\n'
        '{"level":"info","address":"127.0.0.1:4003","caller":"api.go:57","time":"2026-11-28T06:09:49Z","message":"Starting Toxiproxy HTTP server"}\n'
    )
    assert discover(tmp_path) == {
        "driver": {"127.0.0.1:4001": "faulted"},
        "ingest": {"127.0.0.1:4002": ""},
        "proxy": {"127.0.0.1:4003": ""},
        "load": {},
    }
    assert "file_sd_configs" in render_config(tmp_path / "targets")


def test_prometheus_refuses_a_directory_the_run_has_not_claimed(tmp_path: Path) -> None:
    (tmp_path / "other").write_text("someone else's")
    with pytest.raises(UsageError, match="not an empty directory"), prometheus_for_run(tmp_path):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]


@pytest.mark.parametrize("command", [["load", "run"], ["chaos", "run", "examples/experiments/kill-executor-count-v2.yaml"]])
def test_missing_prometheus_is_one_line_naming_the_package_before_anything_starts(tmp_path: Path, command: list[str]) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # the venv's tools, no /usr/bin/prometheus
    out = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-m", "statebed_cli.main", *command, "--prometheus", "--out", str(out)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Debian package `prometheus`" in p.stderr, p.stderr
    assert not out.exists()


def test_a_bad_metrics_port_from_the_environment_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """What `chaos run --prometheus` sets for its drivers (STATEBED_METRICS_PORT) is checked like the flag."""
    env = {**os.environ, "STATEBED_METRICS_PORT": "port"}
    p = subprocess.run(
        [sys.executable, "-m", "statebed_cli.main", "run", "--run-dir", str(tmp_path / "r")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert p.returncode == 2 and "STATEBED_METRICS_PORT='port'" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "r").exists()
