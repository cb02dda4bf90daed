"""Test parts for the Toxiproxy-API proxy: our server in-process (real HTTP, real sockets) and a TCP echo server."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from toxiproxy import Toxiproxy

from statebed_chaos.proxy import ProxyServer


@contextlib.contextmanager
def proxy_api(record: Path | None = None, seed: int = 0, allow: Sequence[str] = ()) -> Iterator[tuple[ProxyServer, Toxiproxy]]:
    """Our API server on a free loopback port (`allow`: its --allow-upstream), and the real
    toxiproxy-python client pointed at it."""
    server = ProxyServer("127.0.0.1", 0, record=record, seed=seed, allow_upstream=allow)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    client = Toxiproxy()
    client.update_api_consumer("127.0.0.1", server.server_address[1])
    try:
        yield server, client
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


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


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def wait_for(cond: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """Poll a condition (an event in another process or thread) until it holds; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not (value := cond()):
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)
    return value
