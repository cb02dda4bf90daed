"""The metrics the dashboard needs that no component served before: the proxy's /metrics, the
run exporter (Locust's stats, the verdict, the ingest->commit histogram), and --prometheus's
refusals (a missing server, a directory a run did not claim)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from proxy_helpers import connect, echo_server, proxy_api, recv_all
from statebed_base.errors import UsageError

from statebed_load.prometheus import RunExporter, discover, prometheus_for_run, render_config, write_latency_histogram

ROOT = Path(__file__).resolve().parents[2]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_proxy_serves_toxics_and_their_acts_as_prometheus_metrics(tmp_path: Path) -> None:
    with echo_server() as upstream, proxy_api(tmp_path / "record.jsonl") as (server, client):
        proxy = client.create(upstream=upstream, name="s3", listen="127.0.0.1:0")
        proxy.add_toxic(type="latency", stream="downstream", attributes={"latency": 10})
        with connect(proxy.listen) as s:
            s.sendall(b"ping")
            s.shutdown(1)
            assert recv_all(s) == b"ping"
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as r:
            got = samples(r.read().decode())
    labels = (("proxy", "s3"), ("stream", "downstream"), ("type", "latency"))
    assert got[("statebed_proxy_toxics", labels)] == 1
    assert got[("statebed_proxy_toxic_acts_total", labels)] >= 1


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
    (tmp_path / "infra" / "proxy" / "proxy.log").write_text("statebed proxy: API on http://127.0.0.1:4003, record x\n")
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
