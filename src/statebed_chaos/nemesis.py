"""The nemesis: injects an experiment's faults into a running job, Jepsen-style.

`prepare` of every fault runs before the driver starts. Then one thread per fault waits for
its trigger (Spark started or committed the batch), sleeps `after_s`, injects and records a
history op (`fault`, phase `inject`, ok / fail), and heals after `for_s`. `finish` stops the
waits, heals every fault (idempotent; also after an error or Ctrl-C) and collects each
fault's evidence. A fault whose trigger never came is recorded as a `fail` op: it did not fire.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from statebed_base.errors import StatebedError

from .faults import Evidence, Fault, FaultContext, FaultSpec

__all__ = ["Nemesis", "Scheduled"]

JOIN_TIMEOUT_S = 30.0  # an inject that hangs longer is abandoned (its heal still runs)


@dataclass
class Scheduled:
    spec: FaultSpec
    fault: Fault
    injected: bool = False
    healed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Nemesis:
    def __init__(self, ctx: FaultContext, faults: list[tuple[FaultSpec, Fault]], progress: Callable[[str], None] = lambda _: None) -> None:
        self.ctx = ctx
        self.items = [Scheduled(s, f) for s, f in faults]
        self.progress = progress
        self.threads: list[threading.Thread] = []

    def prepare(self) -> None:
        """Before the driver starts; a fault that cannot prepare is a harness error (raises)."""
        for it in self.items:
            it.fault.prepare(self.ctx)

    def start(self) -> None:
        for it in self.items:
            t = threading.Thread(target=self._run, args=(it,), name=f"nemesis-{it.spec.id}", daemon=True)
            t.start()
            self.threads.append(t)

    def restarts_driver(self) -> bool:
        return any(it.fault.restarts_driver for it in self.items)

    def before_resume(self) -> None:
        """The driver died and the runner is about to restart it: each injected fault's
        `before_resume` (after its inject finished), recorded as a `resume` phase op when it acted."""
        for it in self.items:
            with it.lock:
                if it.injected:
                    self._act(it, "resume", it.fault.before_resume, record_none=False)

    def _run(self, it: Scheduled) -> None:
        at = it.spec.at
        reached = self.ctx.wait(
            lambda: self.ctx.batch_committed(at.batch) if at.on_commit else self.ctx.batch_started(at.batch), timeout_s=float("inf")
        )
        if not reached or self.ctx.stop.wait(at.after_s):
            self._op(
                it,
                "inject",
                "fail",
                time.time(),
                reason=f"trigger not reached (batch {at.batch} {'committed' if at.on_commit else 'started'})",
            )
            return
        with it.lock:
            if self.ctx.stop.is_set():
                return
            it.injected = self._act(it, "inject", it.fault.inject)
            if not it.injected:
                return
        if it.spec.for_s is not None:
            self.ctx.stop.wait(it.spec.for_s)
            self._heal(it)

    def _heal(self, it: Scheduled) -> None:
        with it.lock:
            if not it.injected or it.healed:
                return
            it.healed = self._act(it, "heal", it.fault.heal)

    def _act(self, it: Scheduled, phase: str, call: Callable[[FaultContext], Any], *, record_none: bool = True) -> bool:
        """Call one phase of a fault and record it as a history op: "fail" with the error when it
        raised, else "ok" (with the facts it returned; a None result unrecorded unless `record_none`)."""
        start = time.time()
        try:
            facts = call(self.ctx)
        except Exception as e:
            self._op(it, phase, "fail", start, error=f"{type(e).__name__}: {e}")
            return False
        if phase in ("inject", "heal"):  # here, so the window is marked before the op is recorded
            self._mark_active(it, phase == "inject")
        if facts is not None:
            self._op(it, phase, "ok", start, facts=facts)
        elif record_none:
            self._op(it, phase, "ok", start)
        return True

    def _mark_active(self, it: Scheduled, active: bool) -> None:
        """The fault's window in the control file, which the driver's /metrics shows; the history
        stays the record, so a failed write is only reported."""
        try:
            self.ctx.control.mark_active(it.spec.id, it.spec.kind, active)
        except (OSError, StatebedError) as e:
            self.progress(f"fault {it.spec.id}: cannot mark it {'active' if active else 'healed'} for /metrics ({e})")

    def _op(self, it: Scheduled, phase: str, outcome: Any, start: float, **fields: Any) -> None:
        self.ctx.history.record("fault", outcome, start, id=it.spec.id, kind=it.spec.kind, phase=phase, **fields)
        self.progress(
            f"fault {it.spec.id} {it.spec.kind}: {phase} {outcome}"
            + (f" ({fields.get('reason') or fields.get('error')})" if outcome != "ok" else "")
        )

    def stop(self) -> None:
        """Stop waiting, heal everything injected (also faults never injected get `heal`: idempotent)."""
        self.ctx.stop.set()
        for t in self.threads:
            t.join(JOIN_TIMEOUT_S)
        for it in self.items:
            self._heal(it)
            if not it.injected:
                try:  # undo what prepare armed (a failpoint that never triggered)
                    it.fault.heal(self.ctx)
                except Exception:  # nothing was injected: nothing to report
                    pass

    def evidence(self) -> list[dict[str, Any]]:
        """Each fault's evidence, from the run's own records; a crashing `evidence` is `fired: None`."""
        out = []
        for it in self.items:
            try:
                ev = it.fault.evidence(self.ctx)
            except Exception as e:
                ev = Evidence(None, f"evidence could not be read: {type(e).__name__}: {e}")
            out.append({"id": it.spec.id, "kind": it.spec.kind, "at": it.spec.at.to_json(), **ev.to_json()})
        return out
