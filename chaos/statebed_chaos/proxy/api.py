"""The subset of Toxiproxy's HTTP API (v2) that `toxiproxy-python` uses, over `http.server`.

Routes: GET /version; GET /metrics (Prometheus text, `metrics.py`); GET/POST /proxies; GET/POST/DELETE /proxies/{name}; GET/POST
/proxies/{name}/toxics; GET/POST/DELETE /proxies/{name}/toxics/{toxic}; POST /reset. Errors are
JSON `{"error": ..., "status": ...}` with 400 (bad body or address), 404 (unknown proxy or
toxic), 409 (name taken), 500 (cannot listen), like Toxiproxy.

It cannot be driven from a web page: a `Mozilla/` user agent gets 403 as from Toxiproxy's
stopBrowsersMiddleware, and so does any request with an `Origin` header (browsers send one on
every cross-origin request and every POST); a write carrying a body must say `Content-Type:
application/json` (415 otherwise), which a page cannot send cross-origin without a CORS
preflight this server never answers. Bodyless writes (toxiproxy-python's POST /reset and its
DELETEs send no body and no content type) need none. Proxies listen and forward only where
their `AddressPolicy` allows (loopback unless `--allow-upstream`).
"""

from __future__ import annotations

import json
import random
import socket
import threading
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from statebed_base.netaddr import check_bind

from . import metrics
from .listener import AddressPolicy, ListenError, Proxy, parse_networks
from .record import Recorder
from .toxics import ToxicError, parse_toxic

__all__ = ["VERSION", "ApiError", "ProxyServer", "Registry"]

VERSION = "statebed-toxiproxy-2.0"
MAX_BODY = 64 * 1024
MAX_REQUEST_THREADS = 16


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Registry:
    """The proxies by name; every API call goes through one method here."""

    def __init__(self, recorder: Recorder, seed: int, policy: AddressPolicy) -> None:
        self.recorder, self.policy = recorder, policy
        self._rng = random.Random(seed)  # toxicity rolls and jitter: same seed, same choices
        self._lock = threading.Lock()
        self._proxies: dict[str, Proxy] = {}

    def get(self, name: str) -> Proxy:
        with self._lock:
            proxy = self._proxies.get(name)
        if proxy is None:
            raise ApiError(404, "proxy not found")
        return proxy

    def all(self) -> dict[str, Any]:
        with self._lock:
            return {name: p.to_json() for name, p in self._proxies.items()}

    def proxies(self) -> list[Proxy]:
        with self._lock:
            return list(self._proxies.values())

    def create(self, body: dict[str, Any]) -> Proxy:
        name, upstream, listen = body.get("name"), body.get("upstream"), body.get("listen", "127.0.0.1:0")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "missing required field: name")
        self.policy.upstream(upstream)
        self.policy.listen(listen)
        proxy = Proxy(name, str(listen), str(upstream), self.recorder, self._rng, self.policy)
        with self._lock:
            if name in self._proxies:
                raise ApiError(409, "proxy already exists")
            self._proxies[name] = proxy
        if body.get("enabled", True):
            try:
                proxy.start()
            except ListenError:
                self.delete(name)
                raise
        return proxy

    def update(self, name: str, body: dict[str, Any]) -> Proxy:
        """enabled / listen / upstream; a changed address restarts the proxy (its connections drop)."""
        proxy = self.get(name)
        listen, upstream = body.get("listen", proxy.listen), body.get("upstream", proxy.upstream)
        self.policy.listen(listen)
        self.policy.upstream(upstream)
        enabled = body.get("enabled", proxy.enabled)
        if not isinstance(enabled, bool):
            raise ApiError(400, "enabled must be true or false")
        if (listen, upstream) != (proxy.listen, proxy.upstream) or not enabled:
            proxy.stop()
        proxy.listen, proxy.upstream = str(listen), str(upstream)
        if enabled:
            proxy.start()
        return proxy

    def delete(self, name: str) -> None:
        proxy = self.get(name)
        with self._lock:
            self._proxies.pop(name, None)
        proxy.stop()

    def reset(self) -> None:
        """Toxiproxy's reset: every proxy enabled, every toxic removed."""
        with self._lock:
            proxies = list(self._proxies.values())
        for p in proxies:
            p.toxics.clear()
            p.start()

    def stop_all(self) -> None:
        with self._lock:
            proxies = list(self._proxies.values())
        for p in proxies:
            p.stop()


