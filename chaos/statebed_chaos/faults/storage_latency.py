"""`storage-latency`: every chunk between the store and S3 is delayed by `latency` ms (params: latency, jitter, stream, toxicity)."""

from __future__ import annotations

from typing import ClassVar

from .toxic_fault import ToxicFault

__all__ = ["FAULT"]


class StorageLatency(ToxicFault):
    kind = "storage-latency"
    description = "every chunk between the store and S3 is delayed by latency ms (params: latency, jitter, stream, toxicity)"
    toxic_type = "latency"
    defaults: ClassVar[dict[str, int]] = {"latency": 200, "jitter": 0}


FAULT = StorageLatency
