"""`storage-bandwidth`: traffic between the store and S3 is throttled to `rate` KB/s (params: rate, stream, toxicity)."""

from __future__ import annotations

from typing import ClassVar

from .toxic_fault import ToxicFault

__all__ = ["FAULT"]


class StorageBandwidth(ToxicFault):
    kind = "storage-bandwidth"
    description = "traffic between the store and S3 is throttled to rate KB/s (params: rate, stream, toxicity)"
    toxic_type = "bandwidth"
    defaults: ClassVar[dict[str, int]] = {"rate": 64}


FAULT = StorageBandwidth
