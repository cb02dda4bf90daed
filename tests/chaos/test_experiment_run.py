"""Experiments on real Spark: a fault-free run is valid and equal to its baseline; a fault that
cannot fire makes the run unknown (exit 3); a real fault fires with proof and V2 stays valid;
a timeout or Ctrl-C leaves no process of the run alive."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from process_helpers import assert_no_process_left, interrupt_when
from shared_runs import SharedRun

from statebed_chaos.experiment import parse_experiment
from statebed_chaos.experiment_runner import run_experiment
from statebed_chaos.matrix_presets import PRESETS, plan_cells

pytestmark = pytest.mark.slow

SMALL = {"batches": 3, "rows_per_batch": 300, "keyspace": 40, "partitions": 2, "seed": 5}
QUICK_SIZES = ("batches", "rows_per_batch", "keyspace", "partitions", "workers", "cluster", "format", "snapshot_interval")


def _write(tmp_path: Path, doc: dict[str, object]) -> Path:
    f = tmp_path / "exp.yaml"
    f.write_text(json.dumps(doc))  # JSON is YAML
    return f


def _chaos(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statebed_cli.main", "chaos", "run", *args], capture_output=True, text=True, timeout=timeout
    )


def test_fault_free_experiment_is_valid_and_equals_baseline(tmp_path: Path, quick_matrix: SharedRun, baselines_dir: Path) -> None:
    """The quick matrix's restart-driver cell without its fault: the same baseline key, so the
    session's baselines cache gives the matrix's baseline and no second one runs."""
    cell = next(c for c in plan_cells(PRESETS["quick"], 1)[0] if c.fault == "restart-driver")
    described = cell.experiment.to_json()  # as an experiment file spells it (the format by name)
    exp = {"name": "nofault", "workload": cell.workload, "seed": cell.seed, **{k: described[k] for k in QUICK_SIZES}}
    out = tmp_path / "out"
    proc = _chaos(str(_write(tmp_path, exp)), "--out", str(out), "--json", "--baselines", str(baselines_dir))
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["valid"] is True and doc["baseline_equal"] is True and doc["faults_scheduled"] == 0
    assert {"lineage", "state", "attempts", "baseline"} <= doc["checks"].keys()
    assert "baseline: cached" in proc.stderr and Path(doc["checks"]["baseline"]["run_dir"]).is_relative_to(baselines_dir)
    assert json.loads((out / "verdict.json").read_text())["valid"] is True
    ops = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert sum(1 for o in ops if o["type"] == "batch" and o["outcome"] == "ok") == cell.experiment.batches
    assert sum(1 for o in ops if o["type"] == "task-attempt") >= cell.experiment.batches * cell.experiment.partitions
    assert f"seed: {cell.seed}" in (out / "experiment.yaml").read_text()
    assert_no_process_left(out)


def test_fault_that_cannot_fire_is_unknown(tmp_path: Path) -> None:
    doc = {"name": "never", **SMALL, "verifiers": ["lineage", "state"], "faults": [{"kind": "fail-changelog-upload", "at": {"batch": 50}}]}
    out = tmp_path / "out"
    proc = _chaos(str(_write(tmp_path, doc)), "--out", str(out), "--json")
    assert proc.returncode == 3, proc.stderr[-2000:]
    res = json.loads(proc.stdout)
    assert res["valid"] == "unknown" and res["faults_fired"] == 0 and res["faults_scheduled"] == 1
    assert res["faults"][0]["fired"] is not True
    assert any("f1" in r and "did not provably fire" in r for r in res["reasons"])


@pytest.mark.e2e
def test_fail_changelog_upload_fires_and_v2_stays_valid(tmp_path: Path) -> None:
    """Standalone: local[2] gives a task one try, so the injected failure would abort the query."""
    exp = parse_experiment(
        {
            "name": "fcu",
            **SMALL,
            "cluster": "standalone",
            "faults": [{"kind": "fail-changelog-upload", "at": {"batch": 1}, "params": {"when": "after"}}],
        }
    )
    res = run_experiment(exp, out_dir=tmp_path / "out", progress=False)
    assert res.faults[0]["fired"] is True and res.faults[0]["proof"], res.faults
    assert (res.valid, res.exit_code, res.baseline_equal) == (True, 0, True), (res.reasons, res.anomalies)
    assert res.checks["attempts"]["valid"] is True  # the failed attempt's changelog is an orphan, attributed


def test_timeout_stops_every_process(tmp_path: Path) -> None:
    """A run that cannot end before its timeout (a state task of batch 1 held for an hour), not one
    assumed to be slow: 40 batches outran the 20 s on a quiet machine (seen on a clean clone)."""
    hold = {"kind": "slow-attempt", "at": {"batch": 1}, "params": {"ms": 3_600_000, "when": "before"}}
    exp = parse_experiment({"name": "slow", **SMALL, "verifiers": ["lineage", "state"], "timeout_s": 20, "faults": [hold]})
    res = run_experiment(exp, out_dir=tmp_path / "out", progress=False)
    assert res.valid == "unknown" and res.exit_code == 3
    assert any("timeout_s=20" in r for r in res.reasons)
    assert_no_process_left(tmp_path / "out")


def test_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    out = tmp_path / "out"
    f = _write(tmp_path, {"name": "interrupt", **SMALL, "batches": 40, "verifiers": ["lineage", "state"]})
    proc = subprocess.Popen(
        [sys.executable, "-m", "statebed_cli.main", "chaos", "run", str(f), "--out", str(out)], stderr=subprocess.PIPE, text=True
    )
    err = interrupt_when(proc, lambda: (out / "faulted" / "spark-checkpoint" / "offsets" / "1").exists(), signal.SIGINT)
    assert proc.returncode == 130, err[-2000:]
    assert_no_process_left(out)


def _s3_latency(tmp_path: Path, name: str, fault: dict[str, Any] | None = None, **doc: Any) -> tuple[dict[str, Any], Path]:
    """A small run on S3 (MinIO behind Toxiproxy) with a 300 ms latency toxic (or `fault`) during batch 1: valid, the fault fired."""
    fault = fault or {"kind": "storage-latency", "at": {"batch": 1}, "for_s": 5, "params": {"latency": 300}}
    exp = {"name": name, **SMALL, "storage": "s3", **doc, "faults": [fault]}
    out = tmp_path / "out"
    proc = _chaos(str(_write(tmp_path, exp)), "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["valid"] is True and res["faults_fired"] == 1, res
    return res, out


def test_storage_latency_through_the_proxy_fires_and_v2_on_s3_stays_valid(tmp_path: Path) -> None:
    """End to end with `storage: s3`: MinIO behind Toxiproxy, the job's store writing through it,
    a latency toxic during batch 1; every process (S3 server and proxy too) stopped."""
    res, out = _s3_latency(tmp_path, "s3-latency", verifiers=["lineage", "state", "attempts"])
    assert res["faults"][0]["fired"] is True and res["faults"][0]["proof"], res["faults"]
    assert_no_process_left(out)


def test_storage_latency_on_sparks_own_store_over_s3a_fires_and_native_v2_stays_valid(tmp_path: Path) -> None:
    """Spark's own store with its checkpoint in the bucket (S3A, the installer's jars), MinIO behind
    Toxiproxy, a latency toxic during batch 1: the proof is Spark's own checkpoint writes, as the
    JVM plug-in logged S3A's requests (level `sdk`), slowed inside the window; both verifiers read
    the checkpoint on S3. Every request in the window counts (a HEAD of the source's log slowed by
    the toxic is as much its effect as a write), but a PUT of Spark's checkpoint must be among them."""
    res, out = _s3_latency(tmp_path, "s3a-latency", workload="count", format="native-v2", verifiers=["lineage", "state"])
    proof = res["faults"][0]["proof"]
    assert proof and all(p["file"].startswith("s3a://statebed/") and p["level"] == "sdk" for p in proof), proof
    assert any(p["op"] == "s3:PutObject" for p in proof), proof
    assert not (out / "faulted" / "spark-checkpoint").exists()  # Spark's checkpoint is in the bucket, not here
    assert_no_process_left(out)


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["storage-outage", "storage-reset"])
def test_an_outage_or_reset_on_sparks_own_store_over_s3a_fires_on_its_s3_requests(tmp_path: Path, kind: str) -> None:
    """Spark's S3A requests as its SDK client made them (jvm/src-s3a S3RequestInterceptor): a HEAD
    held by the outage, or retried by the SDK under the resets, inside the window. The checkpoint
    file manager's own lines missed both (its check left no line; the SDK's retries looked like one
    success), so these faults were `unknown` on S3A until this evidence."""
    fault = {"kind": kind, "at": {"batch": 1}, "for_s": 3}
    res, out = _s3_latency(tmp_path, f"s3a-{kind}", fault, workload="count", format="native-v2", verifiers=["lineage", "state"])
    proof = res["faults"][0]["proof"]
    assert proof and all(p["level"] == "sdk" and p["op"].startswith("s3:") for p in proof), proof
    assert all(p["retries"] > 0 or kind == "storage-outage" for p in proof), proof
    assert_no_process_left(out)
