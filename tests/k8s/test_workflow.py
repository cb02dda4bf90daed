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
    nodes = JOB["strategy"]["matrix"]["node"]
    assert [n["k8s"] for n in nodes] == [v.rsplit(".", 1)[0] for v in K8S_VERSIONS]
    for n in nodes:
        assert re.fullmatch(rf"kindest/node:v{re.escape(n['k8s'])}\.\d+@sha256:[0-9a-f]{{64}}", n["image"]), n


def test_image_built_once_loaded_into_kind_then_skaffold_deploy_verify_and_the_chaos_matrix_on_k8s() -> None:
    build = "\n".join(str(s.get("run", "")) for s in DOC["jobs"]["build"]["steps"])
    assert "skaffold build -p kind" in build and "docker save" in build
    assert JOB["needs"] == "build"
    run = "\n".join(str(s.get("run", "")) for s in JOB["steps"])
    order = [
        "make k8s-check",
        "docker load",
        "kind load docker-image",
        "skaffold deploy -p kind",
        "skaffold verify -p kind",
        "/swarm",
        "--backend k8s",
    ]
    positions = [run.index(x) for x in order]
    assert positions == sorted(positions), order


# Measured per-cell time of the full preset (docs/results.md "One run of the full preset, seed 1": 38 cells in
# 79 minutes on this 2-core machine, i.e. ~125 s a cell), the set-up before the first cell (kind
# cluster, image load, deploy with the driver Job's run, verify), and a margin for a slower runner.
CELL_SECONDS, SETUP_MINUTES, MARGIN = 125, 15, 1.5


def _matrix_args() -> list[str]:
    m = re.search(r"\|\| '([^']*)'", str(DOC["env"]["MATRIX_ARGS"]))  # the default when not dispatched by hand
    assert m, DOC["env"]["MATRIX_ARGS"]
    return m.group(1).split()


def _shard_cells(faults: str | None) -> list[object]:
    from statebed_chaos.matrix_presets import PRESETS, plan_cells

    args = _matrix_args()
    assert args[0] == "--full" and args[1:3] == ["--seeds", "1"], args
    opts = dict(zip(args[3::2], args[4::2], strict=True))
    selection = {"workloads": opts["--workloads"].split(","), "formats": opts["--formats"].split(",")}
    cells, _ = plan_cells(PRESETS["full"], 1, faults=None if faults is None else faults.split(","), **selection)
    return list(cells)


def test_every_shard_fits_its_budget_at_the_measured_cell_time() -> None:
    shards = JOB["strategy"]["matrix"]["shard"]
    for shard in shards:
        cells = len(_shard_cells(shard["faults"]))
        minutes = SETUP_MINUTES + MARGIN * cells * CELL_SECONDS / 60
        assert minutes <= JOB["timeout-minutes"], f"shard {shard['name']}: {cells} cells need ~{minutes:.0f} min"
    assert "--faults" in str(_step("Chaos matrix")["run"]) and "matrix.shard.faults" in str(_step("Chaos matrix")["env"])


def test_shards_cover_every_fault_of_the_selection_once() -> None:
    shards = [s["faults"].split(",") for s in JOB["strategy"]["matrix"]["shard"]]
    flat = [f for s in shards for f in s]
    assert len(flat) == len(set(flat))
    everything = _shard_cells(None)
    assert sorted(c.fault for c in everything) == sorted(c.fault for s in shards for c in _shard_cells(",".join(s)))  # type: ignore[attr-defined]


def test_artifacts_are_streamed_from_the_node_and_an_empty_collection_fails() -> None:
    """kind mounts a tmpfs on the node's /tmp (kind's provision.go: --tmpfs /tmp), which `docker cp`
    cannot read: the step streams a tar out with `docker exec` and fails when it collected nothing."""
    for name in ("Collect run directories", "Upload artifacts"):
        assert _step(name)["if"] == "always()", name
    assert "actions/upload-artifact@" in str(_step("Upload artifacts")["uses"])
    collect = str(_step("Collect run directories")["run"])
    assert not re.search(r"^\s*docker cp", collect, re.M)
    assert re.search(r'docker exec "\$CLUSTER-control-plane" tar -C /tmp -cf - statebed-runs \| tar -C artifacts -xf -', collect)
    assert "|| echo" not in collect and "set -euo pipefail" in collect
    assert "--keep" in str(_step("Chaos matrix")["run"])  # every cell's directory (and report.html) kept


@pytest.mark.parametrize("files", [0, 2])
def test_collect_step_fails_when_the_node_has_no_run_directory(tmp_path: Path, files: int) -> None:
    """The step's own script, with `docker` and `kubectl` stand-ins: a node whose /tmp/statebed-runs is
    empty makes the step fail; one with files passes."""
    node = tmp_path / "node" / "statebed-runs"
    node.mkdir(parents=True)
    for i in range(files):
        (node / f"f{i}").write_text("x")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f'#!/bin/bash\n[ "$1" = exec ] || exit 1\nexec tar -C {tmp_path / "node"} -cf - statebed-runs\n')
    (bin_dir / "kubectl").write_text("#!/bin/bash\nexit 1\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CLUSTER": "statebed"}
    out = subprocess.run(["bash", "-c", str(_step("Collect run directories")["run"])], cwd=work, env=env, capture_output=True, text=True)
    assert (out.returncode == 0) is (files > 0), out.stdout + out.stderr


