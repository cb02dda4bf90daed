"""The ingest service: HTTP in, durable landed files plus acknowledgements out.

    POST /event    {"key": int, "value": int}
    POST /events   {"events": [{"key", "value"}, ...]}          (1..max_batch events)
    GET  /health   {"ok": true, "landing": URL}
    GET  /metrics  Prometheus text (prometheus_client)

A 200 answer `{"seq", "ids", "ingested_at"}` is sent only after `IngestSource.land`
returned, i.e. the data file and its acknowledgement are both durable (fsynced locally, PUT
done on S3): the acknowledgement log is the ground truth of the load verifier. Rejections:
400 malformed JSON or JSON nested deeper than `schema.MAX_DEPTH`, 413 body or batch too large,
422 missing / unknown / mistyped fields (`{"error": reason}`); 429 + Retry-After when
`max_inflight` requests are landing already; 503 + Retry-After when the landing storage fails.
Nothing is ever dropped silently. Writes from a web page are refused: 403 with an `Origin`
header, 415 unless `Content-Type: application/json`.

Run: `python -m statebed_load.service --landing DIR [--host 127.0.0.1 [--public]] [--port 0]
[--ready-file F]`; the ready file (`{"pid", "url"}`) is written once the socket listens. A
non-loopback `--host` needs `--public` and prints one warning line; an unusable argument is
one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from statebed_base.errors import StatebedError, StorageError, UsageError
from statebed_base.localfs import atomic_write
from statebed_base.netaddr import check_bind
from statebed_model.sources import IngestSource
from statebed_store import S3Settings, open_storage
from statebed_store.location import parse_location

from .schema import Rejected, parse_events

__all__ = ["Limits", "create_app", "main"]

RETRY_AFTER_S = "1"


@dataclass(frozen=True)
class Limits:
    max_body: int = 1 << 20  # bytes per request
    max_batch: int = 1000  # events per batch request
    max_inflight: int = 64  # requests landing at once; more get 429


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("statebed_ingest_requests", "ingest requests answered, by status", ["status"], registry=r)
        self.acknowledged = Counter("statebed_ingest_acknowledged_records", "records acknowledged (landed and acked durably)", registry=r)
        self.landed = Counter("statebed_ingest_landed_files", "landed data files with their acknowledgement", registry=r)
        self.inflight = Gauge("statebed_ingest_inflight_requests", "requests landing now", registry=r)
        self.land_seconds = Histogram("statebed_ingest_land_seconds", "time to land and acknowledge one request", registry=r)


def create_app(source: IngestSource, limits: Limits = Limits()) -> Starlette:
    """The ASGI app over one landing area."""
    metrics = _Metrics()
    state = {"inflight": 0}

    def answer(status: int, doc: dict[str, object], headers: dict[str, str] | None = None) -> JSONResponse:
        metrics.requests.labels(str(status)).inc()
        return JSONResponse(doc, status_code=status, headers=headers)

    async def ingest(request: Request, batch: bool) -> JSONResponse:
        refused = _from_a_page(request)
        if refused:
            return answer(*refused)
        try:
            table = parse_events(await _body(request, limits.max_body), batch=batch, max_batch=limits.max_batch)
        except Rejected as e:
            return answer(e.status, {"error": e.reason})
        if state["inflight"] >= limits.max_inflight:
            return answer(429, {"error": f"overloaded: {limits.max_inflight} requests landing; retry"}, {"Retry-After": RETRY_AFTER_S})
        state["inflight"] += 1
        metrics.inflight.inc()
        try:
            with metrics.land_seconds.time():
                ack = await run_in_threadpool(source.land, table)
        except StorageError as e:
            return answer(503, {"error": f"landing storage unavailable: {e}"}, {"Retry-After": RETRY_AFTER_S})
        finally:
            state["inflight"] -= 1
            metrics.inflight.dec()
        metrics.landed.inc()
        metrics.acknowledged.inc(ack.records)
        return answer(200, {"seq": ack.seq, "ids": ack.ids, "ingested_at": ack.ingested_at})

    async def one(request: Request) -> JSONResponse:
        return await ingest(request, batch=False)

    async def many(request: Request) -> JSONResponse:
        return await ingest(request, batch=True)

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({"ok": True, "landing": source.landing.url})

    async def prometheus(_: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/event", one, methods=["POST"]),
        Route("/events", many, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    return Starlette(routes=routes)


def _from_a_page(request: Request) -> tuple[int, dict[str, object]] | None:
    """Why a write may come from a web page: an Origin header (403), or a body that is not declared
    JSON (415: a form or text/plain POST needs no CORS preflight; a JSON one does, and gets none)."""
    if "origin" in request.headers:
        return 403, {"error": "Origin header: requests from web pages are refused"}
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        return 415, {"error": f"Content-Type must be application/json, got {ctype or 'none'!r}"}
    return None


DRAIN_FACTOR = 4  # a refused body up to 4x the limit is read and dropped before the 413 goes out


async def _body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 once it passes `limit` bytes (declared or streamed).

    A refused body of up to DRAIN_FACTOR x `limit` is read to its end and dropped first: closing
    a socket with unread bytes makes the kernel send a reset, which can reach the client before
    it has read the 413 (seen under load). Anything larger is cut off at once: bounded work."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        if int(declared) <= DRAIN_FACTOR * limit:
            await _drain(request)
        raise Rejected(413, f"body of {declared} bytes, at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            await _drain(request, DRAIN_FACTOR * limit - size)
            raise Rejected(413, f"body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain(request: Request, budget: int | None = None) -> None:
    """Read and drop the rest of the body (at most `budget` more bytes when given)."""
    async for chunk in request.stream():
        if budget is not None:
            budget -= len(chunk)
            if budget < 0:
                return


PROG = "python -m statebed_load.service"


class _Parser(argparse.ArgumentParser):
    """argparse whose every refusal is one line and exit 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_type(low: int, high: int | None, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--landing", required=True, help="landing area: a directory or s3://bucket/prefix (S3 from STATEBED_S3_ENDPOINT…)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1; any other needs --public)")
    p.add_argument("--public", action="store_true", help="allow a non-loopback --host (prints a warning)")
    p.add_argument("--port", type=_int_type(0, 65535, "a TCP port 0..65535"), default=0, help="listen port (default: any free port)")
    p.add_argument("--ready-file", default=None, help="write {pid, url} here once listening")
    d, positive = Limits(), _int_type(1, None, "an integer >= 1")
    p.add_argument("--max-body", type=positive, default=d.max_body)
    p.add_argument("--max-batch", type=positive, default=d.max_batch)
    p.add_argument("--max-inflight", type=_int_type(0, None, "an integer >= 0"), default=d.max_inflight)
    return p


def _landing(location: str) -> IngestSource:
    """The landing area, reachable before we say ready; a local one is created, and must be a directory."""
    where = parse_location(location)
    if not where.remote:
        path = Path(where.url)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise UsageError(f"--landing {location!r}: not a directory") from None
        except OSError as e:
            raise UsageError(f"--landing {location!r}: cannot create it ({e.strerror})") from None
        if not path.is_dir():
            raise UsageError(f"--landing {location!r}: not a directory")
    s3 = S3Settings.from_env() if where.remote else None
    try:
        landing = open_storage(parse_location(location, s3), create_bucket=s3 is not None)
        landing.list("acks")
    except StatebedError as e:
        raise UsageError(f"--landing {location!r}: {e}") from None
    return IngestSource(landing)


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        why = "port in use" if e.errno == errno.EADDRINUSE else e.strerror
        raise UsageError(f"--host/--port: cannot listen on {host}:{port} ({why})") from None
    sock.listen(1024)
    return sock


def _ready(path: str, url: str) -> None:
    try:
        atomic_write(Path(path), json.dumps({"pid": os.getpid(), "url": url}).encode())
    except (OSError, StatebedError) as e:
        raise UsageError(f"--ready-file {path!r}: {getattr(e, 'strerror', None) or e}") from None


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM; 2 with one line on stderr for an unusable argument."""
    args = _parser().parse_args(argv)
    try:
        warning = check_bind(args.host, args.port, public=args.public)
        source = _landing(args.landing)
        sock = _listen(args.host, args.port)
        host, port = sock.getsockname()[:2]
        if args.ready_file:
            _ready(args.ready_file, f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}")
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if warning:
        print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
    app = create_app(source, Limits(args.max_body, args.max_batch, args.max_inflight))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5))
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
