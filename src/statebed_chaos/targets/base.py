"""What a chaos fault acts on: the processes of a run, behind one interface.

A `Target` is one process as it was found: kind, name, host, PID and the identity that
pins it (start time and command line, both required). `Targets` finds them and signals them;
every signal goes through an identity check, so a target that exited (its PID possibly
reused), or whose command line was never recorded, is refused with `IdentityMismatch`,
never hit by mistake. `LocalTargets` serves processes on
this machine; a Kubernetes implementation (pods) will serve the same calls.
"""

from __future__ import annotations

import signal
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from statebed_base.processes import ProcessIdentity

__all__ = ["KINDS", "Target", "Targets"]

# driver: the Python driver; driver-jvm: its Spark JVM (local mode runs the tasks there);
# master/worker: standalone daemons; executor: executor JVMs; python-worker: pyspark.daemon
# and the workers it forks; s3, proxy: servers registered by whoever started them.
KINDS = ("driver", "driver-jvm", "master", "worker", "executor", "python-worker", "s3", "proxy")


@dataclass(frozen=True)
class Target:
    kind: str
    name: str
    host: str
    identity: ProcessIdentity
    attrs: dict[str, str] = field(default_factory=dict, compare=False, hash=False)  # e.g. executor_id, role

    @property
    def pid(self) -> int:
        return self.identity.pid

    def matches(self, filters: dict[str, Any]) -> bool:
        """Every filter equals a field (name, host, pid) or an attribute, compared as text."""
        fields = {"name": self.name, "host": self.host, "pid": str(self.pid), **self.attrs}
        return all(fields.get(k) == str(v) for k, v in filters.items())

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "host": self.host, **self.identity.to_json(), "attrs": dict(self.attrs)}


class Targets(ABC):
    """Find the processes of a run and act on them; the only door chaos faults use."""

    @abstractmethod
    def find(self, kind: str, **filters: Any) -> list[Target]:
        """Live targets of `kind` matching `filters` (e.g. host="127.0.0.2", executor_id="1")."""

    @abstractmethod
    def kill(self, target: Target, sig: int = signal.SIGKILL) -> None:
        """Send `sig`; raises IdentityMismatch when the target is gone or its identity was not pinned."""

    @abstractmethod
    def alive(self, target: Target) -> bool:
        """The very process found is still running (same start time and command line)."""

    def pause(self, target: Target) -> None:
        self.kill(target, signal.SIGSTOP)

    def resume(self, target: Target) -> None:
        self.kill(target, signal.SIGCONT)