def _gate(tmp_path: Path, shards: dict[str, list[dict[str, object]]], v1_caught: dict[str, bool]) -> int:
    (step,) = DOC["jobs"]["gate"]["steps"][1:]
    script = str(step["run"]).split("<<'PY'\n", 1)[1].rsplit("PY", 1)[0]
    for name, runs in shards.items():
        d = tmp_path / "shards" / f"nightly-k8s-{name}"
        d.mkdir(parents=True)
        summary = {"cells": len(runs), "v1_caught": v1_caught[name]}
        (d / "matrix.json").write_text(json.dumps({"runs": runs, "summary": summary}))
    return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True).returncode


@pytest.mark.parametrize(
    ("v2", "caught", "passes"),
    [(True, (True, False), True), (False, (True, False), False), ("unknown", (False, True), True), (True, (False, False), False)],
)
def test_gate_fails_on_an_invalid_v2_verdict_or_a_version_without_a_caught_v1_control(
    tmp_path: Path, v2: object, caught: tuple[bool, bool], passes: bool
) -> None:
    v1 = {"fault": "zombie-upload", "workload": "sample3", "format": "v1", "seed": 1, "valid": False, "run_dir": "a"}
    v2_run = {"fault": "kill-executor", "workload": "sample3", "format": "v2", "seed": 1, "valid": v2, "run_dir": "b"}
    shards = {"1.35-uploads": [v1], "1.35-processes": [v2_run]}
    assert (_gate(tmp_path, shards, dict(zip(shards, caught, strict=True))) == 0) is passes
    assert DOC["jobs"]["gate"]["needs"] == "kind" and DOC["jobs"]["gate"]["if"] == "always()"


def test_image_smoke_runs_nightly_in_its_own_job_and_uploads_its_run() -> None:
    job = DOC["jobs"]["image-smoke"]
    assert job["timeout-minutes"] == 60
    runs = [str(s.get("run", "")) for s in job["steps"]]
    assert any("make image-smoke" in r for r in runs) and any("debootstrap" in r and "podman" in r for r in runs)
    (upload,) = [s for s in job["steps"] if "upload-artifact" in str(s.get("uses", ""))]
    assert upload["if"] == "always()"


def test_native_cells_run_nightly_on_the_runner_and_count() -> None:
    """`--quick` holds no native cell (budget): the nightly runs the native V1 control and its V2
    twin, gated by --strict-native beside statebed's own control, and uploads them whatever happened."""
    job = DOC["jobs"]["native"]
    (run,) = [str(s["run"]) for s in job["steps"] if "chaos matrix" in str(s.get("run", ""))]
    args = run.split()
    formats = args[args.index("--formats") + 1].split(",")
    assert {"native-v1", "native-v2", "v1", "v2"} <= set(formats) and "--strict-native" in args
    assert "zombie-upload" in args[args.index("--faults") + 1].split(",")
    assert "sample3" in args[args.index("--workloads") + 1].split(",")
    assert any("openjdk-17-jdk-headless" in str(s.get("run", "")) for s in job["steps"])  # javac: the plug-in
    (upload,) = [s for s in job["steps"] if "upload-artifact" in str(s.get("uses", ""))]
    assert upload["if"] == "always()" and job["timeout-minutes"] <= 120


def test_the_e2e_tier_runs_nightly_within_one_3_hour_session() -> None:
    """`make e2e` (docs/testing.md): the tier `make test` leaves out, its passed tests uploaded whatever happened."""
    job = DOC["jobs"]["e2e"]
    runs = [str(s.get("run", "")) for s in job["steps"]]
    assert "make e2e" in runs and any("openjdk-17-jdk-headless" in r for r in runs)
    (upload,) = [s for s in job["steps"] if "upload-artifact" in str(s.get("uses", ""))]
    assert upload["if"] == "always()" and upload["with"]["path"] == "runs/e2e-state/" and job["timeout-minutes"] <= 180


# -- the whole catalogue on runners (`make chaos-nightly` split by fault kind) --------------------------------------------------

CATALOGUE = DOC["jobs"]["catalogue"]
CATALOGUE_REPORT = DOC["jobs"]["catalogue-report"]
# Measured here (docs/results.md "The whole catalogue"): the mean cell of `make chaos-nightly` on this
# 2-core machine was 55 s over its first 106 cells, baselines included; 70 s leaves room for a shard
# that runs every baseline of its own. The set-up of a cold runner (apt, venv, a MinIO built from
# source, the plug-in), and MARGIN for a slower runner.
CATALOGUE_CELL_SECONDS, CATALOGUE_SETUP_MINUTES = 70, 25


