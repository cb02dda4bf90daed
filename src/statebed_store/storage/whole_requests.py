"""HTTP connections that send a request with a small body in one write: headers and body together.

urllib3 sends a request's headers and then its body in separate writes, so the network can
deliver the one and delay the other. MinIO takes a key's lock when a conditional PUT's
headers arrive (`If-None-Match: *`) and holds it until the body has come: a create-only PUT
whose body is late holds every other PUT of that key, its own hedge included
(tests/store/storage/test_hedge.py). A body up to `WHOLE_BYTES` is therefore joined to its
headers and sent with one `sendall`: a segment arrives whole or not at all, and a delay holds the
whole request, which the server has not yet seen. Larger bodies are sent as urllib3 sends them.
"""

from __future__ import annotations

from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection

__all__ = ["WHOLE_BYTES", "whole_request_pools"]

WHOLE_BYTES = 64 * 1024  # a commit-log entry, a sidecar, a changelog of a small batch


class _Whole:
    """Mixin: while a small-bodied request is being written, `send` collects; then one write."""

    _held: list[bytes] | None = None

    def request(self, method: str, url: str, body: Any = None, headers: Any = None, **kw: Any) -> None:
        if not isinstance(body, bytes | bytearray | memoryview) or len(body) > WHOLE_BYTES:
            super().request(method, url, body=body, headers=headers, **kw)  # type: ignore[misc]
            return
        self._held = []
        try:
            super().request(method, url, body=body, headers=headers, **kw)  # type: ignore[misc]
            whole = b"".join(self._held)
        finally:
            self._held = None
        super().send(whole)  # type: ignore[misc]

    def send(self, data: Any) -> None:
        if self._held is not None:
            self._held.append(bytes(data))
            return
        super().send(data)  # type: ignore[misc]


class WholeHTTPConnection(_Whole, HTTPConnection):
    pass


class WholeHTTPSConnection(_Whole, HTTPSConnection):
    pass


class _HTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = WholeHTTPConnection


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = WholeHTTPSConnection


def whole_request_pools(manager: urllib3.PoolManager) -> urllib3.PoolManager:
    """`manager`, its pools making connections that send small requests whole."""
    manager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
    return manager
