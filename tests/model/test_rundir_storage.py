"""The run directory on `Storage`: the same contract on a local directory and on S3, and a
run directory on S3 judged by `statebed verify state s3://...` (a real MinIO server)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from checkpoint_helpers import run_cli
from conftest import s3_settings
from job_helpers import InProcessJob, records
from s3server import S3Server

from statebed_base.errors import UsageError
from statebed_job.config import JobOptions
from statebed_model.rundir import RunDir, RunInfo
from statebed_store import S3Settings
from statebed_verify import verify_run


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, S3Settings | None]:
    if request.param == "local":
        return str(tmp_path / "run"), None
    return f"s3://statebed-test/runs/{uuid.uuid4().hex}", s3_settings(request.getfixturevalue("s3_server"))


pytestmark = pytest.mark.usefixtures("providers_closed")  # conftest.py: drained and closed after each test


def test_the_run_directory_contract(location: tuple[str, S3Settings | None]) -> None:
    url, s3 = location
    run = RunDir(url, s3)
    with pytest.raises(UsageError, match="not a run directory"):
        run.read_info()
    info = RunInfo(workload="count", format="v2", partitions=2, checkpoint="checkpoint", source={"kind": "generated"})
    run.create(info)
    with pytest.raises(UsageError, match="already a run directory"):
        run.create(info)
    assert run.read_info() == info
    assert run.checkpoint_location(info) == f"{run.url}/checkpoint"
    t = records([1, 2], [3, 4])
    run.write_input(0, t)
    assert run.write_output(0, t) is True and run.write_output(0, records([9], [9])) is False  # create-only: a rerun never doubles
    assert run.read_output(0).equals(t) and run.has_output(0) and not run.has_output(1)
    run.stage_output(1, t)
    assert run.batches("input") == run.batches("output") == [0] and run.batches("staged") == [1]
    for rec in ({"batch": 1, "status": "committed"}, {"batch": 0, "status": "committed"}, {"batch": 1, "status": "re-emitted"}):
        run.append_timing(rec)
    assert [(r["batch"], r["status"]) for r in run.timings()] == [(0, "committed"), (1, "committed"), (1, "re-emitted")]
    doc = json.loads(run.storage.read("run.json"))
    run.storage.write("run.json", json.dumps({**doc, "mode": "native"}).encode())  # older runs' name of native V2
    assert run.read_info().format == "native"
    run.storage.write("run.json", json.dumps({**doc, "mode": "v9"}).encode())
    with pytest.raises(UsageError, match=r"run.json: mode: unknown format 'v9' \(known: v1, v2, native-v1, native-v2\)"):
        run.read_info()
    run.storage.write("run.json", b"{broken")
    with pytest.raises(UsageError, match="run.json: contents is not valid JSON"):
        run.read_info()


@pytest.mark.s3
def test_spark_s_own_files_stay_local(s3_server: S3Server, tmp_path: Path) -> None:
    run = RunDir("s3://statebed-test/runs/x", s3_settings(s3_server))
    with pytest.raises(UsageError, match="keeps Spark's own files locally"):
        _ = run.spark_checkpoint
    assert RunDir("s3://statebed-test/runs/x", s3_settings(s3_server), local=tmp_path).events == tmp_path / "events"


@pytest.mark.s3
def test_verify_state_on_an_s3_run_directory(s3_server: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose directory (and checkpoint) is on S3: valid; one output object deleted: invalid."""
    cfg = s3_settings(s3_server)
    url = f"s3://statebed-test/runs/{uuid.uuid4().hex}"
    job = InProcessJob(
        url, JobOptions(workload="bucket-collect", batches=3, partitions=2, rows_per_batch=200, keyspace=30), s3=cfg, local=tmp_path
    )
    for b in range(3):
        assert job.batch(b).status == "committed"
    assert job.storage.url == f"{url}/checkpoint" and not (tmp_path / "checkpoint").exists()
    s3_args = ["--s3-endpoint", cfg.endpoint, "--s3-access-key", cfg.access_key, "--s3-secret-key", cfg.secret_key]
    code, out, err = run_cli(capsys, "verify", "state", url, "--json", *s3_args)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["valid"] is True and doc["checked"]["batches"] == 3 and doc["checked"]["records"] == 600
    assert verify_run(url, cfg).valid is True  # lineage and state, both read from S3
    job.run.storage.delete([job.run.output_name(1)])
    code, out, _ = run_cli(capsys, "verify", "state", url, "--json", *s3_args)
    doc = json.loads(out)
    assert code == 1 and doc["valid"] is False
    assert {(a["kind"], tuple(a["batches"])) for a in doc["anomalies"]} >= {("missing-output", (1,))}
