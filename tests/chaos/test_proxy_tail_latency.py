"""Our `tail_latency` toxic (heavy-tailed latency with rare stalls; the hedging benchmark's storage)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from proxy_helpers import proxy_api, records
from s3server import ACCESS_KEY, SECRET_KEY, S3Server
from toxiproxy.exceptions import InvalidToxic

from statebed_store import S3Settings
from statebed_store.storage import S3Storage


@pytest.mark.s3
def test_a_stall_on_every_chunk_delays_each_request_by_at_least_the_stall(s3_server: S3Server, tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    with proxy_api(record) as (_, client):
        proxy = client.create(upstream=s3_server.endpoint.removeprefix("http://"), name="s3")
        through = S3Storage(f"s3://statebed-test/{uuid.uuid4().hex}", S3Settings(f"http://{proxy.listen}", ACCESS_KEY, SECRET_KEY))
        through.write("obj", b"x" * 100)
        attrs = {"latency": 10, "jitter": 5, "tail": 5, "stall": 300, "stall_permille": 1000}
        proxy.add_toxic(name="seed", type="tail_latency", attributes=attrs)
        assert proxy.get_toxic("seed").attributes == attrs
        start = time.monotonic()
        assert through.read("obj") == b"x" * 100
        assert time.monotonic() - start >= 0.3  # a lower bound: the response chunk stalled 300 ms
        proxy.destroy_toxic("seed")
        assert {(r["toxic"], r["type"], r["stream"]) for r in records(record)} == {("seed", "tail_latency", "downstream")}


def test_tail_latency_refuses_unknown_attributes() -> None:
    with proxy_api() as (_, client):
        proxy = client.create(upstream="127.0.0.1:9", name="x")
        with pytest.raises(InvalidToxic):
            proxy.add_toxic(type="tail_latency", attributes={"stall_pct": 1})
