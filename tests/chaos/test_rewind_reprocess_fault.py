"""The rewind-reprocess fault without Spark: its params and where it applies, the failpoints it
arms, the nemesis's resume hook, and its evidence read from a hand-made history, rewind journal
and firing records (the real runs are `examples/experiments/rewind-reprocess-sample3-v*.yaml`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_process_faults import context, fault, fire, injected

from statebed_base.errors import UsageError
from statebed_chaos.faults import Evidence, Fault, FaultContext, FaultSpec, NotApplicable, Trigger
from statebed_chaos.nemesis import Nemesis
from statebed_model.rewind_journal import new_journal
from statebed_store.formats import get_format

ABANDONED = ["spark-checkpoint/commits/4", "spark-checkpoint/offsets/4", "spark-checkpoint/commits/3", "spark-checkpoint/offsets/3"]


def rewind_by_hand(root: Path) -> None:
    """What `before_resume` leaves: batches 3 and 4 of the logs moved into a done journal's backup."""
    for rel in ABANDONED:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("abandoned")
    new_journal(root, 2, 4, [(p, p) for p in ABANDONED]).run_forward()


def test_params_and_where_the_fault_applies() -> None:
    f = fault("rewind-reprocess", batch=4)
    assert f.to_batch == 2 and f.restarts_driver  # type: ignore[attr-defined]
    assert fault("rewind-reprocess", batch=1).to_batch == 0  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="to_batch must be below the trigger batch 4"):
        fault("rewind-reprocess", batch=4, to_batch=4)
    with pytest.raises(UsageError, match="drop_snapshots must be true or false"):
        fault("rewind-reprocess", drop_snapshots="yes")
    f.check(get_format("v1"), "standalone", "local")
    f.check(get_format("native"), "local", "local")  # native: no failpoints, nothing to retry
    with pytest.raises(NotApplicable, match="standalone"):
        f.check(get_format("v2"), "local", "local")
    fault("rewind-reprocess", batch=4, diverge=False).check(get_format("v2"), "local", "local")
    with pytest.raises(NotApplicable, match="storage: local"):
        f.check(get_format("v2"), "standalone", "s3")
    with pytest.raises(NotApplicable, match="native runs set both false"):
        fault("rewind-reprocess", batch=4, drop_snapshots=True).check(get_format("native"), "standalone", "local")


def test_diverge_is_armed_before_the_first_driver_and_disarmed_by_heal(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = fault("rewind-reprocess", batch=4)
    f.prepare(ctx)
    assert ctx.control.read()["points"] == {"task.load.after": "[batch=3,partition=0,attempt=0]1*error"}
    f.heal(ctx)
    assert ctx.control.read()["points"] == {}
    fault("rewind-reprocess", batch=4).prepare(native := context(tmp_path / "n", format="native"))
    assert not native.control.path.exists()  # native: nothing armed


def test_evidence_needs_kill_rewind_recommit_firings_and_a_restarted_driver(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    f = fault("rewind-reprocess", batch=4)
    assert f.evidence(ctx).fired is False  # never injected
    injected(ctx, f, {"signal": "SIGKILL", "to_batch": 2})
    ev = f.evidence(ctx)
    assert ev.fired is False and "no finished rewind to batch 2" in ev.detail
    rewind_by_hand(ctx.run.root)
    ev = f.evidence(ctx)
    assert ev.fired is False and "batch 3 was not committed again" in ev.detail
    (ctx.run.root / "spark-checkpoint/commits/3").write_text("reprocessed")
    ev = f.evidence(ctx)
    assert ev.fired is False and "task.load.after never fired error" in ev.detail
    fire(ctx, "task.load.after", "error", {"batch": 3, "partition": 0, "attempt": 1})  # not the diverging attempt
    assert "task.load.after never fired" in f.evidence(ctx).detail
    fire(ctx, "task.load.after", "error", {"batch": 3, "partition": 0, "attempt": 0})
    ev = f.evidence(ctx)
    assert ev.fired is False and "snapshot.upload.before never fired drop" in ev.detail
    fire(ctx, "snapshot.upload.before", "drop", {"batch": 3, "partition": 1, "attempt": 0})
    ev = f.evidence(ctx)
    assert ev.fired is None and "no driver ops" in ev.detail
    t = time.time()
    ctx.history.record("driver", "info", t - 5, t + 1, pid=100, exit_code=-9)
    ctx.history.record("driver", "ok", t + 2, t + 30, pid=101, exit_code=0)
    ev = f.evidence(ctx)
    assert ev.fired is True and "rewound to batch 2 (4 file(s) moved" in ev.detail and "pid 101" in ev.detail
    rewind = next(p["rewind"] for p in ev.proof if "rewind" in p)
    assert rewind["status"] == "done" and [m["from"] for m in rewind["moves"]] == ABANDONED


def test_native_evidence_needs_no_firings(tmp_path: Path) -> None:
    ctx = context(tmp_path, format="native")
    f = fault("rewind-reprocess", batch=4)
    injected(ctx, f, {"signal": "SIGKILL"})
    rewind_by_hand(ctx.run.root)
    (ctx.run.root / "spark-checkpoint/commits/3").write_text("reprocessed")
    t = time.time()
    ctx.history.record("driver", "info", t - 5, t + 1, pid=100, exit_code=-9)
    ctx.history.record("driver", "ok", t + 2, t + 30, pid=101, exit_code=0)
    assert f.evidence(ctx).fired is True


class Rewinds(Fault):
    """A driver-killing fault whose resume step reports what it did."""

    kind: ClassVar[str] = "test-rewinds"
    description: ClassVar[str] = "test"

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        return {}

    def before_resume(self, ctx: FaultContext) -> dict[str, Any] | None:
        return {"rewound": self.spec.id}

    def evidence(self, ctx: FaultContext) -> Evidence:
        return Evidence(None, "test")


def test_the_nemesis_runs_before_resume_of_injected_faults_only(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    specs = [FaultSpec(i, "test-rewinds", Trigger(1)) for i in ("f1", "f2")]
    nemesis = Nemesis(ctx, [(s, Rewinds(s)) for s in specs])
    nemesis.items[0].injected = True
    nemesis.before_resume()
    ops = [op for op in ctx.history.ops("fault") if op.fields.get("phase") == "resume"]
    assert [(op.fields["id"], op.outcome, op.fields["facts"]) for op in ops] == [("f1", "ok", {"rewound": "f1"})]