def _catalogue_step(job: dict[str, object], name_start: str) -> dict[str, object]:
    (step,) = [s for s in job["steps"] if str(s.get("name", "")).startswith(name_start)]  # type: ignore[attr-defined]
    return step  # type: ignore[no-any-return]


def _catalogue_cells(faults: list[str] | None) -> list[object]:
    from statebed_chaos.matrix_presets import PRESETS, plan_cells

    return list(plan_cells(PRESETS["full"], 2, faults=faults)[0])


def test_the_catalogue_shards_run_what_make_chaos_nightly_runs_each_fault_kind_once() -> None:
    from statebed_chaos.matrix_presets import FAULTS

    shards = [s["faults"].split(",") for s in CATALOGUE["strategy"]["matrix"]["shard"]]
    flat = [f for s in shards for f in s]
    assert len(flat) == len(set(flat)) and set(flat) == set(FAULTS)
    assert sum(len(_catalogue_cells(s)) for s in shards) == len(_catalogue_cells(None))
    nightly = (ROOT / "Makefile").read_text().split("\nchaos-nightly:", 1)[1].split("\n\n", 1)[0]
    run = str(_catalogue_step(CATALOGUE, "The shard's cells")["run"])
    for selection in ("--full --seeds 2", "--resume"):
        assert selection in nightly and selection in run, selection
    assert '--faults "$FAULTS"' in run and "matrix.shard.faults" in str(_catalogue_step(CATALOGUE, "The shard's cells")["env"])


def test_every_catalogue_shard_fits_its_budget_at_the_measured_cell_time() -> None:
    for shard in CATALOGUE["strategy"]["matrix"]["shard"]:
        cells = len(_catalogue_cells(shard["faults"].split(",")))
        minutes = CATALOGUE_SETUP_MINUTES + MARGIN * cells * CATALOGUE_CELL_SECONDS / 60
        assert minutes <= CATALOGUE["timeout-minutes"], f"shard {shard['name']}: {cells} cells need ~{minutes:.0f} min"


def test_the_catalogue_report_joins_every_shards_journal_and_runs_no_cell(tmp_path: Path) -> None:
    """The join step's own script, with a stand-in for `statebed`: every shard's journal, each
    followed by a newline (a shard killed mid-line leaves a torn last line), judged by --report-only."""
    assert CATALOGUE_REPORT["needs"] == "catalogue" and CATALOGUE_REPORT["if"] == "always()"
    for i, lines in enumerate((['{"cell": "a"}', '{"cell": "b"}'], ['{"cell": "c"}', '{"cell": "tor'])):
        d = tmp_path / "shards" / f"nightly-catalogue-{i}"
        d.mkdir(parents=True)
        (d / "cells.jsonl").write_text("\n".join(lines) + ("\n" if i == 0 else ""))
    stand_in = tmp_path / ".venv" / "bin" / "statebed"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text('#!/bin/bash\necho "$@" > args.txt\necho \'{"runs": []}\'\nexit 1\n')
    stand_in.chmod(0o755)
    script = str(_catalogue_step(CATALOGUE_REPORT, "Join the shards")["run"])
    out = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr  # the gate decides, not the matrix's exit code
    joined = (tmp_path / "runs" / "catalogue" / "cells.jsonl").read_text().splitlines()
    assert [json.loads(x)["cell"] for x in joined if x.endswith("}")] == ["a", "b", "c"] and '{"cell": "tor' in joined
    args = (tmp_path / "args.txt").read_text().split()
    assert args[:5] == ["chaos", "matrix", "--full", "--seeds", "2"] and "--report-only" in args


def _catalogue_gate(tmp_path: Path, runs: list[dict[str, object]], v1_caught: bool | None) -> int:
    script = str(_catalogue_step(CATALOGUE_REPORT, "Gate")["run"]).split("<<'PY'\n", 1)[1].rsplit("PY", 1)[0]
    (tmp_path / "runs").mkdir()
    summary = {"cells": len(runs), "valid": 0, "invalid": 0, "unknown": 0, "v1_caught": v1_caught}
    (tmp_path / "runs" / "catalogue.json").write_text(json.dumps({"runs": runs, "summary": summary}))
    return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True).returncode


@pytest.mark.parametrize(
    ("v2", "native_v2", "caught", "passes"),
    [(True, True, True, True), ("unknown", False, True, True), (False, True, True, False), (True, True, None, False)],
)
def test_the_catalogue_gate_fails_on_an_invalid_statebed_v2_cell_or_no_caught_v1_control(
    tmp_path: Path, v2: object, native_v2: object, caught: bool | None, passes: bool
) -> None:
    runs = [
        {"cell": "kill-executor-count-v2-s1", "format": "v2", "valid": v2, "anomalies": [{"kind": "lost-update"}]},
        {"cell": "kill-executor-count-native-v2-s1", "format": "native-v2", "valid": native_v2, "anomalies": []},
    ]
    assert (_catalogue_gate(tmp_path, runs, caught) == 0) is passes
