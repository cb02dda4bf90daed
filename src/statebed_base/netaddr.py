"""The loopback rule every server here follows: bind loopback unless an explicit `--public` says
otherwise, and then say so in one warning line.

One owner for "is this address loopback", so the ingest service, the tail proxy
and the driver's /metrics cannot drift apart. A name counts as loopback only if
every address it resolves to is (`localhost` does); an IPv4-mapped IPv6 address is judged as
the IPv4 address it carries.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import urllib.request

from .errors import UsageError

__all__ = ["IPAddress", "answers", "check_bind", "check_port", "resolve"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _plain(ip: IPAddress) -> IPAddress:
    return ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip


def resolve(host: str) -> list[IPAddress]:
    """Every address `host` names: an IP literal without a lookup, a name through the resolver.
    Raises OSError when the name resolves to nothing or cannot be a name at all."""
    try:
        return [_plain(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except UnicodeError as e:  # an over-long or empty label: IDNA refuses it before any lookup
        raise OSError(f"not a host name ({e})") from None
    return sorted({_plain(ipaddress.ip_address(str(info[4][0]).split("%")[0])) for info in infos}, key=str)


def check_port(port: int, flag: str = "--port") -> int:
    if not 0 <= port <= 65535:
        raise UsageError(f"{flag} {port}: not a TCP port (0..65535)")
    return port


def check_bind(host: str, port: int, *, public: bool, flag: str = "--host", port_flag: str = "--port") -> str | None:
    """None when `host` is loopback; with `public`, what the caller's one warning line must say
    for any other address; otherwise a UsageError naming `flag` and `--public`."""
    check_port(port, port_flag)
    try:
        addrs = resolve(host) if host else []  # "": every interface
    except OSError as e:
        raise UsageError(f"{flag} {host!r}: cannot resolve ({getattr(e, 'strerror', None) or e})") from None
    if addrs and all(a.is_loopback for a in addrs):
        return None
    if not public:
        raise UsageError(f"{flag} {host or '(all interfaces)'}: not a loopback address; binding beyond this machine needs --public")
    return f"listening on {host or '(all interfaces)'}:{port}, reachable beyond this machine (--public)"


def answers(url: str, timeout_s: float = 1.0) -> bool:
    """Does a GET of `url` answer 200 now (a server's readiness probe; any error is "not yet")."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return bool(r.status == 200)
    except OSError:
        return False


LOOPBACK = "127.0.0.1"


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports free now: all held bound at once, so no two coincide, then released
    for a child to bind. Another process may take one before it does: the caller starts again."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind((LOOPBACK, 0))
        return [int(s.getsockname()[1]) for s in socks]


def free_port() -> int:
    """One loopback port free now (see free_ports)."""
    return free_ports(1)[0]
