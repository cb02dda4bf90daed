"""`storage-bandwidth`: traffic between the store and S3 is throttled to `rate` KB/s (params: rate, stream, toxicity)."""

from __future__ import annotations

from typing import Any, ClassVar

from .toxic_fault import ToxicFault, duration_ms

__all__ = ["FAULT"]


class StorageBandwidth(ToxicFault):
    kind = "storage-bandwidth"
    description = "traffic between the store and S3 is throttled to rate KB/s (params: rate, stream, toxicity)"
    toxic_type = "bandwidth"
    defaults: ClassVar[dict[str, int]] = {"rate": 64}

    def acted_on(self, req: dict[str, Any], healed: float | None) -> bool:
        """Throttled: a body big enough to take 50 ms at `rate` KB/s took at least 80 % of that."""
        size = req.get("bytes")
        if not isinstance(size, int) or size <= 0:
            return False
        expected_ms = size / (self.attributes()["rate"] * 1024) * 1000.0
        return expected_ms >= 50.0 and duration_ms(req) >= 0.8 * expected_ms


FAULT = StorageBandwidth
