"""statebed's own store with its checkpoint in a bucket (MinIO behind Toxiproxy): the seed's
zombie upload is caught on V1 and V2 stays valid, as on local disk (examples/experiments/
zombie-upload-sample3-v{1,2}-s3.yaml). make e2e: `make test` proves the zombie on local disk
(the quick matrix) and the S3 path with a storage fault."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from statebed_chaos.experiment import load_experiment
from statebed_chaos.experiment_runner import run_experiment

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "experiments"


def _run(tmp_path: Path, format: str) -> Any:
    exp = load_experiment(EXAMPLES / f"zombie-upload-sample3-{format}-s3.yaml")
    assert exp.storage == "s3"
    exp = replace(exp, verifiers=tuple(v for v in exp.verifiers if v != "baseline"))  # the other verifiers judge it
    res = run_experiment(exp, out_dir=tmp_path / format, progress=False)
    (fault,) = res.faults
    assert fault["fired"] is True, fault
    return res


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.s3
def test_the_v1_zombie_in_a_bucket_is_caught(tmp_path: Path) -> None:
    res = _run(tmp_path, "v1")
    assert (res.valid, res.exit_code) == (False, 1), res.reasons
    assert any(a["kind"] == "output-mismatch" for a in res.anomalies), res.anomalies


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.s3
def test_its_v2_twin_in_a_bucket_stays_valid(tmp_path: Path) -> None:
    res = _run(tmp_path, "v2")
    assert (res.valid, res.exit_code) == (True, 0), (res.reasons, res.anomalies)
