"""The seed appendix's queries on Spark's own store, V1 and V2 (issue 28 #2, #3), on real Spark.

One module fixture runs bucket-collect (a `rand()` bucket + `collect_list`) and sample3 (a
transformWithStateInPandas ListState reservoir) in native-v1 and native-v2, each a real
`statebed run` (its own driver JVM); the tests judge those runs. Fault-free, each must be
valid by the invariants statebed's own runs are judged by, and statebed's reader must serve
exactly what Spark's state data source reads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from statebed_model.native_state import read_reader_check, write_reader_check
from statebed_model.rundir import RunDir
from statebed_verify.state import verify_state

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

RUNS = [(w, m) for w in ("bucket-collect", "sample3") for m in ("native-v1", "native-v2")]
SMALL = ["--batches", "4", "--rows-per-batch", "1500", "--keyspace", "150", "--partitions", "2", "--snapshot-interval", "2"]


def statebed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "statebed_cli.main", *args], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[Path, dict[str, Any]]]:
    out = {}
    for workload, format in RUNS:
        run_dir = tmp_path_factory.mktemp("native") / f"{workload}-{format}"
        proc = statebed("run", "--run-dir", str(run_dir), "--workload", workload, "--format", format, *SMALL, "--no-report", "--json")
        # native-v1 has no checkpoint ids: its lineage is "unknown" (exit 3), as for statebed's V1
        assert proc.returncode == (3 if format == "native-v1" else 0), proc.stderr[-3000:]
        out[(workload, format)] = (run_dir, json.loads(proc.stdout))
    return out


@pytest.mark.parametrize(("workload", "format"), RUNS)
def test_native_run_is_judged_valid(runs: dict[tuple[str, str], tuple[Path, dict[str, Any]]], workload: str, format: str) -> None:
    run_dir, summary = runs[(workload, format)]
    assert summary["mode"] == format and summary["batches"] == 4 and summary["records"] == 6000
    report = verify_state(run_dir)
    assert report.valid is True, report.to_json()
    assert report.checked["records"] == 6000 and report.checked["state_entries"] > 0
    assert summary["verdicts"]["state"]["valid"] is True
    names = [f.name for f in (run_dir / "spark-checkpoint" / "state" / "0" / "0").iterdir() if f.suffix == ".changelog"]
    v2_names = [n for n in names if re.fullmatch(r"\d+_[0-9a-f-]{36}\.changelog", n)]
    assert names and v2_names == (names if format == "native-v2" else [])  # V1: `<v>.changelog`, V2: `<v>_<uuid>.changelog`
    commit = (run_dir / "spark-checkpoint" / "commits" / "3").read_text()
    assert ("stateUniqueIds" in commit) == (format == "native-v2")  # V1 commits name no checkpoint ids


@pytest.mark.parametrize(("workload", "format"), RUNS)
def test_statebed_reader_equals_spark_statestore_reader(
    runs: dict[tuple[str, str], tuple[Path, dict[str, Any]]], workload: str, format: str
) -> None:
    run_dir, _ = runs[(workload, format)]
    check = read_reader_check(RunDir(run_dir))
    assert check is not None and check.error is None, check
    assert check.batch == 3 and check.agree is True and check.entries["statebed"] == check.entries["spark"] > 0, check


def test_a_reader_disagreement_makes_the_run_invalid(runs: dict[tuple[str, str], tuple[Path, dict[str, Any]]], tmp_path: Path) -> None:
    """Positive control of the comparison's verdict: the same run, with the readers recorded apart."""
    run = RunDir(runs[("bucket-collect", "native-v2")][0])
    check = read_reader_check(run)
    assert check is not None
    try:
        write_reader_check(run, replace(check, agree=False, only_spark=["00"]))
        report = verify_state(run)
        assert report.valid is False and [a.kind for a in report.anomalies] == ["reader-disagreement"]
    finally:
        write_reader_check(run, check)
    assert verify_state(run).valid is True


EXAMPLE = Path(__file__).parents[2] / "examples" / "experiments" / "restart-driver-bucket-collect-native-v1.yaml"


@pytest.mark.e2e
def test_a_native_v1_experiment_runs_with_its_process_fault(tmp_path: Path) -> None:
    """The example experiment (format native-v1): the driver killed at batch 2's trigger fires,
    the resumed run finishes, and the run is judged (state valid, readers agree, baseline equal)."""
    out = tmp_path / "out"
    proc = statebed("chaos", "run", str(EXAMPLE), "--out", str(out), "--json")
    doc = json.loads(proc.stdout)
    assert doc["faults"][0]["fired"] is True, doc["faults"]
    assert doc["checks"]["state"]["valid"] is True and doc["baseline_equal"] is True, doc
    assert doc["valid"] in (True, "unknown") and proc.returncode in (0, 3), proc.stderr[-2000:]  # V1 lineage: unknown
    info = json.loads((out / "faulted" / "run.json").read_text())
    assert info["mode"] == "native-v1"
    check = read_reader_check(RunDir(out / "faulted"))
    assert check is not None and check.agree is True, check
