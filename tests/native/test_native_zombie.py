"""zombie-upload on Spark's own store (issue 28): the JVM plug-in's delayed close of attempt 0's
changelog (or, `what: snapshot`, of the zip of version 1 that the task itself uploads), landing
after the next batch's commit. Without Spark: where it applies, what it arms, and its evidence
read from the plug-in's firing records. On real Spark 4.3 (slow, standalone): the example
experiments' native V1 controls are caught, with the plug-in's records as proof (the snapshot
pair in `make e2e` only: docs/testing.md)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from statebed_chaos.experiment import load_experiment
from statebed_chaos.experiment_runner import run_experiment
from statebed_chaos.faults import FaultContext, FaultSpec, NotApplicable, Trigger, fault_class
from statebed_chaos.faults.zombie_native import COMMIT_MARK, SNAPSHOT_ZOMBIE, ZOMBIE
from statebed_chaos.targets import LocalTargets
from statebed_model.rundir import RunDir
from statebed_store.failpoint_control import Control
from statebed_store.formats import get_format
from statebed_verify.history import History

EXAMPLES = Path(__file__).parents[2] / "examples" / "experiments"
FILE = "file:/ckpt/state/0/0/3.changelog"
TASK = {"batch": 2, "partition": 0, "attempt": 0}


def zombie(what: str = "changelog", batch: int = 2) -> Any:
    return fault_class("zombie-upload")(FaultSpec("z", "zombie-upload", Trigger(batch), None, {"partition": 0, "what": what}))


def context(tmp_path: Path, format: str = "native-v1") -> FaultContext:
    run = tmp_path / "run"
    return FaultContext(
        run=RunDir(run),
        format=get_format(format),
        cluster="standalone",
        targets=LocalTargets(run),
        control=Control(run / "failpoints" / "control.json"),
        history=History(tmp_path / "history.jsonl"),
    )


def record(ctx: FaultContext, t: float, point: str, action: str, task: dict[str, int], **extra: Any) -> None:
    """One line in the plug-in's record shape, as the JVM (pid 4242) appends it."""
    rec = {"time": t, "failpoint": point, "action": action, "spec": "", "pid": 4242, "host": "h", "task": task, "hit": 1}
    with (ctx.control.directory / "fired-4242.jsonl").open("a") as f:
        f.write(json.dumps({**rec, "control_version": 1, **extra}) + "\n")


@pytest.mark.parametrize("format", ["native-v1", "native-v2"])
def test_the_changelog_zombie_applies_to_native_v1_and_v2(format: str) -> None:
    zombie().check(get_format(format), "standalone", "local")


def test_plain_native_does_not_apply() -> None:
    with pytest.raises(NotApplicable, match="does not apply to native runs"):
        zombie().check(get_format("native"), "standalone", "local")  # no plug-in in `native`


@pytest.mark.parametrize("format", ["native-v1", "native-v2"])
def test_the_snapshot_zombie_applies_to_batch_0_only(format: str) -> None:
    """Only version 1's zip is uploaded by the task (forced: its column families are new); later
    zips come from the committed store's maintenance thread, once: no losing twin."""
    zombie("snapshot", batch=0).check(get_format(format), "standalone", "local")
    with pytest.raises(NotApplicable, match="batch 0"):
        zombie("snapshot").check(get_format(format), "standalone", "local")


@pytest.mark.parametrize(
    ("format", "zombie_filter"), [("native-v1", "[batch=0,partition=0,attempt=0]"), ("native-v2", "[batch=0,partition=0]")]
)
def test_native_snapshot_prepare_arms_the_zip_close(tmp_path: Path, format: str, zombie_filter: str) -> None:
    ctx = context(tmp_path, format)
    f = zombie("snapshot", batch=0)
    f.prepare(ctx)
    assert ctx.control.read()["points"] == {SNAPSHOT_ZOMBIE: f"{zombie_filter}1*hold(60000)", COMMIT_MARK: "[batch=1]1*delay(1)"}
    f.heal(ctx)
    assert ctx.control.read()["points"] == {}


