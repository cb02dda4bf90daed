"""The tail proxy (`statebed_chaos.tail_proxy`): the one delay Toxiproxy lacks, a heavy tail per
chunk with rare stalls (seed 001's S3; the hedging benchmark's storage)."""

from __future__ import annotations

import random
import time
import uuid

import pytest
from s3server import ACCESS_KEY, SECRET_KEY, S3Server

from statebed_chaos.tail_proxy import TailLatency, TailProxy
from statebed_store import S3Settings
from statebed_store.storage import S3Storage


def test_draws_are_seeded_have_a_heavy_tail_and_stall_at_the_permille_asked() -> None:
    toxic = TailLatency(latency=50, jitter=10, tail=10, stall=2000, stall_permille=10)
    a, b = random.Random(7), random.Random(7)
    draws = [toxic.draw_ms(a) for _ in range(20000)]
    assert draws == [toxic.draw_ms(b) for _ in range(20000)]  # one seed, one sequence
    ordered = sorted(draws)
    median, p99 = ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99)]
    assert 40 <= median <= 70 and min(draws) >= 40  # latency - jitter at least, Pareto adds >= 0
    stalls = sum(d >= 2000 for d in draws)
    assert 120 <= stalls <= 280, stalls  # 1 % of 20000 = 200, binomial sd 14
    assert p99 > 3 * median  # the tail reaches far past the median (the stalls and the Pareto)
    assert TailLatency().draw_ms(a) == 0.0


@pytest.mark.s3
def test_requests_pass_unchanged_and_a_stall_on_every_chunk_delays_each(s3_server: S3Server) -> None:
    with TailProxy(s3_server.endpoint.removeprefix("http://"), stream="downstream", seed=1) as proxy:
        through = S3Storage(f"s3://statebed-test/{uuid.uuid4().hex}", S3Settings(f"http://{proxy.listen}", ACCESS_KEY, SECRET_KEY))
        through.write("obj", b"x" * 100_000)
        assert through.read("obj") == b"x" * 100_000
        proxy.set(TailLatency(stall=300, stall_permille=1000))
        start = time.monotonic()
        assert through.read("obj") == b"x" * 100_000  # delayed, never changed
        assert time.monotonic() - start >= 0.3  # a lower bound: the response's chunks each waited 300 ms
        proxy.set(None)
        assert through.read("obj") == b"x" * 100_000
