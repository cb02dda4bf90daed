"""One proxied TCP connection: two pump threads (upstream, downstream) that apply the toxics.

Each pump re-reads its stream's toxics before every chunk, so adding or removing a toxic acts
on open connections at once, as in Toxiproxy. Waits are bounded by `POLL_S` so a closed link
(proxy disabled or deleted) ends its threads promptly.
"""

from __future__ import annotations

import random
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable

from .record import Recorder
from .toxics import Toxic, ToxicSet

__all__ = ["Link"]

CHUNK = 32 * 1024
POLL_S = 0.05


class Link:
    """A client connection and its upstream connection, forwarded through the proxy's toxics."""

    def __init__(
        self, conn_id: int, proxy: str, client: socket.socket, server: socket.socket, toxics: ToxicSet,
        recorder: Recorder, rng: random.Random, on_close: Callable[[Link], None],
    ) -> None:  # fmt: skip
        self.id, self.proxy, self.toxics, self.recorder = conn_id, proxy, toxics, recorder
        self.client, self.server = client, server
        self.opened = time.monotonic()
        self.closed = threading.Event()
        self._rng, self._on_close = rng, on_close
        self._lock = threading.Lock()
        self._rolls: dict[tuple[str, float], bool] = {}
        self._ended = 0

    def start(self) -> None:
        for stream, src, dst in (("upstream", self.client, self.server), ("downstream", self.server, self.client)):
            threading.Thread(target=self._pump, args=(stream, src, dst), name=f"proxy-{self.proxy}-{self.id}-{stream}", daemon=True).start()

    def close(self, *, rst: bool = False) -> None:
        """Close both sides; `rst`: abort with a TCP RST (SO_LINGER 0) instead of a FIN."""
        with self._lock:
            if self.closed.is_set():
                return
            self.closed.set()
        for s in (self.client, self.server):
            try:
                if rst:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self._on_close(self)

    # -- toxics -------------------------------------------------------------------------------
    def _active(self, stream: str) -> dict[str, Toxic]:
        """This stream's toxics that apply to this connection (toxicity rolled once per toxic and connection)."""
        out: dict[str, Toxic] = {}
        for t in self.toxics.all():
            if t.stream != stream:
                continue
            key = (t.name, t.created)
            with self._lock:
                if key not in self._rolls:
                    self._rolls[key] = self._rng.random() < t.toxicity
                applies = self._rolls[key]
            if applies:
                out[t.type] = t
        return out

    def _record(self, t: Toxic, nbytes: int) -> None:
        self.recorder.act(self.proxy, t.name, t.type, t.stream, self.id, nbytes, self.opened >= t.created)

    # -- pumping ------------------------------------------------------------------------------
    def _pump(self, stream: str, src: socket.socket, dst: socket.socket) -> None:
        try:
            self._forward(stream, src, dst)
        except (OSError, ValueError):  # the other side or a close() ended the connection
            self.close()
        with self._lock:
            self._ended += 1
            both = self._ended == 2
        if both:
            self.close()

    def _forward(self, stream: str, src: socket.socket, dst: socket.socket) -> None:
        pending: deque[tuple[float, bytes]] = deque()  # (due, data): latency delays each chunk from its arrival
        sent: dict[str, int] = {}  # limit_data: bytes passed per toxic
        while not self.closed.is_set():
            wait = POLL_S if not pending else min(POLL_S, max(0.0, pending[0][0] - time.monotonic()))
            readable = bool(select.select([src], [], [], wait)[0])
            active = self._active(stream)  # after the wait: a toxic removed meanwhile no longer acts
            if "timeout" in active:
                return self._hold(active["timeout"], src)
            reset = active.get("reset_peer")
            if reset is not None and (readable or self._elapsed(reset) >= reset.attr("timeout") / 1000):
                self._record(reset, _peek(src) if readable else 0)
                return self.close(rst=True)
            if readable:
                data = src.recv(CHUNK)
                if not data:
                    self._flush(pending, dst, active, sent, until=None)
                    dst.shutdown(socket.SHUT_WR)
                    return None
                delay = self._delay(active.get("latency"), len(data)) + self._tail_delay(active.get("tail_latency"), len(data))
                pending.append((time.monotonic() + delay, data))
            if not self._flush(pending, dst, active, sent, until=time.monotonic()):
                return None
        return None

    def _elapsed(self, t: Toxic) -> float:
        return time.monotonic() - max(t.created, self.opened)

    def _delay(self, t: Toxic | None, nbytes: int) -> float:
        if t is None:
            return 0.0
        jitter = t.attr("jitter")
        ms = t.attr("latency") + (self._rng.uniform(-jitter, jitter) if jitter else 0.0)
        self._record(t, nbytes)
        return max(0.0, ms / 1000)

    def _tail_delay(self, t: Toxic | None, nbytes: int) -> float:
        """tail_latency: latency ± jitter + Pareto(2) tail scaled by `tail`; a `stall` on `stall_permille` of chunks."""
        if t is None:
            return 0.0
        ms = self._delay(t, nbytes) * 1000
        if t.attr("tail"):
            ms += t.attr("tail") * ((1.0 - self._rng.random()) ** -0.5 - 1.0)
        if t.attr("stall_permille") and self._rng.random() * 1000 < t.attr("stall_permille"):
            ms += t.attr("stall")
        return max(0.0, ms / 1000)

    def _flush(
        self, pending: deque[tuple[float, bytes]], dst: socket.socket, active: dict[str, Toxic], sent: dict[str, int], until: float | None
    ) -> bool:
        """Send the chunks that are due (all when `until` is None); False once limit_data closed the link."""
        while pending and (until is None or pending[0][0] <= until):
            due, data = pending.popleft()
            if until is None:
                self.closed.wait(max(0.0, due - time.monotonic()))
            limit = active.get("limit_data")
            if limit is not None:
                room = limit.attr("bytes") - sent.get(limit.name, 0)
                data = data[: max(0, room)]
                sent[limit.name] = sent.get(limit.name, 0) + len(data)
            self._send(dst, data, active.get("bandwidth"))
            if limit is not None and sent[limit.name] >= limit.attr("bytes"):
                self._record(limit, len(data))
                self.close()
                return False
        return True

    def _send(self, dst: socket.socket, data: bytes, bandwidth: Toxic | None) -> None:
        if bandwidth is None or bandwidth.attr("rate") <= 0:
            dst.sendall(data)
            return
        self._record(bandwidth, len(data))
        rate = bandwidth.attr("rate") * 1000  # bytes per second
        step = max(1, rate // 10)
        for i in range(0, len(data), step):
            piece = data[i : i + step]
            if self.closed.wait(len(piece) / rate):
                return
            dst.sendall(piece)

    def _hold(self, t: Toxic, src: socket.socket) -> None:
        """timeout: forward nothing; close after `timeout` ms, or (timeout 0) when the toxic is removed."""
        self._record(t, 0)
        seen_data = False
        while not self.closed.is_set():
            cur = self.toxics.get(t.name)
            if cur is None or cur.created != t.created or (cur.attr("timeout") and self._elapsed(cur) >= cur.attr("timeout") / 1000):
                break
            if seen_data:
                self.closed.wait(POLL_S)
            elif select.select([src], [], [], POLL_S)[0]:
                seen_data = True
                self._record(t, _peek(src))
        self.close()


def _peek(s: socket.socket) -> int:
    """How many bytes are waiting on `s` (without consuming them)."""
    try:
        return len(s.recv(CHUNK, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:
        return 0
