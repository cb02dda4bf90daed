"""`statebed chaos run --prometheus`: one real small experiment on S3 with a storage fault; its
Prometheus scraped both drivers (baseline and faulted, asked for /metrics by the command), the
proxy and the verdict, and was stopped by PID at the end."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_helpers import assert_no_process_left

from statebed_base.processes import ProcessIdentity
from statebed_load.prometheus import query, serve_tsdb

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"batches": 6, "rows_per_batch": 300, "keyspace": 40, "partitions": 2, "seed": 5}


@pytest.mark.e2e
def test_chaos_run_with_prometheus_scrapes_both_drivers_the_proxy_and_the_verdict(tmp_path: Path) -> None:
    exp = tmp_path / "exp.yaml"
    fault = {"kind": "storage-latency", "at": {"batch": 1}, "for_s": 3, "params": {"latency": 100}}
    exp.write_text(json.dumps({"name": "prom", **SMALL, "storage": "s3", "faults": [fault]}))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "statebed_cli.main", "chaos", "run", str(exp), "--prometheus", "--out", str(out), "--json", "--no-report"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    end = time.time()
    assert p.returncode == 0, p.stderr[-3000:]
    assert ProcessIdentity.from_json(json.loads((out / "prometheus" / "process.json").read_text())).alive() is False
    assert_no_process_left(out)
    with serve_tsdb(out) as prom:
        committed = query(prom.url, 'last_over_time(statebed_job_batches_total{status="committed"}[1h])', at=end)
        assert {s["metric"]["part"] for s in committed} == {"baseline", "faulted"}
        assert all(float(s["value"][1]) >= 1 for s in committed)
        verdict = query(prom.url, "last_over_time(statebed_run_verdict[1h]) == 1", at=end)
        assert [s["metric"]["verdict"] for s in verdict] == ["valid"]
        active = query(prom.url, "max_over_time(statebed_faults_active[1h])", at=end)
        assert [(s["metric"]["kind"], s["metric"]["part"]) for s in active] == [("storage-latency", "faulted")]
        acts = query(prom.url, 'last_over_time(statebed_proxy_toxic_acts_total{type="latency"}[1h])', at=end)
        assert acts and all(float(s["value"][1]) >= 1 for s in acts)
