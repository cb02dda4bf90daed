"""`storage-jitter`: every chunk is delayed by `latency` +- `jitter` ms, drawn per chunk (params: latency, jitter, stream, toxicity)."""

from __future__ import annotations

from typing import Any, ClassVar

from .toxic_fault import ToxicFault, duration_ms

__all__ = ["FAULT"]


class StorageJitter(ToxicFault):
    kind = "storage-jitter"
    description = "every chunk is delayed by latency +- jitter ms, drawn per chunk (params: latency, jitter, stream, toxicity)"
    toxic_type = "latency"
    defaults: ClassVar[dict[str, int]] = {"latency": 100, "jitter": 100}

    def acted_on(self, req: dict[str, Any], healed: float | None) -> bool:
        """Delayed by at least the mean latency: half of the draws are, and a request waits for many chunks."""
        return duration_ms(req) >= self.attributes()["latency"]


FAULT = StorageJitter
