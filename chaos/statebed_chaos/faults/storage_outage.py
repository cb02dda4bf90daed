"""`storage-outage`: S3 stops answering for the fault's duration.

A `timeout` toxic with timeout 0, not a disabled proxy: a disabled proxy refuses connections at
once (the client fails fast with "connection refused", which is a different fault), while an
outage leaves requests hanging until the client's own timeouts fire, as a partitioned or
overloaded S3 does. It also keeps one mechanism (a toxic) for every storage fault, so the
proxy's record proves it acted on a request, and removing the toxic closes what it held.
"""

from __future__ import annotations

from typing import ClassVar

from .toxic_fault import ToxicFault

__all__ = ["FAULT"]


class StorageOutage(ToxicFault):
    kind = "storage-outage"
    description = (
        "S3 stops answering: nothing passes until the fault heals, then the held connections close (params: timeout, stream, toxicity)"
    )
    toxic_type = "timeout"
    defaults: ClassVar[dict[str, int]] = {"timeout": 0}


FAULT = StorageOutage
