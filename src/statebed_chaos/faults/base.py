"""What every fault is: a spec from the experiment file, and a class that injects it, heals it
and proves afterwards, from the run's own records, that it fired.

A fault counts only if it provably fired (Flink's and Kafka Streams' tests assert the
injected failures happened, Jepsen records every nemesis op): `evidence` reads Spark's event
log, the failpoint firing logs, the history and the S3 request logs, never the fault object's
own belief. An experiment whose scheduled fault has no evidence is `unknown`, never `valid`.

Lifecycle, driven by the nemesis (`statebed_chaos.nemesis`):

    prepare(ctx)   before the driver starts (arm failpoints that must be armed from the start)
    inject(ctx)    when the trigger is reached (the fault's `at`); returns facts for the history
    heal(ctx)      after `for_s`, at the end of the run, or on error (must be idempotent)
    before_resume(ctx)  a driver-killing fault, after the death, before the runner's --resume
    evidence(ctx)  after the run: did it fire, with what proof
"""

from __future__ import annotations

import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from statebed_model.eventlog import EventLog, read_event_log
from statebed_model.rundir import RunDir
from statebed_store import Storage, open_storage
from statebed_store.failpoint_control import Control
from statebed_store.formats import FORMATS, Format
from statebed_store.naming import OFFSETS_DIR, commit_path
from statebed_verify.history import History

from ..targets.base import Targets

__all__ = ["Evidence", "Fault", "FaultContext", "FaultSpec", "NotApplicable", "Trigger"]

T = TypeVar("T")


class NotApplicable(Exception):
    """The fault cannot run in this configuration (e.g. a failpoint fault on native Spark)."""


@dataclass(frozen=True)
class Trigger:
    """When to inject: once batch `batch` has started (Spark wrote offsets/<batch>), after `after_s`.

    `on_commit`: wait for the batch's commit (commits/<batch>) instead of its start."""

    batch: int = 1
    after_s: float = 0.0
    on_commit: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "after_s": self.after_s, "on_commit": self.on_commit}


@dataclass(frozen=True)
class FaultSpec:
    """One scheduled fault as the experiment file gives it (after the schedule is realised)."""

    id: str  # unique in the experiment: "f1", "f2", ...
    kind: str  # "kill-executor", ...
    at: Trigger = field(default_factory=Trigger)
    for_s: float | None = None  # duration faults (pause, storage toxics): heal after this many seconds
    params: dict[str, Any] = field(default_factory=dict)  # kind-specific (e.g. {"partition": 1, "step": "after-commit-log"})

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "at": self.at.to_json(), "for_s": self.for_s, "params": dict(self.params)}


@dataclass
class Evidence:
    """Whether a fault fired, and the proof (each item one fact a reader can check in the run)."""

    fired: bool | None  # None: could not tell (missing records) -> the run is unknown
    detail: str
    proof: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"fired": self.fired, "detail": self.detail, "proof": self.proof}


