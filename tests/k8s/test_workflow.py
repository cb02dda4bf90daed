"""The nightly workflow: valid against the GitHub workflow schema (check-jsonschema's vendored
copy), on the Kubernetes versions the chart tests validate against, and its pass/fail gate
judged on matrix summaries."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from k8s_render import K8S_VERSIONS, ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
DOC = yaml.safe_load(WORKFLOW.read_text())
JOB = DOC["jobs"]["kind"]


def _step(name_start: str) -> dict[str, object]:
    (step,) = [s for s in JOB["steps"] if str(s.get("name", "")).startswith(name_start)]
    return step


def test_validates_against_the_github_workflow_schema() -> None:
    checker = Path(sys.executable).with_name("check-jsonschema")
    out = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows", WORKFLOW], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_scheduled_and_manual_with_a_60_minute_budget() -> None:
    triggers = DOC[True] if True in DOC else DOC["on"]  # YAML 1.1 reads the key `on` as True
    assert triggers["schedule"] and "workflow_dispatch" in triggers
    assert JOB["timeout-minutes"] == 60


def test_kind_matrix_is_the_versions_the_charts_are_validated_for() -> None:
    include = JOB["strategy"]["matrix"]["include"]
    assert [i["k8s"] for i in include] == [v.rsplit(".", 1)[0] for v in K8S_VERSIONS]
    for i in include:
        assert re.fullmatch(rf"kindest/node:v{re.escape(i['k8s'])}\.\d+@sha256:[0-9a-f]{{64}}", i["node_image"]), i


def test_image_loaded_into_kind_then_skaffold_deploy_verify_and_the_chaos_matrix_on_k8s() -> None:
    run = "\n".join(str(s.get("run", "")) for s in JOB["steps"])
    order = [
        "make k8s-check",
        "skaffold build -p kind",
        "kind load docker-image",
        "skaffold deploy -p kind",
        "skaffold verify -p kind",
        "/swarm",
        "--backend k8s",
    ]
    positions = [run.index(x) for x in order]
    assert positions == sorted(positions), order


def test_artifacts_are_collected_and_uploaded_even_on_failure() -> None:
    for name in ("Collect run directories", "Upload artifacts"):
        assert _step(name)["if"] == "always()", name
    assert "actions/upload-artifact@" in str(_step("Upload artifacts")["uses"])
    assert "/tmp/statebed-runs" in str(_step("Collect run directories")["run"])  # the chart's runs hostPath on the kind node
    assert "--keep" in str(_step("Chaos matrix")["run"])  # every cell's directory (and report.html) kept


def _gate(tmp_path: Path, runs: list[dict[str, object]], v1_caught: bool) -> int:
    script = str(_step("Gate")["run"]).split("<<'PY'\n", 1)[1].rsplit("PY", 1)[0]
    summary = {"cells": len(runs), "valid": 0, "invalid": 0, "unknown": 0, "v1_caught": v1_caught}
    (tmp_path / "matrix.json").write_text(json.dumps({"runs": runs, "summary": summary}))
    return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True).returncode


@pytest.mark.parametrize(
    ("v2", "v1_caught", "passes"),
    [(True, True, True), (False, True, False), ("unknown", True, True), (True, False, False)],
)
def test_gate_fails_on_an_invalid_v2_verdict_or_an_uncaught_v1_control(tmp_path: Path, v2: object, v1_caught: bool, passes: bool) -> None:
    runs = [
        {"fault": "zombie-upload", "workload": "sample3", "format": "v1", "seed": 1, "valid": not v1_caught, "run_dir": "a"},
        {"fault": "kill-executor", "workload": "sample3", "format": "v2", "seed": 1, "valid": v2, "run_dir": "b"},
    ]
    assert (_gate(tmp_path, runs, v1_caught) == 0) is passes


def test_image_smoke_runs_nightly_in_its_own_job_and_uploads_its_run() -> None:
    job = DOC["jobs"]["image-smoke"]
    assert job["timeout-minutes"] == 60
    runs = [str(s.get("run", "")) for s in job["steps"]]
    assert any("make image-smoke" in r for r in runs) and any("debootstrap" in r and "podman" in r for r in runs)
    (upload,) = [s for s in job["steps"] if "upload-artifact" in str(s.get("uses", ""))]
    assert upload["if"] == "always()"