def _route(reg: Registry, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
    """(status, JSON or text) for one call; raises ApiError."""
    if parts == ["version"] and method == "GET":
        return 200, VERSION
    if parts == ["metrics"] and method == "GET":
        return 200, metrics.render(reg)
    if parts == ["reset"] and method == "POST":
        reg.reset()
        return 204, None
    if parts == ["proxies"]:
        if method == "GET":
            return 200, reg.all()
        if method == "POST":
            return 201, reg.create(_object(body)).to_json()
    if len(parts) == 2 and parts[0] == "proxies":
        if method == "GET":
            return 200, reg.get(parts[1]).to_json()
        if method == "POST":
            return 200, reg.update(parts[1], _object(body)).to_json()
        if method == "DELETE":
            reg.delete(parts[1])
            return 204, None
    if len(parts) in (3, 4) and parts[0] == "proxies" and parts[2] == "toxics":
        return _toxics(reg.get(parts[1]), method, parts[3] if len(parts) == 4 else None, body)
    raise ApiError(404, "not found" if method in ("GET", "POST", "DELETE") else "method not allowed")


def _toxics(proxy: Proxy, method: str, name: str | None, body: Any) -> tuple[int, Any]:
    if name is None:
        if method == "GET":
            return 200, [t.to_json() for t in proxy.toxics.all()]
        if method == "POST":
            toxic = parse_toxic(_object(body))
            if not proxy.toxics.add(toxic):
                raise ApiError(409, "toxic already exists")
            return 200, toxic.to_json()
        raise ApiError(404, "not found")
    existing = proxy.toxics.get(name)
    if existing is None:
        raise ApiError(404, "toxic not found")
    if method == "GET":
        return 200, existing.to_json()
    if method == "POST":
        toxic = parse_toxic(_object(body), existing)
        proxy.toxics.replace(toxic)
        return 200, toxic.to_json()
    if method == "DELETE":
        proxy.toxics.remove(name)
        return 204, None
    raise ApiError(404, "not found")


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "bad request body: expected a JSON object")
    return body


class _Handler(BaseHTTPRequestHandler):
    server: ProxyServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        refused = _browser(self.headers.get("User-Agent", ""), self.headers.get("Origin"))
        if refused:
            self.close_connection = True  # its body (if any) stays unread
            self._reply(403, refused + "\n")
            return
        try:
            body = self._body()
            status, payload = _route(self.server.registry, method, [p for p in self.path.split("?")[0].split("/") if p], body)
        except ApiError as e:
            status, payload = e.status, {"error": str(e), "status": e.status}
        except (ListenError, ToxicError) as e:
            status = e.status if isinstance(e, ListenError) else 400
            payload = {"error": str(e), "status": status}
        self._reply(status, payload)

    def _body(self) -> Any:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ApiError(400, "bad Content-Length") from None
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            raise ApiError(400, "request body too large")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        if self.headers.get_content_type() != "application/json":
            raise ApiError(415, "a request body must be sent with Content-Type: application/json")
        try:
            return json.loads(raw)
        except RecursionError:
            raise ApiError(400, "bad request body: JSON nested too deeply") from None
        except ValueError:
            raise ApiError(400, "bad request body: not JSON") from None

    def _reply(self, status: int, payload: Any) -> None:
        if payload is None:
            data, ctype = b"", "application/json"
        elif isinstance(payload, str):
            data, ctype = payload.encode(), "text/plain"
        else:
            data, ctype = json.dumps(payload).encode(), "application/json"
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _browser(user_agent: str, origin: str | None) -> str | None:
    """Why a request comes from a web page (Toxiproxy's wording for the user agent), or None."""
    if user_agent.startswith("Mozilla/"):
        return "User agent not allowed"
    if origin is not None:
        return "Origin not allowed"
    return None


class ProxyServer(ThreadingHTTPServer):
    """The API server; at most MAX_REQUEST_THREADS requests are served at once. `warning` is the
    one line to print when `public` or `allow_upstream` open anything beyond loopback."""

    daemon_threads = True

    def __init__(
        self, host: str = "127.0.0.1", port: int = 8474, *, record: Path | None = None, seed: int = 0,
        public: bool = False, allow_upstream: Sequence[str] = (),
    ) -> None:  # fmt: skip
        opened = [check_bind(host, port, public=public)]
        policy = AddressPolicy(parse_networks(allow_upstream), public)
        if policy.allowed:
            where = ", ".join(map(str, policy.allowed))
            opened.append(f"proxies may forward to{' and listen on' if public else ''} {where} (--allow-upstream)")
        self.warning = "warning: " + "; ".join(w for w in opened if w) if any(opened) else None
        self.registry = Registry(Recorder(record), seed, policy)
        self._slots = threading.BoundedSemaphore(MAX_REQUEST_THREADS)
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), int(self.server_address[1])
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def process_request(self, request: Any, client_address: Any) -> None:
        self._slots.acquire()
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def server_close(self) -> None:
        self.registry.stop_all()
        super().server_close()
