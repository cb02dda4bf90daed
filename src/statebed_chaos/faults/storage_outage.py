"""`storage-outage`: S3 stops answering for the fault's duration.

A `timeout` toxic with timeout 0, not a disabled proxy: a disabled proxy refuses connections at
once (the client fails fast with "connection refused", which is a different fault), while an
outage leaves requests hanging until the client's own timeouts fire, as a partitioned or
overloaded S3 does. It also keeps one mechanism (a toxic) for every storage fault, so the
proxy's record proves it acted on a request, and removing the toxic closes what it held.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .toxic_fault import ToxicFault, failed

__all__ = ["FAULT"]


class StorageOutage(ToxicFault):
    kind = "storage-outage"
    description = (
        "S3 stops answering: nothing passes until the fault heals, then the held connections close (params: timeout, stream, toxicity)"
    )
    toxic_type = "timeout"
    defaults: ClassVar[dict[str, int]] = {"timeout": 0}

    def acted_on(self, req: dict[str, Any], healed: float | None) -> bool:
        """Held: it failed, was sent again, or waited until the toxic went (outside the window: failed only)."""
        return failed(req) or (healed is not None and float(req["end"]) >= healed - 0.05)


FAULT = StorageOutage