def test_native_snapshot_evidence_reads_the_zip_close(tmp_path: Path) -> None:
    """The snapshot variant's proof is its own point's records: a changelog hold does not count."""
    ctx = context(tmp_path)
    f = zombie("snapshot", batch=0)
    f.prepare(ctx)
    task, zip_file, now = {"batch": 0, "partition": 0, "attempt": 0}, "file:/ckpt/state/0/0/1.zip", time.time()
    record(ctx, now, ZOMBIE, "hold(60000)", task, file="file:/ckpt/state/0/0/1.changelog")
    ev = f.evidence(ctx)
    assert ev.fired is False and "zip close" in ev.detail, ev
    record(ctx, now, SNAPSHOT_ZOMBIE, "hold(60000)", task, file=zip_file)
    record(ctx, now + 1, COMMIT_MARK, "delay(1)", {"batch": 1}, file="file:/ckpt/commits/1")
    record(ctx, now + 2, SNAPSHOT_ZOMBIE, "released", task, file=zip_file, held_s=2.0)
    record(ctx, now + 3, SNAPSHOT_ZOMBIE, "zombie-landed", task, file=zip_file, after="released")
    ev = f.evidence(ctx)
    assert ev.fired is None and "no event log" in ev.detail, ev
    assert ev.proof[0]["hold"]["file"] == zip_file and [next(iter(p)) for p in ev.proof] == ["hold", "hold_end", "landing", "newer_commit"]


@pytest.mark.parametrize(
    ("format", "zombie_filter"), [("native-v1", "[batch=2,partition=0,attempt=0]"), ("native-v2", "[batch=2,partition=0]")]
)
def test_native_prepare_arms_the_delayed_close_and_the_commit_marker(tmp_path: Path, format: str, zombie_filter: str) -> None:
    """V2's changelog is closed on a checksum pool thread, with no task context: no attempt key there."""
    ctx = context(tmp_path, format)
    f = zombie()
    f.prepare(ctx)
    points = ctx.control.read()["points"]
    assert points[ZOMBIE] == f"{zombie_filter}1*hold(60000)"
    assert points[COMMIT_MARK] == "[batch=3]1*delay(1)"
    assert not any(p.startswith("task.") or p.startswith("changelog.") for p in points)  # none of statebed's points
    f.heal(ctx)
    assert ctx.control.read()["points"] == {}


