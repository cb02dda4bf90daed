"""`storage-latency`: every chunk between the store and S3 is delayed by `latency` ms (params: latency, jitter, stream, toxicity)."""

from __future__ import annotations

from typing import Any, ClassVar

from .toxic_fault import ToxicFault, duration_ms

__all__ = ["FAULT"]


class StorageLatency(ToxicFault):
    kind = "storage-latency"
    description = "every chunk between the store and S3 is delayed by latency ms (params: latency, jitter, stream, toxicity)"
    toxic_type = "latency"
    defaults: ClassVar[dict[str, int]] = {"latency": 200, "jitter": 0}

    def acted_on(self, req: dict[str, Any], healed: float | None) -> bool:
        """Delayed: every chunk waits `latency` ms (minus the jitter), so the whole request takes at least that."""
        a = self.attributes()
        return duration_ms(req) >= max(a["latency"] - a["jitter"], a["latency"] / 2)


FAULT = StorageLatency
