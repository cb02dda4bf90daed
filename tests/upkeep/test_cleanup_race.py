"""The cleanup-race fault without Spark: in the catalogue and the full matrix (statebed formats
and Spark's own store through the plug-in), and proven only by a pass (statebed) or a delete of
Spark's maintenance (native) while Spark's event log shows an attempt alive that is pending or losing."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "chaos"))
from test_process_faults import context, events, fault, fire

from statebed_base.errors import UsageError
from statebed_chaos.experiment import parse_experiment
from statebed_chaos.faults import KINDS, NotApplicable
from statebed_chaos.matrix_presets import FAULTS, PRESETS, plan_cells
from statebed_job.maintenance import PassRecord
from statebed_model.eventlog import read_event_log
from statebed_model.spark_features import SPARK_DEFAULTS, feature_conf
from statebed_store.formats import get_format


def test_in_the_catalogue_and_the_full_matrix_for_statebed_formats_and_sparks_store() -> None:
    assert KINDS["cleanup-race"] == "cleanup_race" and "cleanup-race" in FAULTS
    assert {"v1", "v2", "native-v1", "native-v2"} <= {m for f, _, m in PRESETS["full"].combos if f == "cleanup-race"}
    f = fault("cleanup-race")
    f.check(get_format("v2"), "local", "local")
    f.check(get_format("native-v2"), "local", "local")
    with pytest.raises(NotApplicable, match="native"):
        f.check(get_format("native"), "local", "local")
    with pytest.raises(UsageError, match="retain"):
        fault("cleanup-race", retain=0)


def write_passes(ctx: object, rows: list[PassRecord]) -> None:
    run = ctx.run  # type: ignore[attr-defined]
    run.storage.write("faults/f1-maintenance.jsonl", b"".join(json.dumps(r.to_json()).encode() + b"\n" for r in rows))


def test_fired_only_when_a_deleting_pass_overlaps_a_pending_attempt(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = fault("cleanup-race")
    assert f.evidence(ctx).fired is None  # no record: cannot tell
    events(ctx, "app-20261123115904")
    tasks = [t for t in read_event_log(ctx.run.events).tasks if t.batch is not None and t.finish_ms is not None]
    t = max(tasks, key=lambda t: t.batch or 0)
    assert t.batch is not None
    during = (t.launch_ms + 1) / 1000
    write_passes(ctx, [PassRecord(1, "state/0/0", t.batch - 1, 2, files_deleted=0, at=during, seconds=0.001)])
    assert f.evidence(ctx).fired is False  # a pass that deleted nothing
    write_passes(ctx, [PassRecord(1, "state/0/0", t.batch - 1, 2, files_deleted=3, at=1.0, seconds=0.5)])
    assert f.evidence(ctx).fired is False  # deleted, but long before any attempt ran
    write_passes(ctx, [PassRecord(1, "state/0/0", t.batch - 1, 2, files_deleted=3, at=during, seconds=0.001)])
    ev = f.evidence(ctx)
    assert ev.fired is True and ev.proof[1]["attempt"]["batch"] == t.batch, ev


def test_sparks_store_keeps_retain_versions_and_races_with_holds_at_the_changelog_close() -> None:
    cells, skipped = plan_cells(PRESETS["full"], 1, faults=["cleanup-race"], workloads=["count"])
    by_format = {c.format: c.experiment for c in cells}
    assert not skipped and set(by_format) == {"v1", "v2", "native-v1", "native-v2"}
    native, statebed = by_format["native-v2"], by_format["v2"]
    assert native.spark_conf() == {  # Spark's maintenance window, threads enough that no store's cleanup waits on a held one, often
        **feature_conf(SPARK_DEFAULTS),  # and Spark's repair features, its defaults set explicitly as in every native run
        "spark.sql.streaming.minBatchesToRetain": "2",
        "spark.sql.streaming.stateStore.numStateStoreMaintenanceThreads": "4",
        "spark.sql.streaming.stateStore.maintenanceInterval": "500ms",
    }
    assert statebed.spark_conf() == {}  # statebed's runs unchanged: their maintenance is the fault's own
    assert (native.snapshot_interval, statebed.snapshot_interval) == (1, PRESETS["full"].base.snapshot_interval)
    holds = [s for s in native.faults if s.kind == "slow-attempt"]
    assert [(h.at.batch, h.params["when"]) for h in holds] == [(4, "after"), (5, "after")]  # the plug-in's point
    exp = parse_experiment({"format": "native-v1", "faults": [{"kind": "cleanup-race", "at": {"batch": 1}, "params": {"retain": 3}}]})
    assert exp.spark_conf()["spark.sql.streaming.minBatchesToRetain"] == "3"
    with pytest.raises(UsageError, match="delete_delay_ms"):
        fault("cleanup-race", delete_delay_ms=-1)


def test_native_fired_only_by_a_delete_that_took_effect_while_an_attempt_was_alive(tmp_path: Path) -> None:
    ctx = context(tmp_path, format="native-v2")
    f = fault("cleanup-race")
    facts = f.inject(ctx)
    assert facts["armed"] == "delay(200)" and facts["hold"] == {
        "failpoint": "native.changelog.upload",
        "armed": "[batch=3,partition=0]1*hold(60000)",
    }
    assert ctx.control.read()["points"]["native.cleanup.delete"] == "delay(200)"
    assert f.evidence(ctx).fired is False  # armed, nothing deleted
    events(ctx, "app-20261123115904")
    tasks = [t for t in read_event_log(ctx.run.events).tasks if t.batch is not None and t.finish_ms is not None]
    t = max(tasks, key=lambda t: t.batch or 0)
    during = (t.launch_ms + 1) / 1000
    kept = tmp_path / "state" / "0" / "0" / "1.zip"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"zip")
    fire(ctx, "native.cleanup.delete", "delay(200)", {"batch": 0, "partition": 0}, at=during, file=f"file:{kept}")
    assert f.evidence(ctx).fired is False  # the delete did not take effect: the file is there
    gone = kept.with_name("2.changelog")
    fire(ctx, "native.cleanup.delete", "delay(200)", {"batch": 1, "partition": 0}, at=1.0, file=f"file:{gone}")
    assert f.evidence(ctx).fired is False  # deleted, but long before any attempt ran
    fire(ctx, "native.cleanup.delete", "delay(200)", {"batch": 1, "partition": 0}, at=during, file=f"file:{gone}")
    ev = f.evidence(ctx)
    assert ev.fired is True and ev.proof[1]["attempt"]["batch"] == t.batch and "2.changelog" in ev.detail, ev
    shutil.rmtree(ctx.run.events)
    assert f.evidence(ctx).fired is None  # no event log: cannot tell who was alive
    f.heal(ctx)
    assert "native.cleanup.delete" not in ctx.control.read()["points"]


def test_native_holds_a_task_at_its_changelog_close_until_a_delete_took_effect(tmp_path: Path) -> None:
    """The race is arranged, not hoped for: the task of partition 0 of batch 3 is held at its changelog
    close, after the other faults' terms on that point, and released only once a delete fired after
    the hold began and its file is gone."""
    ctx = context(tmp_path, format="native-v2")
    ctx.control.arm("native.changelog.upload=[batch=4,partition=0]1*delay(3000)")  # a slow-attempt companion
    f = fault("cleanup-race")
    f.inject(ctx)
    assert (
        ctx.control.read()["points"]["native.changelog.upload"] == "[batch=4,partition=0]1*delay(3000)->[batch=3,partition=0]1*hold(60000)"
    )
    native = f.native  # type: ignore[attr-defined]
    state = tmp_path / "state" / "0" / "1"
    state.mkdir(parents=True)
    kept, gone = state / "2.zip", state / "1.changelog"
    kept.write_bytes(b"zip")
    fire(ctx, "native.changelog.upload", "hold(60000)", {"batch": 3, "partition": 0}, at=100.0, file=f"file:{state}/4.changelog")
    fire(ctx, "native.cleanup.delete", "delay(200)", {"batch": 0, "partition": 1}, at=99.0, file=f"file:{gone}")
    fire(ctx, "native.cleanup.delete", "delay(200)", {"batch": 1, "partition": 1}, at=101.0, file=f"file:{kept}")
    assert native._delete_since(ctx, 100.0) is None  # one before the hold began, one whose file is still there
    assert "native.changelog.upload" not in ctx.control.read().get("released", {})
    fire(ctx, "native.cleanup.delete", "delay(200)", {"batch": 0, "partition": 1}, at=102.0, file=f"file:{gone}")
    assert ctx.wait(lambda: ctx.control.read().get("released", {}).get("native.changelog.upload"), timeout_s=30) == 1
    f.heal(ctx)
    assert ctx.control.read()["points"]["native.changelog.upload"] == "[batch=4,partition=0]1*delay(3000)"  # the companion's term stays
    assert ctx.control.read()["released"]["native.changelog.upload"] == 1  # released once, not again at heal


def test_native_is_unknown_when_the_hold_ran_out_with_nothing_deleted(tmp_path: Path) -> None:
    ctx = context(tmp_path, format="native-v2")
    f = fault("cleanup-race", hold_ms=1000)
    f.inject(ctx)
    fire(ctx, "native.changelog.upload", "hold(1000)", {"batch": 3, "partition": 0})
    assert f.evidence(ctx).fired is False  # held, and not over yet: nothing deleted so far
    fire(ctx, "native.changelog.upload", "hold-timeout", {"batch": 3, "partition": 0}, held_s=1.0)
    ev = f.evidence(ctx)
    assert ev.fired is None and "deleted no state file" in ev.detail, ev
    f.heal(ctx)
    with pytest.raises(UsageError, match="hold_ms"):
        fault("cleanup-race", hold_ms=600_001)
