"""zombie-upload with `replan: true` on Spark's own store (issue 28, bucket-collect): attempt 0's
changelog close of batch B is parked, the driver killed before B commits and restarted; the new
app plans B again (a new rand() seed) and commits B and B + 1; then the parked file lands, as a
cut-off executor's rename would. Without Spark: where it applies, what it arms, the lander and
the evidence. On real Spark 4.3 (slow, standalone, `make e2e` only): native-v1 is caught,
native-v2 stays valid."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from damage_runs import run_example
from test_native_zombie import context, record

from statebed_base.errors import UsageError
from statebed_chaos.faults import FaultContext, FaultSpec, NotApplicable, Trigger, fault_class
from statebed_chaos.faults.zombie_native import COMMIT_MARK, SNAPSHOT_ZOMBIE, ZOMBIE
from statebed_chaos.faults.zombie_replan import LAND, SNAPSHOT_UPLOAD, STOP, parked_file
from statebed_store.formats import get_format

TASK = {"batch": 2, "partition": 0, "attempt": 0}


def replan(**params: Any) -> Any:
    spec = FaultSpec("z", "zombie-upload", Trigger(2), None, {"partition": 0, "replan": True, **params})
    return fault_class("zombie-upload")(spec)


@pytest.mark.parametrize("format", ["native-v1", "native-v2"])
def test_it_applies_to_the_plugin_formats_and_restarts_the_driver(format: str) -> None:
    f = replan()
    f.check(get_format(format), "standalone", "local")
    assert f.restarts_driver is True
    assert fault_class("zombie-upload")(FaultSpec("y", "zombie-upload", Trigger(2), None, {})).restarts_driver is False


def test_statebed_formats_and_bad_values_are_refused() -> None:
    with pytest.raises(NotApplicable, match="native-v1 / native-v2 runs only"):
        replan().check(get_format("v1"), "standalone", "local")
    with pytest.raises(UsageError, match="replan must be true or false"):
        replan(replan="yes")
    replan(what="snapshot").check(get_format("native-v1"), "standalone", "local")  # any batch: the zip of B + 1 is the maintenance thread's


@pytest.mark.parametrize("format", ["native-v1", "native-v2"])
def test_a_snapshot_replan_parks_the_maintenance_threads_zip_and_marks_the_new_apps(tmp_path: Path, format: str) -> None:
    """A zip due by the interval is uploaded on the maintenance thread: no attempt in the filter, V1 too."""
    ctx = context(tmp_path, format)
    f = replan(what="snapshot")
    f.prepare(ctx)
    points = ctx.control.read()["points"]
    assert points[SNAPSHOT_ZOMBIE] == "[batch=2,partition=0]1*hold(60000)"
    assert points[SNAPSHOT_UPLOAD] == "[batch=2,partition=0]1*delay(1)"
    f.heal(ctx)
    assert ctx.control.read()["points"] == {}


@pytest.mark.parametrize(
    ("format", "zombie_filter"), [("native-v1", "[batch=2,partition=0,attempt=0]"), ("native-v2", "[batch=2,partition=0]")]
)
def test_prepare_parks_the_close_and_holds_the_old_apps_commit(tmp_path: Path, format: str, zombie_filter: str) -> None:
    ctx = context(tmp_path, format)
    f = replan(hold_ms=5000)
    f.prepare(ctx)
    points = ctx.control.read()["points"]
    assert points[ZOMBIE] == f"{zombie_filter}1*hold(5000)"
    assert points[STOP] == "[batch=2]1*hold(5000)"  # app 1's driver stops after batch 2's job: no output, no commit of 2
    assert points[COMMIT_MARK] == "[batch=3]1*delay(1)"  # marker: the new app committed 3
    f.heal(ctx)
    assert ctx.control.read()["points"] == {}


def _checkpoint(ctx: FaultContext) -> tuple[Path, Path]:
    """Version 3 as the new app committed it, and app 1's parked temp file (with its checksum) beside it."""
    state = ctx.spark_checkpoint / "state" / "0" / "0"
    state.mkdir(parents=True)
    final = state / "3.changelog"
    final.write_bytes(b"new plan")
    (state / ".3.changelog.crc").write_bytes(b"crc of the new plan")
    tmp = state / ".3.changelog.0b5e6f1a-0000-4000-8000-000000000000.tmp"
    tmp.write_bytes(b"old plan")
    (state / f".{tmp.name}.crc").write_bytes(b"crc of the old plan")
    (state / ".4.changelog.1111.tmp").write_bytes(b"another file's temp")
    return final, tmp


