"""The nemesis marks each fault's window (inject to heal) in the control file, which the
driver's /metrics exports as `statebed_faults_active` (tests/job/test_driver_metrics.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from test_process_faults import context

from statebed_chaos.faults import Evidence, Fault, FaultContext, FaultSpec, Trigger
from statebed_chaos.nemesis import Nemesis


class Quiet(Fault):
    """A fault that does nothing, so only the nemesis's own bookkeeping is under test."""

    kind: ClassVar[str] = "test-quiet"
    description: ClassVar[str] = "test"

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        return {"did": "nothing"}

    def evidence(self, ctx: FaultContext) -> Evidence:
        return Evidence(None, "test")


def test_a_fault_is_active_from_inject_until_heal(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    (ctx.spark_checkpoint / "offsets").mkdir(parents=True)
    (ctx.spark_checkpoint / "offsets" / "1").write_text("planned")  # the trigger: batch 1 started
    spec = FaultSpec("f1", "test-quiet", Trigger(1), for_s=3600.0)  # healed only by stop
    nemesis = Nemesis(ctx, [(spec, Quiet(spec))])
    nemesis.start()
    try:
        injected = ctx.wait(lambda: [op for op in ctx.history.ops("fault") if op.fields.get("phase") == "inject"], timeout_s=60)
        assert injected and injected[0].outcome == "ok"
        assert ctx.control.active() == {"f1": "test-quiet"}
    finally:
        nemesis.stop()
    assert ctx.control.active() == {}
    assert [op.fields["phase"] for op in ctx.history.ops("fault")] == ["inject", "heal"]


def test_a_fault_whose_trigger_never_came_was_never_active(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    spec = FaultSpec("f1", "test-quiet", Trigger(5), for_s=1.0)
    nemesis = Nemesis(ctx, [(spec, Quiet(spec))])
    nemesis.start()
    nemesis.stop()
    assert ctx.control.active() == {}
    assert [(op.fields["phase"], op.outcome) for op in ctx.history.ops("fault")] == [("inject", "fail")]
