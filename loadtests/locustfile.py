"""Locust users for statebed's ingest service: batches of events, a load shape, a key distribution.

    locust -f loadtests/locustfile.py --headless --host http://127.0.0.1:PORT \\
        -u 20 -r 5 -t 30s --load-shape steady --keys zipf --seed 7 --csv load/locust --html load/locust.html

Options (besides Locust's own): `--load-shape steady|ramp|spike` (steady: -u users at once;
ramp: 0 → -u linearly over the run; spike: -u/4 users, -u for the middle fifth of the run),
`--keys uniform|zipf|hot` over `--keyspace` keys (zipf: s=1.2; hot: 90% of events on 1% of
the keys), `--batch-size` events per request, `--seed` (every user's draws derive from it),
`--acked-log FILE` (each 200's `{"seq", "ids"}` as a JSON line: what clients were promised),
and thresholds `--max-fail-ratio` / `--max-p99-ms`: when either fails, Locust exits 1
(`process_exit_code`). A non-200 answer (429/503 included) or a connection error is a failure.
The shape and thresholds also apply with Locust's web UI (start it without --headless).
"""

from __future__ import annotations

import itertools
import json
import random
import threading
from typing import Any

from locust import FastHttpUser, LoadTestShape, between, events, task

_users = itertools.count()
_log_lock = threading.Lock()


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--load-shape", choices=("steady", "ramp", "spike"), default="steady", help="users over time")
    parser.add_argument("--keys", choices=("uniform", "zipf", "hot"), default="uniform", help="key distribution")
    parser.add_argument("--keyspace", type=int, default=1000, help="distinct keys")
    parser.add_argument("--batch-size", type=int, default=20, help="events per request")
    parser.add_argument("--seed", type=int, default=0, help="seed of every user's random draws")
    parser.add_argument("--acked-log", default="", help="append every acknowledged {seq, ids} here")
    parser.add_argument("--max-fail-ratio", type=float, default=1.0, help="exit 1 when more requests fail")
    parser.add_argument("--max-p99-ms", type=float, default=0.0, help="exit 1 when p99 response time is higher (0: no limit)")


def _zipf_weights(n: int, s: float = 1.2) -> list[float]:
    return list(itertools.accumulate(1.0 / (k**s) for k in range(1, n + 1)))


class KeyDraw:
    """Keys 0..keyspace-1 drawn from one distribution with one seeded generator."""

    def __init__(self, kind: str, keyspace: int, rng: random.Random) -> None:
        self.kind, self.n, self.rng = kind, max(1, keyspace), rng
        self.cum = _zipf_weights(self.n) if kind == "zipf" else None
        self.hot = max(1, self.n // 100)

    def __call__(self) -> int:
        if self.kind == "zipf":
            assert self.cum is not None
            return self.rng.choices(range(self.n), cum_weights=self.cum)[0]
        if self.kind == "hot" and self.rng.random() < 0.9:
            return self.rng.randrange(self.hot)
        return self.rng.randrange(self.n)


class IngestUser(FastHttpUser):
    wait_time = between(0.05, 0.2)

    def on_start(self) -> None:
        o = self.environment.parsed_options
        self.rng = random.Random(f"{o.seed}-{next(_users)}")
        self.keys = KeyDraw(o.keys, o.keyspace, self.rng)
        self.batch, self.acked_log = o.batch_size, o.acked_log

    @task
    def post_batch(self) -> None:
        events_ = [{"key": self.keys(), "value": self.rng.randint(1, 100)} for _ in range(self.batch)]
        with self.client.post("/events", json={"events": events_}, name="/events", catch_response=True) as r:
            if r.status_code != 200:
                r.failure(f"{r.status_code}: {(r.text or '')[:120]}")
                return
            doc = r.json()
            r.success()
            if self.acked_log:
                with _log_lock, open(self.acked_log, "a") as f:
                    f.write(json.dumps({"seq": doc["seq"], "ids": doc["ids"]}) + "\n")


class StatebedShape(LoadTestShape):
    """steady / ramp / spike over Locust's own -u (peak users), -r and -t (run time, default 60 s)."""

    def tick(self) -> tuple[int, float] | None:
        o = self.runner.environment.parsed_options
        t, total = self.get_run_time(), float(o.run_time or 60)
        if t >= total:
            return None
        peak, rate = max(1, o.num_users or 1), float(o.spawn_rate or 1)
        if o.load_shape == "ramp":
            return max(1, round(peak * t / total)), rate
        if o.load_shape == "spike":
            spiking = 0.4 * total <= t < 0.6 * total
            return (peak if spiking else max(1, peak // 4)), max(rate, float(peak))
        return peak, rate


@events.quitting.add_listener
def _thresholds(environment: Any, **_: Any) -> None:
    o, total = environment.parsed_options, environment.stats.total
    failed = []
    if total.num_requests and total.fail_ratio > o.max_fail_ratio:
        failed.append(f"fail ratio {total.fail_ratio:.3f} > {o.max_fail_ratio}")
    if o.max_p99_ms and total.num_requests and total.get_response_time_percentile(0.99) > o.max_p99_ms:
        failed.append(f"p99 {total.get_response_time_percentile(0.99)} ms > {o.max_p99_ms} ms")
    if failed:
        print("statebed locust: thresholds failed: " + "; ".join(failed))
        environment.process_exit_code = 1