def test_parked_file_is_the_one_temp_of_that_name(tmp_path: Path) -> None:
    final, tmp = _checkpoint(context(tmp_path))
    assert parked_file(final) == tmp
    (final.parent / ".3.changelog.second.tmp").write_bytes(b"")
    assert parked_file(final) is None  # two candidates: no guess


def _parked_copy(ctx: FaultContext, t: float, point: str, task: dict[str, int], final: Path, content: bytes) -> None:
    """The plug-in's whole copy of the parked stream, and its record."""
    copy = ctx.control.directory / "parked" / f"4242-1-{final.name}"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(content)
    record(ctx, t, point, "zombie-parked", task, file=f"file:{final}", copy=str(copy), bytes=len(content))


def _history_of_a_kill_and_restart(ctx: FaultContext, t: float) -> None:
    ctx.history.record("driver", "info", t - 10, t + 1, pid=100, exit_code=-9)
    ctx.history.record("driver", "ok", t + 2, t + 30, pid=200, exit_code=0)
    facts = {"hold": {}, "driver_held": {"time": t + 0.5}, "signalled": [{"pid": 100}]}
    ctx.history.record("fault", "ok", t + 0.6, t + 1, id="z", kind="zombie-upload", phase="inject", facts=facts)


def _land(ctx: FaultContext, f: Any) -> dict[str, Any]:
    assert f.before_resume(ctx) is not None
    (ctx.spark_checkpoint / "commits").mkdir(parents=True)
    (ctx.spark_checkpoint / "commits" / "3").write_text("v1\n{}")
    f.heal(ctx)  # joins the lander
    ops = [op for op in ctx.history.ops("fault") if op.fields.get("phase") == LAND]
    assert len(ops) == 1
    return {"outcome": ops[0].outcome, **ops[0].fields["facts"]}