def test_native_evidence_needs_the_landing_after_the_newer_commit(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = zombie()
    f.prepare(ctx)
    assert f.evidence(ctx).fired is False  # nothing held
    now = time.time()
    record(ctx, now, ZOMBIE, "hold(60000)", TASK, file=FILE)
    record(ctx, now + 1, ZOMBIE, "released", TASK, file=FILE, held_s=1.0)
    record(ctx, now + 2, ZOMBIE, "zombie-landed", TASK, file=FILE, after="released")
    ev = f.evidence(ctx)
    assert ev.fired is False and "commit never passed" in ev.detail  # no newer commit seen
    record(ctx, now + 3, COMMIT_MARK, "delay(1)", {"batch": 3}, file="file:/ckpt/commits/3")
    ev = f.evidence(ctx)
    assert ev.fired is False and "landed before batch 3's commit" in ev.detail
    record(ctx, now + 4, ZOMBIE, "zombie-landed", TASK, file=FILE, after="released")  # (a second landing is not this hold's first)
    assert f.evidence(ctx).fired is False


def test_native_evidence_after_the_commit_asks_spark_which_attempt_won(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = zombie()
    f.prepare(ctx)
    now = time.time()
    record(ctx, now, ZOMBIE, "hold(60000)", TASK, file=FILE)
    record(ctx, now + 1, COMMIT_MARK, "delay(1)", {"batch": 3}, file="file:/ckpt/commits/3")
    record(ctx, now + 2, ZOMBIE, "released", TASK, file=FILE, held_s=2.0)
    record(ctx, now + 3, ZOMBIE, "zombie-landed", TASK, file=FILE, after="released")
    ev = f.evidence(ctx)
    assert ev.fired is None and "no event log" in ev.detail, ev  # the records alone: unknown, never fired
    assert [next(iter(p)) for p in ev.proof] == ["hold", "hold_end", "landing", "newer_commit"]


def result_of(tmp_path: Path, format: str, what: str = "", where: str = "") -> Any:
    """The example experiment (`what`: "" or "snapshot-"; `where`: "" or "-s3"), without its fault-free baseline run (the other verifiers judge it)."""
    exp = load_experiment(EXAMPLES / f"zombie-upload-{what}sample3-{format}{where}.yaml")
    exp = replace(exp, verifiers=tuple(v for v in exp.verifiers if v != "baseline"))
    return run_experiment(exp, out_dir=tmp_path / format, progress=False)


def fired_proof(res: Any, format: str, task: dict[str, int] = TASK) -> dict[str, Any]:
    """The fault fired, by the plug-in's records and Spark's event log: its proof by name."""
    ev = res.faults[0]
    assert ev["fired"] is True, ev
    proof = {k: v for p in ev["proof"] for k, v in p.items()}
    assert proof["hold"]["task"] == (task if format == "native-v1" else {k: task[k] for k in ("batch", "partition")})  # V2: no task context
    assert proof["hold_end"]["action"] == "released" and proof["landing"]["action"] == "zombie-landed"
    assert proof["landing"]["time"] > proof["newer_commit"]["time"] and proof["accepted"]["attempt"] >= 1
    assert proof["failed"]["attempt"] == 0 and proof["failed"]["outcome"] != "Success"
    return proof


@pytest.mark.e2e
@pytest.mark.slow
def test_native_v1_zombie_changelog_is_caught(tmp_path: Path) -> None:
    """The example's control on real Spark 4.3: attempt 0's 3.changelog lands over the retry's
    after batch 3 committed; the verifier loads version 3 from its files. Run under the Spark flock."""
    res = result_of(tmp_path, "native-v1")
    assert fired_proof(res, "native-v1")["hold"]["file"].endswith("/state/0/0/3.changelog")  # V1: the name the retry committed
    assert res.valid is False and res.exit_code == 1, res.reasons
    mixed = [a for a in res.anomalies if a["kind"] == "output-mismatch" and "state after batch 2, loaded from its files" in a["detail"]]
    assert mixed, res.anomalies  # version 3 (batch 2) is attempt 0's draws against the retry's committed output


@pytest.mark.e2e
@pytest.mark.slow
def test_native_v2_under_the_same_zombie_stays_valid(tmp_path: Path) -> None:
    """The twin: the same delayed close lands as `3_<uuid>.changelog`, an orphan beside the
    committed file that no commit names."""
    res = result_of(tmp_path, "native-v2")
    held = fired_proof(res, "native-v2")["hold"]["file"]
    assert re.search(r"/state/0/0/3_[0-9a-f-]{36}\.changelog$", held), held
    assert (res.valid, res.exit_code) == (True, 0), (res.reasons, res.anomalies)
    commit = (tmp_path / "native-v2" / "faulted" / "spark-checkpoint" / "commits" / "2").read_text()
    assert held.rsplit("/3_", 1)[1].removesuffix(".changelog") not in commit  # the zombie's id is no committed one


def caught_in_bucket(tmp_path: Path, where: str) -> Any:
    """The V1 control with Spark's checkpoint in the bucket (`where`: the example's suffix): the
    zombie held `s3a://…/3.changelog` and its late landing over the retry's is caught."""
    res = result_of(tmp_path, "native-v1", where=where)
    held = fired_proof(res, "native-v1")["hold"]["file"]
    assert held.startswith("s3a://statebed/") and held.endswith("/state/0/0/3.changelog"), held
    assert res.valid is False and res.exit_code == 1, res.reasons
    return res


def valid_in_bucket(tmp_path: Path, where: str) -> Any:
    """The V2 twin in the bucket: the late landing is `3_<uuid>.changelog`, an orphan no commit names."""
    res = result_of(tmp_path, "native-v2", where=where)
    held = fired_proof(res, "native-v2")["hold"]["file"]
    assert re.search(r"^s3a://statebed/.*/state/0/0/3_[0-9a-f-]{36}\.changelog$", held), held
    assert (res.valid, res.exit_code) == (True, 0), (res.reasons, res.anomalies)
    return res


@pytest.mark.slow
@pytest.mark.s3
def test_native_v1_zombie_changelog_on_s3a_is_caught(tmp_path: Path) -> None:
    """The control with Spark's checkpoint in a bucket (MinIO behind Toxiproxy, S3A, where a
    rename is a copy and a delete): attempt 0's 3.changelog still lands over the retry's; caught."""
    res = caught_in_bucket(tmp_path, "-s3")
    mixed = [a for a in res.anomalies if a["kind"] == "output-mismatch" and "state after batch 2, loaded from its files" in a["detail"]]
    assert mixed, res.anomalies


@pytest.mark.slow
@pytest.mark.s3
def test_native_v2_under_the_same_zombie_on_s3a_stays_valid(tmp_path: Path) -> None:
    """The twin in the bucket, with Spark's default (rename-based) file manager."""
    valid_in_bucket(tmp_path, "-s3")
    assert not (tmp_path / "native-v2" / "faulted" / "spark-checkpoint").exists()  # Spark's checkpoint was in the bucket


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.s3
def test_native_v1_zombie_changelog_through_the_cloud_file_manager_is_caught(tmp_path: Path) -> None:
    """The control with spark-hadoop-cloud's manager (no rename: written in place, published at
    close): the parked close publishes attempt 0's 3.changelog over the retry's; caught."""
    caught_in_bucket(tmp_path, "-s3-abortable")
    conf = json.loads((tmp_path / "native-v1" / "faulted" / "run.json").read_text())["params"]
    assert conf["checkpoint_file_manager"] == "abortable"


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.s3
def test_native_v2_through_the_cloud_file_manager_stays_valid(tmp_path: Path) -> None:
    """The twin through the cloud manager: its late publish is an orphan too."""
    valid_in_bucket(tmp_path, "-s3-abortable")


SNAP_TASK = {"batch": 0, "partition": 0, "attempt": 0}


@pytest.mark.e2e
@pytest.mark.slow
def test_native_v1_zombie_snapshot_is_caught(tmp_path: Path) -> None:
    """The snapshot control on real Spark 4.3: attempt 0's forced 1.zip (its task uploads it: the
    column families are new) lands over the retry's after batch 1 committed; versions 1-4 load
    from it. Run under the Spark flock."""
    res = result_of(tmp_path, "native-v1", "snapshot-")
    assert fired_proof(res, "native-v1", SNAP_TASK)["hold"]["file"].endswith("/state/0/0/1.zip")  # V1: the name the retry wrote
    assert res.valid is False and res.exit_code == 1, res.reasons
    mixed = [a for a in res.anomalies if a["kind"] == "output-mismatch" and "state after batch 0, loaded from its files" in a["detail"]]
    assert mixed, res.anomalies  # version 1 (batch 0) is attempt 0's draws against the retry's committed output


@pytest.mark.e2e
@pytest.mark.slow
def test_native_v2_under_the_snapshot_zombie_stays_valid(tmp_path: Path) -> None:
    """The twin: attempt 0's zip lands as `1_<uuid>.zip` beside the retry's; no commit names it."""
    res = result_of(tmp_path, "native-v2", "snapshot-")
    held = fired_proof(res, "native-v2", SNAP_TASK)["hold"]["file"]
    assert re.search(r"/state/0/0/1_[0-9a-f-]{36}\.zip$", held), held
    assert (res.valid, res.exit_code) == (True, 0), (res.reasons, res.anomalies)
    commit = (tmp_path / "native-v2" / "faulted" / "spark-checkpoint" / "commits" / "0").read_text()
    assert held.rsplit("/1_", 1)[1].removesuffix(".zip") not in commit  # the zombie's id is no committed one
