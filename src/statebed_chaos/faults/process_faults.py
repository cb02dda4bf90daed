"""What the process faults share: which executor or Python worker runs a state task of a
batch, signalling a JVM together with its Python workers (every signal identity-checked by
`targets`), failpoint terms that compose with other faults' terms on the same point, and
reading back what the nemesis recorded of an injection.
"""

from __future__ import annotations

import importlib
import signal
import time
from typing import Any

from statebed_base.errors import CheckpointFileError, StatebedError
from statebed_model.attempts import AttemptRecord, read_attempts
from statebed_model.eventlog import EventLog
from statebed_store.failpoint_control import Control, firing_process
from statebed_store.failpoints import parse_spec
from statebed_store.inspection import discover_stores
from statebed_store.naming import parse_state_file

from ..targets import IdentityMismatch, Target
from .base import Evidence, FaultContext, FaultSpec

# The job registers its failpoints (task.*, driver.*) at import: arming them here needs them known.
for _module in ("statebed_job.driver", "statebed_job.task"):
    importlib.import_module(_module)

__all__ = [
    "NoTarget",
    "add_term",
    "brief",
    "choose_executor",
    "event_log_or_none",
    "held_in_plugin",
    "injection",
    "remove_term",
    "running_attempts",
    "sibling_written",
    "signal_tree",
    "signalled_and_logged",
    "task_is",
    "tree_of",
]


class NoTarget(StatebedError):
    """Nothing to inject into: the process the fault aims at is not running."""


def brief(target: Target) -> dict[str, Any]:
    """A target as a history fact: enough to re-identify it, without its long command line."""
    return {"kind": target.kind, "name": target.name, "host": target.host, "pid": target.pid, "start_time": target.identity.start_time}


def running_attempts(ctx: FaultContext, batch: int, partition: int | None = None) -> list[AttemptRecord]:
    """Statebed task attempts of `batch` that have started and not ended (outcome "info")."""
    return [a for a in read_attempts(ctx.run.root) if a.batch == batch and a.outcome == "info" and partition in (None, a.partition)]


def choose_executor(ctx: FaultContext, spec: FaultSpec, wait_s: float, *, straggler: bool = False) -> tuple[Target, dict[str, Any]]:
    """An executor running a state task of the trigger batch (waiting up to `wait_s` for one to
    show in the attempt records, and no longer once Spark committed the batch), else a seeded
    choice among the live executors, made while they are live. `straggler`:
    only a task another partition of the batch has already finished beside, the moment Spark
    can speculate (with no finished task in the stage it launches no copy)."""
    batch = spec.at.batch

    def busy() -> tuple[Target, AttemptRecord] | str | None:
        executors = {e.host: e for e in ctx.targets.find("executor")}
        records = read_attempts(ctx.run.root)
        done = {a.partition for a in records if a.batch == batch and a.outcome == "ok"}
        hits = [a for a in records if a.batch == batch and a.outcome == "info" and a.host in executors]
        hits = sorted((a for a in hits if not straggler or done - {a.partition}), key=lambda a: (a.partition, a.attempt))
        if not hits:
            # Spark committed the batch: none of its tasks will run again. Waiting on would only
            # end with the run, when the executors (alive now) are gone (issue 24 #19).
            return f"batch {batch} was over" if ctx.batch_committed(batch) else None
        a = ctx.rng(spec.id).choice(hits)
        return executors[a.host], a

    if ctx.format.native:  # native runs write no attempt records: the plug-in's records say who is held
        return _held_or_seeded(ctx, spec, wait_s, straggler)
    found = ctx.wait(busy, wait_s) if wait_s > 0 else busy()
    if isinstance(found, tuple):
        target, a = found
        how = "straggler" if straggler else "running-attempt"
        return target, {"chosen_by": how, "batch": a.batch, "partition": a.partition, "attempt": a.attempt}
    return _seeded(ctx, spec, found if isinstance(found, str) else f"no state task of batch {batch} seen running")


