"""`storage-jitter`: every chunk is delayed by `latency` +- `jitter` ms, drawn per chunk (params: latency, jitter, stream, toxicity)."""

from __future__ import annotations

from typing import ClassVar

from .toxic_fault import ToxicFault

__all__ = ["FAULT"]


class StorageJitter(ToxicFault):
    kind = "storage-jitter"
    description = "every chunk is delayed by latency +- jitter ms, drawn per chunk (params: latency, jitter, stream, toxicity)"
    toxic_type = "latency"
    defaults: ClassVar[dict[str, int]] = {"latency": 100, "jitter": 100}


FAULT = StorageJitter
