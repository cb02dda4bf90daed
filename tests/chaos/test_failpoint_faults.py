"""The failpoint faults (delay-snapshot-upload, drop-snapshot-upload, fail-changelog-upload,
zombie-upload): armed on the run's failpoint control, proven only by firing records that
match their target, and injected into real `statebed run` subprocesses on a standalone
cluster (the nemesis steps done by hand, as in test_process_faults)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from statebed_base.errors import UsageError
from statebed_chaos.faults import Evidence, FaultContext
from statebed_store.formats import get_format
from statebed_verify import verify_run

sys.path.insert(0, str(Path(__file__).parent))
from test_process_faults import STANDALONE, Run, assert_nothing_left, context, fault, fire  # the hand-driven nemesis

# -- arming and evidence from records (no Spark) ---------------------------------------------------


def test_fail_changelog_upload_is_proven_only_by_an_error_of_its_own_task(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = fault("fail-changelog-upload", batch=2, partition=1)
    assert f.evidence(ctx).fired is None  # no control file: cannot tell
    f.prepare(ctx)
    assert ctx.control.read()["points"] == {"changelog.upload.before": "[batch=2,partition=1]1*error"}
    assert f.evidence(ctx).fired is False
    fire(ctx, "changelog.upload.before", "error", {"batch": 1, "partition": 1, "attempt": 0})  # another batch
    fire(ctx, "changelog.upload.before", "error", {"batch": 2, "partition": 0, "attempt": 0})  # another partition
    fire(ctx, "changelog.upload.after", "error", {"batch": 2, "partition": 1, "attempt": 0})  # another point
    fire(ctx, "changelog.upload.before", "delay(5)", {"batch": 2, "partition": 1, "attempt": 0})  # another action
    assert f.evidence(ctx).fired is False
    fire(ctx, "changelog.upload.before", "error", {"batch": 2, "partition": 1, "attempt": 1})  # whichever attempt got there first
    facts = f.inject(ctx)  # the firing is there: inject returns at once and disarms
    assert facts["fired_before_disarm"] == 1 and ctx.control.read()["points"] == {}
    ev = f.evidence(ctx)
    assert ev.fired is True and ev.proof[0]["firing"]["task"] == {"batch": 2, "partition": 1, "attempt": 1}
    assert ev.proof[-1] == {"retries": []}  # no attempt records in this directory
    f.heal(ctx)
    f.heal(ctx)  # idempotent
    assert ctx.control.read()["points"] == {}
    after = fault("fail-changelog-upload", when="after")
    after.prepare(ctx)
    assert ctx.control.read()["points"] == {"changelog.upload.after": "[batch=1,partition=0]1*error"}
    with pytest.raises(UsageError, match="when must be before or after"):
        fault("fail-changelog-upload", when="during")
    with pytest.raises(UsageError, match="partition must be an integer >= 0"):
        fault("fail-changelog-upload", partition=-1)


def test_snapshot_faults_arm_at_the_trigger_and_need_a_matching_firing(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    drop = fault("drop-snapshot-upload", partition=1)
    delay = fault("delay-snapshot-upload", ms=250)
    for f in (drop, delay):
        f.prepare(ctx)
    assert ctx.control.read()["points"] == {}  # armed only from the trigger on
    assert drop.evidence(ctx).fired is None  # the control file does not exist yet: cannot tell
    assert drop.inject(ctx)["armed"] == "[partition=1]drop"
    delay.inject(ctx)
    assert ctx.control.read()["points"] == {"snapshot.upload.before": "[partition=1]drop->delay(250)"}
    fire(ctx, "snapshot.upload.before", "drop", {"batch": 3, "partition": 0, "attempt": 0})  # another partition
    fire(ctx, "snapshot.upload.before", "drop", None)  # no task context: not provably this fault's target
    assert drop.evidence(ctx).fired is False and delay.evidence(ctx).fired is False
    fire(ctx, "snapshot.upload.before", "drop", {"batch": 3, "partition": 1, "attempt": 0})
    fire(ctx, "snapshot.upload.before", "delay(250)", None)
    assert drop.evidence(ctx).fired is True and delay.evidence(ctx).fired is True  # delay aims at every task
    drop.heal(ctx)
    assert ctx.control.read()["points"] == {"snapshot.upload.before": "delay(250)"}
    delay.heal(ctx)
    assert ctx.control.read()["points"] == {}
    with pytest.raises(UsageError, match="ms must be an integer > 0"):
        fault("delay-snapshot-upload", ms=0)


def test_zombie_upload_needs_the_zombie_write_after_the_winners(tmp_path: Path) -> None:
    ctx = context(tmp_path, format="v1")
    z = fault("zombie-upload", batch=2, partition=1, hold_ms=30000, slow_ms=4000)
    z.check(get_format("v1"), "standalone", "local")
    with pytest.raises(Exception, match="standalone"):
        z.check(get_format("v1"), "local", "local")
    with pytest.raises(Exception, match="does not apply to native"):
        z.check(get_format("native"), "standalone", "local")
    assert z.evidence(ctx).fired is None
    z.prepare(ctx)
    a0, a1 = "[batch=2,partition=1,attempt=0]", "[batch=2,partition=1,attempt=1]"
    assert ctx.control.read()["points"] == {
        "task.load.after": f"{a0}1*delay(4000)",
        "changelog.upload.before": f"{a1}1*hold(30000)",
        "changelog.upload.after": f"{a0}1*delay(1)->{a1}1*delay(4000)",  # the zombie straggles once it wrote
        "task.commit.after": f"{a0}1*delay(1)",
    }
    t0, t1 = {"batch": 2, "partition": 1, "attempt": 0}, {"batch": 2, "partition": 1, "attempt": 1}
    assert z.evidence(ctx).fired is False
    fire(ctx, "changelog.upload.before", "hold(30000)", t1, pid=2)
    fire(ctx, "changelog.upload.after", "delay(1)", t1, pid=2)  # the copy wrote BEFORE the winner: no zombie
    ev = z.evidence(ctx)
    assert ev.fired is False and "never wrote its changelog while attempt 1 was held" in ev.detail
    fire(ctx, "changelog.upload.after", "delay(1)", t0, pid=1)
    ev = z.evidence(ctx)
    assert ev.fired is False and "killed first" in ev.detail
    fire(ctx, "task.commit.after", "delay(1)", t0, pid=1)
    facts = z.inject(ctx)  # the copy is held and the winner committed: releases at once
    assert facts["winner_committed"]["task"] == t0 and ctx.control.read()["released"] == {"changelog.upload.before": 1}
    fire(ctx, "changelog.upload.before", "released", t1, pid=2)
    fire(ctx, "changelog.upload.after", "delay(4000)", t1, pid=2)
    ev = z.evidence(ctx)
    assert ev.fired is None and "no event log" in ev.detail  # both wrote, but which one did Spark accept?
    spark_accepted(ctx, batch=2, partition=1, winner=0)
    ev = z.evidence(ctx)
    assert ev.fired is True and "released" in ev.detail, ev.detail
    assert [next(iter(p)) for p in ev.proof] == ["hold", "hold_end", "winner_durable", "zombie_durable", "accepted"]
    z.heal(ctx)
    assert ctx.control.read()["points"] == {}


def spark_accepted(ctx: FaultContext, batch: int, partition: int, winner: int) -> None:
    """Spark's event log as a run leaves it: batch's state task of `partition` ran twice (attempt 1
    a speculative copy), `winner` succeeded, the other was killed; a one-attempt task of another stage."""

    def end(tid: int, stage: int, attempt: int, reason: str) -> dict[str, Any]:
        info = {"Task ID": tid, "Index": partition, "Attempt": attempt, "Executor ID": str(attempt), "Host": f"127.0.0.{2 + attempt}"}
        info |= {"Speculative": attempt == 1, "Launch Time": 1000 + tid, "Finish Time": 2000 + tid}
        return {
            "Event": "SparkListenerTaskEnd",
            "Stage ID": stage,
            "Stage Attempt ID": 0,
            "Task Info": info,
            "Task End Reason": {"Reason": reason},
        }

    job = {"Event": "SparkListenerJobStart", "Job ID": 3, "Stage IDs": [6, 7], "Submission Time": 900}
    job["Properties"] = {"streaming.sql.batchId": str(batch)}
    won = {a: "Success" if a == winner else "TaskKilled" for a in (0, 1)}
    lines = [job, end(9, 6, 0, "Success"), end(10, 7, 0, won[0]), end(11, 7, 1, won[1])]
    ctx.run.events.mkdir(parents=True, exist_ok=True)
    (ctx.run.events / "app-20261123200000-0000").write_text("".join(json.dumps(e) + "\n" for e in lines))


def test_zombie_snapshot_holds_the_original_until_the_copys_snapshot_is_durable(tmp_path: Path) -> None:
    ctx = context(tmp_path, format="v1")
    z = fault("zombie-upload", batch=2, partition=0, what="snapshot", hold_ms=30000)
    z.prepare(ctx)
    a0, a1 = "[batch=2,partition=0,attempt=0]", "[batch=2,partition=0,attempt=1]"
    assert ctx.control.read()["points"] == {
        "task.commit.after": f"{a0}1*delay(30000)",  # the zombie is the original, a straggler after its commit
        "task.load.after": f"{a1}1*hold(30000)",  # the copy may not commit before it
        "snapshot.upload.before": f"{a0}1*hold(30000)",
        "snapshot.upload.after": f"{a1}1*delay(1)->{a0}1*delay(1)",
    }
    t0, t1 = {"batch": 2, "partition": 0, "attempt": 0}, {"batch": 2, "partition": 0, "attempt": 1}
    spark_accepted(ctx, batch=2, partition=0, winner=1)
    assert z.evidence(ctx).fired is False  # nothing held
    fire(ctx, "task.load.after", "hold(30000)", t1, pid=2)  # a copy launched early waits
    fire(ctx, "task.commit.after", "delay(30000)", t0, pid=1)  # for the zombie's commit
    fire(ctx, "snapshot.upload.before", "hold(30000)", t0, pid=1)
    fire(ctx, "task.commit.after", "delay(1)", t1, pid=2)  # the copy's commit is not what releases a snapshot
    assert z._ready(ctx, "snapshot.upload.before", z.zombie, "snapshot.upload.after", z.winner) is None
    ev = z.evidence(ctx)
    assert ev.fired is False and "attempt 1 of batch 2 partition 0 never wrote its snapshot while attempt 0 was held" in ev.detail
    fire(ctx, "snapshot.upload.after", "delay(1)", t1, pid=2)
    facts = z.inject(ctx)  # the copy is held and the zombie committed; then the winner's snapshot is durable
    assert facts["winner_gate"]["on"]["task"] == t0 and facts["winner_gate"]["hold"]["task"] == t1
    assert facts["released"] == "after the winner's snapshot" and facts["winner_durable"]["task"] == t1
    assert ctx.control.read()["released"] == {"task.load.after": 1, "snapshot.upload.before": 1}
    fire(ctx, "snapshot.upload.before", "released", t0, pid=1)
    ev = z.evidence(ctx)
    assert ev.fired is False and "never wrote its snapshot after attempt 1's (killed first?)" in ev.detail  # its worker died
    fire(ctx, "snapshot.upload.after", "delay(1)", t0, pid=1)
    ev = z.evidence(ctx)
    assert ev.fired is True and "wrote its snapshot" in ev.detail, ev.detail
    assert [next(iter(p)) for p in ev.proof] == ["hold", "hold_end", "winner_durable", "zombie_durable", "accepted"]
    assert ev.proof[-1]["accepted"] == {"attempt": 1, "task_id": 11, "executor": "1", "host": "127.0.0.3"}
    spark_accepted(ctx, batch=2, partition=0, winner=0)  # the straggler finished first: its snapshot is the right one
    ev = z.evidence(ctx)
    assert ev.fired is False and "Spark accepted attempt 0" in ev.detail
    z.heal(ctx)
    assert ctx.control.read()["points"] == {}
    assert ctx.control.read()["released"] == {"task.load.after": 2, "snapshot.upload.before": 2}  # heal never leaves a hold


def test_zombie_upload_refuses_an_unknown_what(tmp_path: Path) -> None:
    for bad, shown in (("checkpoint", "'checkpoint'"), (["snapshot"], "['snapshot']")):
        with pytest.raises(UsageError, match=re.escape(f"fault f1 (zombie-upload): what must be changelog or snapshot, got {shown}")):
            fault("zombie-upload", what=bad)
    assert fault("zombie-upload", what="changelog").terms == fault("zombie-upload").terms  # the default


# -- injected into real runs (Spark) ----------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_fail_changelog_upload_fails_attempt_0_and_the_retry_commits(tmp_path: Path) -> None:
    """The first attempt of batch 1 / partition 1 (attempt 0: speculation is off) raises before
    its changelog write; Spark retries the task, the retry commits, the V2 run verifies."""
    ctx = context(tmp_path)
    f = fault("fail-changelog-upload", batch=1, partition=1)
    run = Run(ctx, [f], "--batches", "3", "--conf", "spark.speculation=false", *STANDALONE)
    run.inject(f)
    code, err = run.finish()
    assert code == 0, err[-3000:]
    ev = f.evidence(ctx)
    assert ev.fired is True, ev.detail
    retries = next(p["retries"] for p in ev.proof if "retries" in p)
    assert any(r["attempt"] >= 1 and r["outcome"] == "ok" for r in retries), retries
    assert verify_run(ctx.run.root).valid is True
    assert_nothing_left(ctx)


@pytest.mark.slow
def test_drop_snapshot_upload_fires_and_v2_loads_fall_back(tmp_path: Path) -> None:
    """Every snapshot upload from batch 1 on is dropped (snapshot interval 2): the lineage
    presumes snapshots that never land, loads fall back to changelogs; V2 verifies."""
    ctx = context(tmp_path)
    f = fault("drop-snapshot-upload", batch=1)
    run = Run(ctx, [f], "--batches", "6", "--snapshot-interval", "2", "--conf", "spark.speculation=false", *STANDALONE)
    run.inject(f)
    code, err = run.finish()
    assert code == 0, err[-3000:]
    ev = f.evidence(ctx)
    assert ev.fired is True, ev.detail
    assert all(isinstance(p["firing"]["task"], dict) for p in ev.proof)  # the uploader names the task that queued it
    assert verify_run(ctx.run.root).valid is True
    assert_nothing_left(ctx)


def zombie_run(tmp_path: Path, fmt: str, what: str = "changelog") -> tuple[Evidence, Path]:
    """zombie-upload on batch 2 / partition 0 of a sample3 run; returns (evidence, run dir).
    Snapshot interval: 3 for snapshots (version 3 is both attempts' first one), else none at all.
    Seed 7: its two attempts' draws differ (tests/chaos/test_positive_controls.py checks it)."""
    ctx = context(tmp_path, format=fmt)
    z = fault("zombie-upload", batch=2, partition=0, what=what)
    interval = "3" if what == "snapshot" else "10"
    args = ("--workload", "sample3", "--format", fmt, "--batches", "5", "--snapshot-interval", interval, "--seed", "7")
    run = Run(ctx, [z], *args, *STANDALONE)
    facts = run.inject(z)
    code, err = run.finish()
    assert code == 0, err[-3000:]
    assert facts["released"] == ("after the winner's snapshot" if what == "snapshot" else "after the winner's commit"), facts
    ev = z.evidence(ctx)
    assert ev.fired is True, ev.detail
    assert_nothing_left(ctx)
    return ev, ctx.run.root


@pytest.mark.e2e
@pytest.mark.slow
def test_zombie_upload_v2_leaves_an_orphan_and_stays_valid(tmp_path: Path) -> None:
    _, root = zombie_run(tmp_path, "v2")
    assert len(list((root / "checkpoint" / "state" / "0" / "0").glob("3_*.changelog"))) == 2  # the winner's and the orphan
    assert verify_run(root).valid is True


@pytest.mark.e2e
@pytest.mark.slow
def test_zombie_upload_v1_is_caught(tmp_path: Path) -> None:
    """The positive control: the zombie overwrites `<v>.changelog` after the winner committed."""
    _, root = zombie_run(tmp_path, "v1")
    assert list((root / "checkpoint" / "state" / "0" / "0").glob("3*.changelog")) == [root / "checkpoint/state/0/0/3.changelog"]
    report = verify_run(root)
    assert report.valid is False, report  # seen: sample-oversize (4 out of a keep-3) and output-mismatch
    state = report.to_json()["checks"]["state"]["anomalies"]  # the batch-2 output against the overwritten file, whoever ran batch 3
    assert any(a["kind"] == "output-mismatch" and "after batch 2" in a["detail"] for a in state), state


@pytest.mark.e2e
@pytest.mark.slow
def test_zombie_snapshot_v2_leaves_an_orphan_zip_and_stays_valid(tmp_path: Path) -> None:
    """The original attempt's snapshot of version 3 lands after the accepted copy's: V2 names it apart."""
    ev, root = zombie_run(tmp_path, "v2", "snapshot")
    assert next(p["accepted"]["attempt"] for p in ev.proof if "accepted" in p) == 1
    assert len(list((root / "checkpoint" / "state" / "0" / "0").glob("3_*.zip"))) == 2  # the winner's and the orphan
    assert verify_run(root).valid is True
