"""One proxy: a loopback listener that forwards each accepted connection to its upstream as a `Link`."""

from __future__ import annotations

import ipaddress
import random
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from statebed_base.errors import UsageError
from statebed_base.netaddr import IPAddress, resolve

from .link import Link
from .record import Recorder
from .toxics import ToxicSet

__all__ = ["MAX_CONNECTIONS", "AddressPolicy", "IPNetwork", "ListenError", "Proxy", "parse_networks", "split_address"]

MAX_CONNECTIONS = 256  # per proxy; more are refused (closed at once): bounded threads
CONNECT_TIMEOUT_S = 5.0
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class ListenError(ValueError):
    """A listen or upstream address the proxy refuses (status 400), or cannot bind (500)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def split_address(addr: object, what: str) -> tuple[str, int]:
    if not isinstance(addr, str) or ":" not in addr:
        raise ListenError(f"{what} must be host:port, got {addr!r}")
    host, _, port = addr.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenError(f"{what} {addr!r}: bad port")
    return host.strip("[]"), int(port)


def parse_networks(texts: Sequence[str], flag: str = "--allow-upstream") -> tuple[IPNetwork, ...]:
    """CIDR networks (a bare address is its /32 or /128); a UsageError naming `flag` otherwise."""
    nets = []
    for text in texts:
        try:
            nets.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise UsageError(f"{flag} {text!r}: not a CIDR network (e.g. 10.0.0.0/8)") from None
    return tuple(nets)


@dataclass(frozen=True)
class AddressPolicy:
    """Where proxies may listen and forward: loopback, plus the `--allow-upstream` networks; a
    listener beyond loopback also needs `--public` (servers bind loopback unless told otherwise).
    A name is judged by every address it resolves to, and resolved again at each connect, so a
    name that later resolves elsewhere is not followed off the machine."""

    allowed: tuple[IPNetwork, ...] = ()
    public: bool = False

    def _addresses(self, addr: object, what: str) -> tuple[list[IPAddress], int]:
        host, port = split_address(addr, what)
        try:
            ips = resolve(host)
        except OSError:
            raise ListenError(f"{what} {addr!r}: cannot resolve {host!r}") from None
        for ip in ips:
            if not ip.is_loopback and not any(ip in net for net in self.allowed):
                raise ListenError(f"{what} {addr!r} refused: {ip} is not a loopback address and no --allow-upstream names it")
        return ips, port

    def listen(self, addr: object) -> tuple[str, int]:
        """The (host, port) to bind; raises ListenError (400)."""
        ips, port = self._addresses(addr, "listen")
        if not all(ip.is_loopback for ip in ips) and not self.public:
            raise ListenError(f"listen {addr!r} refused: a listener beyond loopback needs --public")
        return str(ips[0]), port

    def upstream(self, addr: object) -> tuple[str, int]:
        """The (address, port) to connect to, checked now; raises ListenError (400)."""
        ips, port = self._addresses(addr, "upstream")
        return str(ips[0]), port


class Proxy:
    """A named proxy; `start` binds and accepts, `stop` closes the listener and every connection."""

    def __init__(self, name: str, listen: str, upstream: str, recorder: Recorder, rng: random.Random, policy: AddressPolicy) -> None:
        self.name, self.listen, self.upstream, self.policy = name, listen, upstream, policy
        self.toxics = ToxicSet()
        self.enabled = False
        self._recorder, self._rng = recorder, rng
        self._lock = threading.Lock()
        self._links: set[Link] = set()
        self._sock: socket.socket | None = None
        self._next_id = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [t.to_json() for t in self.toxics.all()],
        }

    def start(self) -> None:
        if self.enabled:
            return
        host, port = self.policy.listen(self.listen)
        self.policy.upstream(self.upstream)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            sock.close()
            raise ListenError(f"listen {self.listen}: {e.strerror}", 500) from None
        sock.listen(64)
        bound = sock.getsockname()
        self.listen = f"[{bound[0]}]:{bound[1]}" if ":" in bound[0] else f"{bound[0]}:{bound[1]}"
        self._sock, self.enabled = sock, True
        threading.Thread(target=self._accept, args=(sock,), name=f"proxy-{self.name}-accept", daemon=True).start()

    def stop(self) -> None:
        """Stop listening and drop every connection (Toxiproxy's disable)."""
        with self._lock:
            sock, self._sock, self.enabled = self._sock, None, False
            links = list(self._links)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for link in links:
            link.close()

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                client, _ = sock.accept()
            except OSError:  # stop() closed the listener
                return
            with self._lock:
                full = len(self._links) >= MAX_CONNECTIONS or self._sock is not sock
                self._next_id += 1
                conn_id = self._next_id
            if full:
                client.close()
                continue
            threading.Thread(target=self._open, args=(conn_id, client), name=f"proxy-{self.name}-open", daemon=True).start()

    def _open(self, conn_id: int, client: socket.socket) -> None:
        try:
            host, port = self.policy.upstream(self.upstream)  # resolved again: a name may point elsewhere now
            server = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except (OSError, ListenError):  # upstream down or refused: the client sees its connection closed, as with Toxiproxy
            client.close()
            return
        server.settimeout(None)
        link = Link(conn_id, self.name, client, server, self.toxics, self._recorder, self._rng, self._forget)
        with self._lock:
            if not self.enabled:
                link.closed.set()
            else:
                self._links.add(link)
        if link.closed.is_set():
            client.close()
            server.close()
            return
        link.start()

    def _forget(self, link: Link) -> None:
        with self._lock:
            self._links.discard(link)
