"""The ingest service: HTTP in, durable landed files plus acknowledgements out.

    POST /event    {"key": int, "value": int}
    POST /events   {"events": [{"key", "value"}, ...]}          (1..max_batch events)
    GET  /health   {"ok": true, "landing": URL}
    GET  /metrics  Prometheus text (prometheus_client)

A 200 answer `{"seq", "ids", "ingested_at"}` is sent only after `IngestSource.land`
returned, i.e. the data file and its acknowledgement are both durable (fsynced locally, PUT
done on S3): the acknowledgement log is the ground truth of the load verifier. Rejections:
400 malformed JSON, 413 body or batch too large, 422 missing / unknown / mistyped fields
(`{"error": reason}`); 429 + Retry-After when `max_inflight` requests are landing already;
503 + Retry-After when the landing storage fails. Nothing is ever dropped silently.

Run: `python -m statebed_load.service --landing DIR [--host 127.0.0.1] [--port 0]
[--ready-file F]`; the ready file (`{"pid", "url"}`) is written once the socket listens.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from statebed_model.sources import IngestSource
from statebed_store import S3Settings, open_storage
from statebed_store.errors import StatebedError, StorageError
from statebed_store.localfs import atomic_write

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


async def _body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Rejected(413, f"body of {declared} bytes, at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Rejected(413, f"body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m statebed_load.service", description=__doc__.split("\n\n")[0])
    p.add_argument("--landing", required=True, help="landing area: a directory or s3://bucket/prefix (S3 from STATEBED_S3_ENDPOINT…)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: loopback only)")
    p.add_argument("--port", type=int, default=0, help="listen port (default: any free port)")
    p.add_argument("--ready-file", default=None, help="write {pid, url} here once listening")
    d = Limits()
    p.add_argument("--max-body", type=int, default=d.max_body)
    p.add_argument("--max-batch", type=int, default=d.max_batch)
    p.add_argument("--max-inflight", type=int, default=d.max_inflight)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        s3 = S3Settings.from_env() if args.landing.startswith("s3://") else None
        landing = open_storage(args.landing, s3, create_bucket=s3 is not None)
        landing.list("acks")  # reachable before we say ready
    except StatebedError as e:
        print(f"statebed ingest: error: {args.landing}: {e}", file=sys.stderr)
        return 2
    app = create_app(IngestSource(landing), Limits(args.max_body, args.max_batch, args.max_inflight))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(1024)
    host, port = sock.getsockname()[:2]
    if args.ready_file:
        atomic_write(Path(args.ready_file), json.dumps({"pid": os.getpid(), "url": f"http://{host}:{port}"}).encode())
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5))
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
