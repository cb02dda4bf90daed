"""restart-driver: the driver dies at a chosen step of a batch's protocol; the runner restarts
it with `--resume` and the query continues from the checkpoint.

Statebed modes: `prepare` arms `[batch=B]1*exit(137)` on the driver failpoint of the step;
`inject` (at the trigger) waits for it to fire and disarms it, so that the restarted driver,
which counts afresh, does not die again at the same step. Native mode (`step: at-trigger`,
also usable with statebed): SIGKILL the registered driver and its driver JVM at the trigger.
Proven by the exit failpoint's firing record (statebed) or the delivered kill (native),
then in the history a driver op that exited 137 / -9 followed by a restarted driver.

params: step: after-task-commits | before-commit-log | after-commit-log | before-sink |
before-spark-commit | at-trigger (default: after-task-commits; native: at-trigger);
wait_s (default 300): how long inject waits for the exit failpoint to fire.
"""

from __future__ import annotations

import signal
from typing import Any, ClassVar

from statebed_base.errors import UsageError
from statebed_store.formats import Format
from statebed_verify.history import Op

from .base import Evidence, Fault, FaultContext, FaultSpec, NotApplicable
from .process_faults import NoTarget, add_term, injection, remove_term, signal_tree, task_is

__all__ = ["FAULT", "RestartDriver", "kill_driver", "restarted"]

# step -> the driver failpoint it dies at (after-commit-log and before-sink are one point in this driver)
STEPS = {
    "after-task-commits": "driver.tasks.after",
    "before-commit-log": "commitlog.write.before",
    "after-commit-log": "driver.sink.before",
    "before-sink": "driver.sink.before",
    "before-spark-commit": "driver.batch.end",
    "at-trigger": None,
}
EXIT_CODES = (137, -signal.SIGKILL)  # exit(137) from the failpoint; -9 as Popen reports a SIGKILL


class RestartDriver(Fault):
    kind: ClassVar[str] = "restart-driver"
    description: ClassVar[str] = "kill the driver at a protocol step and restart the query from the checkpoint"
    restarts_driver = True

    def __init__(self, spec: FaultSpec) -> None:
        super().__init__(spec)
        step = spec.params.get("step")
        if step is not None and step not in STEPS:
            raise UsageError(f"fault {spec.id} ({spec.kind}): unknown step {step!r}; known: {', '.join(STEPS)}")
        self.wait_s = float(spec.params.get("wait_s", 300))
        self.term = f"[batch={spec.at.batch}]1*exit(137)"
        self._armed: str | None = None

    def step(self, format: Format) -> str:
        return str(self.spec.params.get("step") or ("at-trigger" if format.native else "after-task-commits"))

    def point(self, format: Format) -> str | None:
        return STEPS[self.step(format)]

    def check(self, format: Format, cluster: str, storage: str) -> None:
        super().check(format, cluster, storage)
        if format.native and self.point(format) is not None:
            raise NotApplicable(f"{self.kind} step {self.step(format)} needs statebed's driver failpoints; native runs use step at-trigger")

    def prepare(self, ctx: FaultContext) -> None:
        point = self.point(ctx.format)
        if point is not None:
            self._armed = add_term(ctx.control, point, self.term)

    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        point = self.point(ctx.format)
        if point is None:
            return self._kill(ctx)
        fired = ctx.wait(lambda: self._firings(ctx, point), self.wait_s)
        self.heal(ctx)  # before the runner's restart reaches the step again
        if not fired:
            raise NoTarget(f"{self.spec.kind} {self.spec.id}: {point} did not fire for batch {self.spec.at.batch} within {self.wait_s:g} s")
        return {"step": self.step(ctx.format), "failpoint": point, "armed": self.term, "pid": fired[0].get("pid")}

    def _kill(self, ctx: FaultContext) -> dict[str, Any]:
        return kill_driver(ctx, self.spec)

    def heal(self, ctx: FaultContext) -> None:
        point = self.point(ctx.format)
        if self._armed is not None and point is not None:
            remove_term(ctx.control, point, self._armed)
            self._armed = None

    def _firings(self, ctx: FaultContext, point: str) -> list[dict[str, Any]]:
        return [
            f
            for f in ctx.firings(point)
            if str(f.get("action", "")).startswith("exit") and task_is(f.get("task"), {"batch": self.spec.at.batch})
        ]

    def evidence(self, ctx: FaultContext) -> Evidence:
        point = self.point(ctx.format)
        if point is None:
            done = injection(ctx, self.spec)
            if done is None or done[0] != "ok":
                return Evidence(False, "no SIGKILL was delivered to the driver (the history has no successful inject)")
            died_after, proof = 0.0, [{"signal": done[1]}]
        else:
            if not ctx.control.path.exists():
                return Evidence(None, f"the run has no failpoint control file ({ctx.control.path}): cannot tell")
            fired = self._firings(ctx, point)
            if not fired:
                return Evidence(False, f"{point} never made the driver exit at batch {self.spec.at.batch}")
            died_after, proof = float(fired[0].get("time", 0)), [{"firing": fired[0]}]
        return restarted(ctx.history.ops("driver"), died_after, proof)


def kill_driver(ctx: FaultContext, spec: FaultSpec) -> dict[str, Any]:
    """SIGKILL the registered driver and its driver JVM now (the facts for the history)."""
    drivers = ctx.targets.find("driver")
    if not drivers:
        raise NoTarget(f"{spec.kind} {spec.id}: no driver is registered")
    tree = [drivers[0], *ctx.targets.find("driver-jvm", driver_pid=str(drivers[0].pid))]  # found while the JVM is its child
    return {"step": "at-trigger", "signal": "SIGKILL", "signalled": signal_tree(ctx, tree, signal.SIGKILL)}


def restarted(drivers: list[Op], died_after: float, proof: list[dict[str, Any]]) -> Evidence:
    """A driver op that exited 137 / -9 after the fault, then a later driver (the restart)."""
    if not drivers:
        return Evidence(None, "the fault went off, but the history has no driver ops to show the driver died and restarted", proof)
    died = [op for op in drivers if op.fields.get("exit_code") in EXIT_CODES and op.end is not None and op.end >= died_after]
    if not died:
        return Evidence(False, "the history shows no driver exiting 137 / -9 after the fault", proof)
    later = [op for op in drivers if op.start >= (died[0].end or 0)]
    proof.append({"driver_died": died[0].to_json()})
    if not later:
        return Evidence(None, "the driver died but the history shows no restarted driver", proof)
    proof.append({"driver_restarted": later[0].to_json()})
    return Evidence(
        True,
        f"driver pid {died[0].fields.get('pid')} exited {died[0].fields.get('exit_code')}; restarted as pid "
        f"{later[0].fields.get('pid')} (exit {later[0].fields.get('exit_code')})",
        proof,
    )


FAULT = RestartDriver
