"""Test parts for TCP servers and proxies: an echo server, a client connection, waiting on an event."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def echo_server() -> Iterator[str]:
    """A TCP server echoing every byte back; yields its host:port."""
    listener = socket.create_server(("127.0.0.1", 0))
    conns: list[socket.socket] = []

    def serve(c: socket.socket) -> None:
        with contextlib.suppress(OSError), c:
            while data := c.recv(65536):
                c.sendall(data)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                c, _ = listener.accept()
                conns.append(c)
                threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for c in conns:
            with contextlib.suppress(OSError):
                c.close()


def connect(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    return s


def recv_all(s: socket.socket) -> bytes:
    """Everything until the peer closes."""
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def wait_for(cond: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """Poll a condition (an event in another process or thread) until it holds; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not (value := cond()):
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)
    return value


class Forwarder:
    """A loopback TCP forwarder to `upstream` ("host:port" or a URL) whose two directions a test
    shapes by overriding `requests` (client to server) or `answers` (server to client); each
    connection's pumps share one `seen` buffer of the request bytes. `close` stops everything
    it started and joins its threads."""

    def __init__(self, upstream: str) -> None:
        hostport = upstream.split("://", 1)[-1].rstrip("/")
        host, _, port = hostport.rpartition(":")
        self.upstream = (host or "127.0.0.1", int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listen = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.endpoint = f"http://{self.listen}"
        self.sockets: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            self.sockets += [client, up]
            seen = bytearray()
            for pump in (self.requests, self.answers):
                self.threads.append(threading.Thread(target=self._pump, args=(pump, client, up, seen), daemon=True))
                self.threads[-1].start()

    @staticmethod
    def _pump(
        pump: Callable[[socket.socket, socket.socket, bytearray], None], client: socket.socket, up: socket.socket, seen: bytearray
    ) -> None:
        with contextlib.suppress(OSError):
            pump(client, up, seen)
        for sock in (client, up):  # shutdown, not only close: it sends FIN and wakes the other pump
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def requests(self, client: socket.socket, up: socket.socket, seen: bytearray) -> None:
        while data := client.recv(65536):
            seen += data
            up.sendall(data)

    def answers(self, client: socket.socket, up: socket.socket, seen: bytearray) -> None:
        while data := up.recv(65536):
            client.sendall(data)

    def close(self) -> None:
        # shutdown wakes a blocked accept/recv (close does not)
        for sock in (self.listener, *self.sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for t in self.threads:
            t.join(10)
            assert not t.is_alive()
        for sock in (self.listener, *self.sockets):
            sock.close()
