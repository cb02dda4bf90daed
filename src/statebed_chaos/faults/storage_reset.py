"""`storage-reset`: connections to S3 are aborted with a TCP RST after `timeout` ms, 0: at once (params: timeout, stream, toxicity)."""

from __future__ import annotations

from typing import Any, ClassVar

from .toxic_fault import ToxicFault, failed

__all__ = ["FAULT"]


class StorageReset(ToxicFault):
    kind = "storage-reset"
    description = "connections to S3 are aborted with a TCP RST after timeout ms, 0: at once (params: timeout, stream, toxicity)"
    toxic_type = "reset_peer"
    defaults: ClassVar[dict[str, int]] = {"timeout": 0}

    def acted_on(self, req: dict[str, Any], healed: float | None) -> bool:
        """Cut: the connection was reset under it, so it failed or urllib3 sent it again."""
        return failed(req)


FAULT = StorageReset