def _held_or_seeded(ctx: FaultContext, spec: FaultSpec, wait_s: float, straggler: bool) -> tuple[Target, dict[str, Any]]:
    """Native: the executor held in the plug-in at the trigger batch (waiting up to `wait_s`
    while a plug-in point is armed: else nothing can hold one), else a seeded choice.
    `straggler`: only once another partition's state of the batch is written (see choose_executor)."""
    batch = spec.at.batch
    armed = any(str(p).startswith("native.") for p in ctx.control.read()["points"])

    def held() -> tuple[Target, dict[str, Any]] | str | None:
        found = held_in_plugin(ctx, batch)
        if found and straggler and not sibling_written(ctx, batch, found[1]["task"].get("partition")):
            found = None
        return found or (f"batch {batch} was over" if ctx.batch_committed(batch) else None)

    found = ctx.wait(held, wait_s) if wait_s > 0 and armed else held()
    if isinstance(found, tuple):
        return found[0], {"chosen_by": "plugin-hold", "batch": batch, "firing": found[1]}
    return _seeded(ctx, spec, found if isinstance(found, str) else f"no executor held in the plug-in at batch {batch}")


def _seeded(ctx: FaultContext, spec: FaultSpec, why: str) -> tuple[Target, dict[str, Any]]:
    """A seeded choice among the live executors, made while they are live."""
    executors = sorted(ctx.targets.find("executor"), key=lambda t: t.name)
    if not executors:
        raise NoTarget(f"{spec.kind} {spec.id}: no executor is running")
    return ctx.rng(spec.id).choice(executors), {"chosen_by": "seed", "why": why}


def held_in_plugin(ctx: FaultContext, batch: int) -> tuple[Target, dict[str, Any]] | None:
    """An executor JVM that is, now, inside a `delay` or `hold` of a JVM plug-in point for a state
    file of `batch` (its firing record names the JVM's host, pid and start time; a delay lasts
    its ms, a hold until its end record): the task writing that file is held there (a companion
    such as slow-attempt's native delay makes one). The record is only matched against the
    executors found now (`fired_in`), whose identity `targets` checks again before any signal."""
    executors = ctx.targets.find("executor")
    firings = ctx.firings()
    ended = {(firing_process(f), f.get("hit"), f.get("failpoint")) for f in firings if f.get("action") in ("released", "hold-timeout")}
    now = time.time()
    for f in reversed(firings):
        action, task = str(f.get("action", "")), f.get("task")
        if not (str(f.get("failpoint", "")).startswith("native.") and isinstance(task, dict) and task.get("batch") == batch):
            continue
        target = fired_in(executors, f)
        if target is None:
            continue
        if action.startswith("delay(") and float(f.get("time", 0)) + _ms(action) / 1000 > now:
            return target, f
        if action.startswith("hold(") and (firing_process(f), f.get("hit"), f.get("failpoint")) not in ended:
            return target, f
    return None


def fired_in(targets: list[Target], firing: dict[str, Any]) -> Target | None:
    """The one target a firing record came from: its PID and start time (one process on one kernel),
    and its host where that is not enough (pods, each with its own PID namespace, on one node)."""
    host, pid, started = firing_process(firing)
    found = [t for t in targets if t.pid == pid and (started is None or t.identity.start_time == started)]
    if len(found) > 1:
        found = [t for t in found if t.host == host]
    return found[0] if len(found) == 1 else None


def sibling_written(ctx: FaultContext, batch: int, partition: Any) -> bool:
    """Another partition than `partition` has its state of `batch` (version batch + 1) in
    Spark's checkpoint: its task has closed its changelog, the end of its commit, so Spark
    can speculate the held one (with no finished task in the stage it launches no copy)."""
    storage = ctx.query_storage()
    for store in discover_stores(storage):
        if store.partition != partition and any(
            (name := parse_state_file(f.name)) is not None and name.version == batch + 1 for f in storage.list(store.dir)
        ):
            return True
    return False


def _ms(action: str) -> float:
    """`delay(2000)` -> 2000.0 (0 when the argument is not a number)."""
    try:
        return float(action[action.index("(") + 1 : -1])
    except ValueError:
        return 0.0


