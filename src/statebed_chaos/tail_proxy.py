"""What Toxiproxy lacks, and only that: a TCP proxy whose delays have a heavy tail.

Toxiproxy's `latency` toxic draws each chunk's delay from latency ± jitter, a bounded
distribution; seed 001's S3 has a heavy tail (rare requests many times slower than the median),
which is what hedged uploads are for. `TailProxy` forwards one loopback port to an upstream
and, while a `TailLatency` is set, delays every chunk of one direction by latency ± jitter plus a
Pareto(2) extra scaled by `tail` ms, and adds a `stall` of that many ms to `stall_permille` ‰ of
the chunks. Draws come from one seeded generator. In-process (threads), loopback only, stopped
with `close` (or as a context manager); the storage faults use the real Toxiproxy.
"""

from __future__ import annotations

import random
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

from statebed_base.netaddr import LOOPBACK

__all__ = ["TailLatency", "TailProxy"]

CHUNK = 32 * 1024
POLL_S = 0.05


@dataclass(frozen=True)
class TailLatency:
    """One chunk's delay in ms: latency ± jitter + tail × (Pareto(2) − 1), + stall on stall_permille ‰ of chunks."""

    latency: int = 0
    jitter: int = 0
    tail: int = 0
    stall: int = 0
    stall_permille: int = 0

    def draw_ms(self, rng: random.Random) -> float:
        ms = self.latency + (rng.uniform(-self.jitter, self.jitter) if self.jitter else 0.0)
        if self.tail:
            ms += self.tail * ((1.0 - rng.random()) ** -0.5 - 1.0)
        if self.stall_permille and rng.random() * 1000 < self.stall_permille:
            ms += self.stall
        return max(0.0, ms)


class TailProxy:
    """Forward 127.0.0.1:<port> to `upstream` ("host:port"), delaying `stream` ("upstream":
    client to server, or "downstream") while a `TailLatency` is set."""

    def __init__(self, upstream: str, *, stream: str = "upstream", seed: int = 0) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.stream = stream
        self._rng, self._rng_lock = random.Random(seed), threading.Lock()
        self._toxic: TailLatency | None = None
        self._closed = threading.Event()
        self._socks: list[socket.socket] = []
        self._listener = socket.create_server((LOOPBACK, 0))
        self.listen = f"{LOOPBACK}:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, name="tail-proxy", daemon=True).start()

    def set(self, toxic: TailLatency | None) -> None:
        """Start (or change, or with None stop) delaying; open connections see it at their next chunk."""
        self._toxic = toxic

    def close(self) -> None:
        self._closed.set()
        for s in [self._listener, *self._socks]:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> TailProxy:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _delay_s(self) -> float:
        toxic = self._toxic
        if toxic is None:
            return 0.0
        with self._rng_lock:
            return toxic.draw_ms(self._rng) / 1000.0

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            self._socks = [s for s in self._socks if s.fileno() != -1] + [client, server]  # closed ones forgotten
            for name, src, dst in (("upstream", client, server), ("downstream", server, client)):
                threading.Thread(target=self._pump, args=(src, dst, name == self.stream), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, delayed: bool) -> None:
        pending: deque[tuple[float, bytes]] = deque()  # (due, data): each chunk waits from its arrival
        try:
            while not self._closed.is_set():
                wait = POLL_S if not pending else min(POLL_S, max(0.0, pending[0][0] - time.monotonic()))
                if select.select([src], [], [], wait)[0]:
                    data = src.recv(CHUNK)
                    if not data:
                        break
                    pending.append((time.monotonic() + (self._delay_s() if delayed else 0.0), data))
                while pending and pending[0][0] <= time.monotonic():
                    dst.sendall(pending.popleft()[1])
            for due, data in pending:  # the peer closed its side: what is queued still arrives, on time
                self._closed.wait(max(0.0, due - time.monotonic()))
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:  # the other side, or close(), ended the connection
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass
