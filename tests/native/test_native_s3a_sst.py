"""The plug-in's SST point on S3A: `statebed run` of Spark's own store (native-v2) with its
checkpoint in MinIO, `native.sst.upload` armed before the job starts. The S3A twin of the
local FileSystem (statebed.FailpointS3AFileSystem, the plug-in's S3A jar) delays a copy of an
SST into the bucket and records it; the run still verifies (a delay changes nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from s3server import ACCESS_KEY, SECRET_KEY, S3Server

from statebed_model.experimentdir import control_file
from statebed_store.failpoint_control import Control

pytestmark = [pytest.mark.slow, pytest.mark.s3]


def test_an_sst_copy_into_the_bucket_passes_the_s3a_twin(s3_server: S3Server, tmp_path: Path) -> None:
    run = tmp_path / "run"
    control = Control(control_file(run))
    control.arm("native.sst.upload=1*delay(1)")
    env = {
        **os.environ,
        "STATEBED_S3_ENDPOINT": s3_server.endpoint,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    }
    argv = [
        sys.executable, "-m", "statebed_cli.main", "run", "--format", "native-v2", "--run-dir", str(run),
        "--checkpoint", f"s3://statebed-test/sst-{uuid.uuid4().hex[:8]}", "--batches", "4", "--snapshot-interval", "2",
        "--rows-per-batch", "2000", "--keyspace", "500", "--json", "--no-report",
    ]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["mode"] == "native-v2" and summary["verdicts"]["state"]["valid"] is True
    fired = [r for r in control.firings() if r["failpoint"] == "native.sst.upload"]
    assert fired and fired[0]["action"] == "delay(1)", control.firings()
    assert fired[0]["file"].startswith("s3a://statebed-test/") and "/SSTs/" in fired[0]["file"] and fired[0]["file"].endswith(".sst")
    assert not (run / "spark-checkpoint").exists()  # Spark's checkpoint was in the bucket
