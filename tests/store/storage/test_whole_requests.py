"""A small-bodied request goes out in one write (headers and body together), a large one as
urllib3 sends it; against a socket that records each write, then end to end against MinIO."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from s3server import ACCESS_KEY, SECRET_KEY, S3Server

from statebed_store import S3Settings, S3Storage
from statebed_store.storage.whole_requests import WHOLE_BYTES, WholeHTTPConnection


class _Recorder:
    """A connected socket's stand-in: every write, as sent."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def sendall(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def settimeout(self, _t: object) -> None:
        pass


def _writes(body: bytes) -> list[bytes]:
    conn = WholeHTTPConnection("127.0.0.1", 9)
    conn.sock = _Recorder()  # type: ignore[assignment]
    conn.request("PUT", "/b/k", body=body, headers={"If-None-Match": "*", "Content-Length": str(len(body))})
    return conn.sock.writes  # type: ignore[attr-defined,no-any-return]


def test_a_small_body_is_sent_with_its_headers_in_one_write() -> None:
    writes = _writes(b"commit entry")
    assert len(writes) == 1 and writes[0].startswith(b"PUT /b/k HTTP/1.1\r\n") and writes[0].endswith(b"\r\n\r\ncommit entry")
    assert b"If-None-Match: *" in writes[0]


def test_a_large_body_is_sent_as_urllib3_sends_it() -> None:
    """Positive control: without the join, headers and body are separate writes."""
    writes = _writes(b"x" * (WHOLE_BYTES + 1))
    assert len(writes) == 2 and writes[0].endswith(b"\r\n\r\n") and writes[1] == b"x" * (WHOLE_BYTES + 1)


@pytest.mark.s3
def test_s3_storage_writes_and_reads_through_whole_requests(s3_server: S3Server) -> None:
    storage = S3Storage(f"s3://statebed-test/{uuid.uuid4().hex}", S3Settings(s3_server.endpoint, ACCESS_KEY, SECRET_KEY))
    storage.write("small", b"s", create_only=True)
    storage.write("large", b"L" * (WHOLE_BYTES + 7))
    assert storage.read("small") == b"s" and storage.read("large") == b"L" * (WHOLE_BYTES + 7)
    pool = storage.client._http.connection_from_url(s3_server.endpoint)
    assert pool.ConnectionCls is WholeHTTPConnection
