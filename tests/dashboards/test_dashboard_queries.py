"""The dashboard proven on data: one real short load run with a fault (`statebed load run
--experiment ... --prometheus`: MinIO behind the proxy, a latency toxic in the middle), then
every PromQL expression of the shipped dashboard JSON evaluated against that run's real
Prometheus (its TSDB served again from the run directory). One run, shared by every test."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from process_helpers import assert_no_process_left

from statebed_base.processes import ProcessIdentity
from statebed_load.prometheus import query, query_range, serve_tsdb
from statebed_verify.history import read_history

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "charts" / "statebed" / "dashboards" / "statebed.json"
FAULT = "storage-latency"
# What Grafana puts for $__rate_interval with a datasource at its default 15 s scrape interval
# (max(4 x scrape interval, $__interval + scrape interval)).
RATE_INTERVAL = "1m"


@dataclass
class Run:
    out: Path
    result: dict[str, Any]
    url: str
    start: float
    end: float
    prometheus: ProcessIdentity


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("dashboards")
    experiment = tmp / "experiment.yaml"
    experiment.write_text(
        yaml.safe_dump(
            {
                "name": "dashboard-s3-latency",
                "storage": "s3",
                "partitions": 2,
                "faults": [{"kind": FAULT, "at": {"batch": 1}, "for_s": 5, "params": {"latency": 200}}],
            }
        )
    )
    out = tmp / "run"
    cmd = [sys.executable, "-m", "statebed_cli.main", "load", "run", "--experiment", str(experiment), "--prometheus", "--out", str(out)]
    cmd += ["--users", "3", "--spawn-rate", "3", "--duration", "12", "--seed", "8", "--trigger-ms", "500", "--json"]
    start = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    end = time.time()
    assert p.returncode == 0, p.stderr[-3000:]
    ident = ProcessIdentity.from_json(json.loads((out / "prometheus" / "process.json").read_text()))
    with serve_tsdb(out) as prom:
        yield Run(out, json.loads(p.stdout), prom.url, start, end, ident)
    assert prom.process.ident is not None and not prom.process.ident.alive()  # the replay server is gone too


def targets() -> list[tuple[str, str, str]]:
    """(panel title, expression, legend) of every query in the dashboard, annotations included."""
    dash = json.loads(DASHBOARD.read_text())
    out = [(panel["title"], t["expr"], t.get("legendFormat", "")) for panel in dash["panels"] for t in panel["targets"]]
    out += [(f"annotation {a['name']}", a["expr"], a.get("titleFormat", "")) for a in dash["annotations"]["list"] if "expr" in a]
    return out


def grafana(expr: str, run: Run) -> str:
    """The expression as Grafana sends it with the variables set to this run."""
    return expr.replace("$namespace", "local").replace("$run", re.escape(run.out.name)).replace("$__rate_interval", RATE_INTERVAL)


def test_the_run_was_valid_and_its_fault_fired(run: Run) -> None:
    assert run.result["valid"] is True and run.result["acknowledged"] > 0, run.result
    faults = [op for op in read_history(run.out / "history.jsonl") if op.type == "fault"]
    assert {(op.fields["phase"], op.outcome) for op in faults} >= {("inject", "ok"), ("heal", "ok")}


def test_every_dashboard_query_returns_series_with_its_labels(run: Run) -> None:
    table = []
    for title, expr, legend in targets():
        # one step past the end: the judged series have a single sample, from the last scrape, which can
        # fall between the last whole step and the end (nothing is scraped after the end: Prometheus stopped)
        got = query_range(run.url, grafana(expr, run), run.start, run.end + 1.0, step=1.0)
        assert got, f"{title}: {expr} returned nothing"
        wanted = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        for series in got:
            assert wanted <= set(series["metric"]), (title, expr, series["metric"])
            if "run" in series["metric"]:
                assert series["metric"]["run"] == run.out.name
        last = {json.dumps(s["metric"], sort_keys=True): s["values"][-1][1] for s in got}
        table.append({"panel": title, "query": expr, "values": last})
    (run.out / "dashboard-values.json").write_text(json.dumps(table, indent=1) + "\n")
    print(json.dumps(table, indent=1))


def test_template_variables_find_the_run(run: Run) -> None:
    """label_values(statebed_job_batches_total, namespace) and (..., run) as Grafana asks them."""
    got = query(run.url, "count by (namespace, run) (last_over_time(statebed_job_batches_total[1h]))", at=run.end)
    assert {(s["metric"]["namespace"], s["metric"]["run"]) for s in got} == {("local", run.out.name)}


def test_the_fault_window_shows_in_statebed_faults_active(run: Run) -> None:
    ops = {op.fields["phase"]: op for op in read_history(run.out / "history.jsonl") if op.type == "fault"}
    raw = query(run.url, f'statebed_faults_active{{run="{run.out.name}"}}[1h]', at=run.end)
    assert [s["metric"]["kind"] for s in raw] == [FAULT]
    active = [float(t) for t, v in raw[0]["values"] if float(v) >= 1]
    assert active, raw
    # a sample is stamped with its scrape's start; the control file is read during the scrape (< 1 s later)
    assert ops["inject"].start - 1.0 <= min(active) and max(active) <= ops["heal"].end
    driver = query(run.url, f'statebed_job_batches_total{{run="{run.out.name}", status="committed"}}[1h]', at=run.end)
    seen = [float(t) for s in driver for t, _ in s["values"]]
    # a window inside the run, not the whole run: it ends before the driver's last scrape. Its start may
    # share the driver's first scrape (a loaded machine scrapes the driver first after the inject).
    assert run.start <= min(active) and min(seen) <= min(active) and max(active) < max(seen)
    # the driver's scrape after the heal no longer had the series: Prometheus marked it stale
    assert query(run.url, f'statebed_faults_active{{run="{run.out.name}"}}', at=max(seen)) == []


def test_prometheus_was_stopped_and_the_run_left_no_process(run: Run) -> None:
    assert run.prometheus.pinned and not run.prometheus.alive()
    assert_no_process_left(run.out, at_least=3)
    assert (run.out / "prometheus" / "data").is_dir() and (run.out / "prometheus" / "prometheus.yml").is_file()