@dataclass
class FaultContext:
    """What a fault acts through and reads from; one per faulted run, shared by its faults."""

    run: RunDir  # the faulted run's directory (local)
    format: Format  # the run's format (statebed_store.formats), parsed where the run is described
    cluster: str  # "local" or "standalone"
    targets: Targets
    control: Control  # the run's runtime failpoints (<run>/failpoints/control.json)
    history: History
    proxy: Any = None  # a toxiproxy-python `Proxy` in front of S3, or None (local storage)
    seed: int = 0
    stop: threading.Event = field(default_factory=threading.Event)  # set when the run is over: waits give up
    poll_s: float = 0.05
    query: Storage | None = None  # Spark's query checkpoint when not `spark-checkpoint/` here (`query_storage`)

    def rng(self, fault_id: str) -> random.Random:
        """A fault's own random choices (which executor, which partition): from the seed and its id."""
        return random.Random(f"{self.seed}:{fault_id}")

    @property
    def spark_checkpoint(self) -> Path:
        return self.run.spark_checkpoint

    def query_storage(self) -> Storage:
        """Spark's query checkpoint: `spark-checkpoint/` here, or a native run's bucket (read past the proxy)."""
        if self.query is not None:
            return self.query
        if not self.run.exists():  # not described yet (or a bare directory): Spark's checkpoint can only be here
            return open_storage(self.spark_checkpoint)
        self.query = self.run.query_storage(self.run.read_info())  # run.json names it once the run is described
        return self.query

    def batch_started(self, batch: int) -> bool:
        """Spark wrote offsets/<batch>: the micro-batch is planned, its tasks follow."""
        return self.query_storage().exists(f"{OFFSETS_DIR}/{batch}")

    def batch_committed(self, batch: int) -> bool:
        """Spark wrote commits/<batch> (its own commit, the last step of a batch)."""
        return self.query_storage().exists(commit_path(batch))

    def wait(self, cond: Callable[[], T | None], timeout_s: float) -> T | None:
        """Poll `cond` until it returns something truthy, the run stops, or `timeout_s`: None then."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = cond()
            if value:
                return value
            if self.stop.is_set() or time.monotonic() >= deadline:
                return None
            self.stop.wait(self.poll_s)

    def event_log(self) -> EventLog:
        return read_event_log(self.run.events)

    def firings(self, failpoint: str | None = None) -> list[dict[str, Any]]:
        """Every failpoint firing recorded by the run's processes (of `failpoint`, if named), oldest first."""
        return [r for r in self.control.firings() if failpoint in (None, r.get("failpoint"))]


class Fault(ABC):
    """One fault kind. Subclasses set `kind`, `formats`, `needs` and implement the four steps."""

    kind: ClassVar[str]
    description: ClassVar[str]
    formats: ClassVar[frozenset[Format]] = frozenset(FORMATS.values())  # formats it applies to
    needs: ClassVar[frozenset[str]] = frozenset()  # "standalone" (speculation), "s3-proxy" (network faults)
    restarts_driver: bool = False  # the driver is expected to die: the runner restarts it with --resume (a kind, or one fault's params)
    # Spark settings a run needs for this fault to be provable; its baseline runs with them too.
    spark_conf: ClassVar[dict[str, str]] = {}

    def __init__(self, spec: FaultSpec) -> None:
        self.spec = spec

    def run_conf(self, format: Format) -> dict[str, str]:
        """Spark settings this fault's params need in a `mode` run (its baseline too), beyond `spark_conf`. Default: none."""
        return {}

    def check(self, format: Format, cluster: str, storage: str) -> None:
        """Raise NotApplicable (one line, naming the reason) when this fault cannot run here (kinds
        extend it with their own reasons)."""
        if format not in self.formats:
            raise NotApplicable(f"{self.kind} does not apply to {format} runs (only {', '.join(sorted(self.formats))})")
        if "standalone" in self.needs and cluster != "standalone":
            raise NotApplicable(f"{self.kind} needs cluster: standalone (executors on separate hosts)")
        if "s3-proxy" in self.needs and storage != "s3":
            raise NotApplicable(f"{self.kind} needs storage: s3 (through the proxy)")

    def prepare(self, ctx: FaultContext) -> None:  # noqa: B027  (optional step)
        """Before the driver starts. Default: nothing."""

    @abstractmethod
    def inject(self, ctx: FaultContext) -> dict[str, Any]:
        """Inject now (the trigger was reached); return facts for the history (pids, executor, ...)."""

    def heal(self, ctx: FaultContext) -> None:  # noqa: B027  (optional step)
        """Undo what inject did (resume, remove toxics, disarm). Idempotent. Default: nothing."""

    def before_resume(self, ctx: FaultContext) -> dict[str, Any] | None:
        """After the driver this fault killed is gone (its processes stopped), before the runner
        restarts it with --resume: change the checkpoint (e.g. rewind it). Facts for the history,
        or None: nothing done. Default: nothing."""
        return None

    @abstractmethod
    def evidence(self, ctx: FaultContext) -> Evidence:
        """After the run: did it fire, proven from the run's records."""