def test_the_lander_renames_the_parked_file_over_the_committed_one_and_the_evidence_holds(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    ctx.poll_s = 0.01
    final, tmp = _checkpoint(ctx)
    f = replan()
    f.prepare(ctx)
    t = time.time() - 60
    record(ctx, t, ZOMBIE, "hold(60000)", TASK, file=f"file:{final}")
    _parked_copy(ctx, t, ZOMBIE, TASK, final, b"old plan, the whole of it")
    record(ctx, t + 0.5, STOP, "hold(60000)", {"batch": 2})
    _history_of_a_kill_and_restart(ctx, t)
    record(ctx, t + 20, COMMIT_MARK, "delay(1)", {"batch": 3}, file="file:/ckpt/commits/3")
    landed = _land(ctx, f)
    assert landed["outcome"] == "ok" and landed["parked"] == tmp.name and landed["bytes"] == 25, landed
    assert final.read_bytes() == b"old plan, the whole of it"  # the copy, not the temp file's flushed part
    assert not tmp.exists() and not (final.parent / f".{tmp.name}.crc").exists()
    assert not (final.parent / ".3.changelog.crc").exists()  # the new plan's checksum would lie about the old content
    assert (final.parent / ".4.changelog.1111.tmp").exists()  # another file's temp is left alone
    ev = f.evidence(ctx)
    assert ev.fired is True, ev
    assert [next(iter(p)) for p in ev.proof] == ["hold", "driver_held", "driver_died", "driver_restarted", "landing", "newer_commit"]


def test_no_parked_file_or_a_landing_before_the_commit_has_not_fired(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    ctx.poll_s = 0.01
    final, tmp = _checkpoint(ctx)
    tmp.unlink()  # the zombie's JVM took its temp file with it
    f = replan()
    f.prepare(ctx)
    t = time.time() - 60
    record(ctx, t, ZOMBIE, "hold(60000)", TASK, file=f"file:{final}")
    _history_of_a_kill_and_restart(ctx, t)
    assert _land(ctx, f)["outcome"] == "fail" and final.read_bytes() == b"new plan"
    ev = f.evidence(ctx)
    assert ev.fired is False and "never landed" in ev.detail, ev


def test_without_a_driver_kill_it_has_not_fired(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = replan()
    f.prepare(ctx)
    record(ctx, time.time(), ZOMBIE, "hold(60000)", TASK, file="file:/ckpt/state/0/0/3.changelog")
    ev = f.evidence(ctx)
    assert ev.fired is False and "not killed" in ev.detail


def result_of(tmp_path: Path, format: str) -> Any:
    return run_example(tmp_path, f"zombie-upload-replan-bucket-collect-{format}", format)


def fired(res: Any) -> dict[str, Any]:
    ev = res.faults[0]
    assert ev["fired"] is True, json.dumps(ev)[:3000]
    return {k: v for p in ev["proof"] for k, v in p.items()}


@pytest.mark.e2e
@pytest.mark.slow
def test_native_v1_replanned_bucket_collect_is_caught(tmp_path: Path) -> None:
    """The appendix's bucket anomaly in Spark's own V1 store: version 3 replays the old plan's
    buckets against the output the new plan committed. Run under the Spark flock."""
    res = result_of(tmp_path, "native-v1")
    proof = fired(res)
    assert proof["hold"]["file"].endswith("/state/0/0/3.changelog") and proof["landing"]["parked"].startswith(".3.changelog.")
    assert res.valid is False and res.exit_code == 1, (res.reasons, res.anomalies)


@pytest.mark.e2e
@pytest.mark.slow
def test_native_v2_under_the_replanned_zombie_stays_valid(tmp_path: Path) -> None:
    res = result_of(tmp_path, "native-v2")
    held = fired(res)["hold"]["file"]
    assert re.search(r"/state/0/0/3_[0-9a-f-]{36}\.changelog$", held), held
    assert (res.valid, res.exit_code) == (True, 0), (res.reasons, res.anomalies)


def test_a_parked_zip_lands_only_after_the_new_apps_zip_and_says_so(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    ctx.poll_s = 0.01
    state = ctx.spark_checkpoint / "state" / "0" / "0"
    state.mkdir(parents=True)
    final = state / "3.zip"
    final.write_bytes(b"new plan's zip")
    (state / ".3.zip.5e5e.tmp").write_bytes(b"old plan's zip")
    f = replan(what="snapshot")
    f.prepare(ctx)
    t = time.time() - 60
    record(ctx, t, SNAPSHOT_ZOMBIE, "hold(60000)", {"batch": 2, "partition": 0}, file=f"file:{final}")
    _parked_copy(ctx, t, SNAPSHOT_ZOMBIE, {"batch": 2, "partition": 0}, final, b"old plan's zip")
    _history_of_a_kill_and_restart(ctx, t)
    record(ctx, t + 20, COMMIT_MARK, "delay(1)", {"batch": 3}, file="file:/ckpt/commits/3")
    record(ctx, t + 21, SNAPSHOT_UPLOAD, "delay(1)", {"batch": 2, "partition": 0}, file=f"file:{final}")
    assert _land(ctx, f)["outcome"] == "ok" and final.read_bytes() == b"old plan's zip"
    ev = f.evidence(ctx)
    assert ev.fired is True and [next(iter(p)) for p in ev.proof][-2:] == ["newer_commit", "new_zip"], ev


def test_without_the_new_apps_zip_the_lander_gives_up_at_the_runs_end(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    ctx.poll_s = 0.01
    state = ctx.spark_checkpoint / "state" / "0" / "0"
    state.mkdir(parents=True)
    (state / "3.zip").write_bytes(b"new")
    (state / ".3.zip.5e5e.tmp").write_bytes(b"old")
    f = replan(what="snapshot")
    f.prepare(ctx)
    record(ctx, time.time(), SNAPSHOT_ZOMBIE, "hold(60000)", {"batch": 2, "partition": 0}, file=f"file:{state / '3.zip'}")
    assert f.before_resume(ctx) is not None
    (ctx.spark_checkpoint / "commits").mkdir(parents=True)
    (ctx.spark_checkpoint / "commits" / "3").write_text("v1\n{}")
    ctx.stop.set()  # the run ended with no upload of the new zip
    f.heal(ctx)
    ops = [op for op in ctx.history.ops("fault") if op.fields.get("phase") == LAND]
    assert ops[0].outcome == "fail" and "zip of version 3 not uploaded" in ops[0].fields["facts"]["reason"]
    assert (state / "3.zip").read_bytes() == b"new"


def test_the_lander_never_writes_outside_the_runs_checkpoint(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    ctx.poll_s = 0.01
    outside = tmp_path / "elsewhere" / "3.changelog"
    outside.parent.mkdir()
    outside.write_bytes(b"not the run's")
    (outside.parent / ".3.changelog.1.tmp").write_bytes(b"x")
    f = replan()
    f.prepare(ctx)
    t = time.time() - 60
    record(ctx, t, ZOMBIE, "hold(60000)", TASK, file=f"file:{outside}")
    _parked_copy(ctx, t, ZOMBIE, TASK, outside, b"zombie")
    landed = _land(ctx, f)
    assert landed["outcome"] == "fail" and "not inside the run's Spark checkpoint" in landed["reason"]
    assert outside.read_bytes() == b"not the run's"