def tree_of(ctx: FaultContext, jvm: Target) -> list[Target]:
    """A JVM and its Python workers (daemon and forked workers), found while the JVM is their parent.
    In a pod the JVM's PID repeats in every pod (each has its own PID namespace): the workers must
    also be in the JVM's pod (its uid), or another executor's workers would be signalled."""
    same_pod = {"uid": jvm.attrs["uid"]} if "uid" in jvm.attrs else {}
    return [jvm, *ctx.targets.find("python-worker", jvm_pid=str(jvm.pid), **same_pod)]


def signal_tree(ctx: FaultContext, tree: list[Target], sig: int) -> list[dict[str, Any]]:
    """Send `sig` to the first target (raises IdentityMismatch when it is gone) and then to the
    rest that are still there (a Python worker may exit with its JVM); returns who got it."""
    head, *rest = tree
    ctx.targets.kill(head, sig)
    done = [brief(head)]
    for t in rest:
        try:
            ctx.targets.kill(t, sig)
        except IdentityMismatch:
            continue
        done.append(brief(t))
    return done


def resume_all(ctx: FaultContext, tree: list[Target]) -> list[int]:
    """SIGCONT every target still alive (idempotent: a resumed process ignores it); returns the PIDs."""
    out = []
    for t in tree:
        try:
            ctx.targets.kill(t, signal.SIGCONT)
        except IdentityMismatch:
            continue
        out.append(t.pid)
    return out


def _canonical_term(point: str, term: str) -> str:
    return "->".join(t.describe() for t in parse_spec(f"{point}={term}")[point])


def add_term(control: Control, point: str, term: str) -> str:
    """Arm `term` on `point` after the terms already there (other faults' filtered terms keep
    working: a term whose filter does not match passes to the next); returns it canonical."""
    mine = _canonical_term(point, term)
    current = [t for t in str(control.read()["points"].get(point, "")).split("->") if t and t != mine]
    control.arm(f"{point}={'->'.join([*current, mine])}")
    return mine


def remove_term(control: Control, point: str, term: str) -> None:
    """Disarm one term armed by `add_term`, leaving the point's other terms armed."""
    current = str(control.read()["points"].get(point, ""))
    if not current:
        return
    kept = [t for t in current.split("->") if t != term]
    if len(kept) == len(current.split("->")):
        return
    if kept:
        control.arm(f"{point}={'->'.join(kept)}")
    else:
        control.disarm(point)


def injection(ctx: FaultContext, spec: FaultSpec, phase: str = "inject") -> tuple[str, dict[str, Any]] | None:
    """The nemesis's record of this fault's inject (history op type "fault", its id, `phase`
    "inject", or "resume" for `before_resume`; the facts the step returned): (outcome, facts);
    None when the history has none."""
    ops = [op for op in ctx.history.ops("fault") if op.fields.get("id") == spec.id and op.fields.get("phase", "inject") == phase]
    if not ops:
        return None
    ok = [op for op in ops if op.outcome == "ok"]
    op = (ok or ops)[0]
    facts = op.fields.get("facts")
    return op.outcome, facts if isinstance(facts, dict) else {}


def task_is(task: Any, want: dict[str, int]) -> bool:
    """A firing record's task context has every key of `want` equal."""
    return isinstance(task, dict) and all(task.get(k) == v for k, v in want.items())


def event_log_or_none(ctx: FaultContext) -> EventLog | None:
    """Spark's event log of the run, or None when there is none to read (missing or unreadable)."""
    try:
        return ctx.event_log()
    except CheckpointFileError:
        return None


def signalled_and_logged(ctx: FaultContext, spec: FaultSpec, sig: str, looking_for: str) -> Evidence | tuple[dict[str, Any], EventLog]:
    """What a signal fault proves itself from: the facts of its successful inject and Spark's
    event log. An Evidence instead when either is missing (no signal: not fired; no event log
    to look for `looking_for` in: unknown)."""
    done = injection(ctx, spec)
    if done is None or done[0] != "ok":
        return Evidence(False, f"no {sig} was delivered (the history has no successful inject)")
    log = event_log_or_none(ctx)
    if log is None:
        return Evidence(None, f"{sig} delivered, but there is no event log to look for {looking_for} in", [done[1]])
    return done[1], log
