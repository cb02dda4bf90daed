"""`statebed proxy`: the Toxiproxy-API proxy in the foreground (what the storage faults drive).

Exit codes: 0 stopped by SIGTERM, 130 interrupted (Ctrl-C), 2 unusable arguments (a
non-loopback host without --public, a bad --allow-upstream, a port already in use).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from statebed_base.errors import UsageError

from statebed_chaos.proxy import ProxyServer

from ..common import EXIT_OK, non_negative_int, output_file


class _Terminated(Exception):
    """SIGTERM: a requested stop, exit 0."""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "proxy",
        help="run the Toxiproxy-API TCP proxy (storage faults) until SIGTERM or Ctrl-C",
        description="Serve the subset of Toxiproxy's HTTP API that toxiproxy-python uses (proxies; toxics latency, "
        "bandwidth, timeout, reset_peer, limit_data; enable/disable; reset). Proxies listen on and forward to loopback "
        "only, unless --allow-upstream names the network; browsers (a Mozilla/ user agent, an Origin header) get 403.",
    )
    p.add_argument("--host", default="127.0.0.1", help="API address (default 127.0.0.1; any other needs --public)")
    p.add_argument("--public", action="store_true", help="allow a non-loopback --host and proxy listen addresses (prints a warning)")
    p.add_argument(
        "--allow-upstream", action="append", default=[], metavar="CIDR",
        help="also let proxies forward to (and, with --public, listen on) this network; repeatable",
    )  # fmt: skip
    p.add_argument("--port", type=non_negative_int, default=8474, help="API port (default 8474, Toxiproxy's; 0: any free port)")
    p.add_argument("--record", type=Path, help="append one JSON line per toxic act here (the storage faults' evidence)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of toxicity rolls and jitter (default 0)")
    p.set_defaults(run=run)


def _terminate(_signum: int, _frame: FrameType | None) -> None:
    raise _Terminated


def run(args: argparse.Namespace) -> int:
    output_file(args.record, "--record")  # a directory, FIFO or device is refused before the proxy starts
    try:
        server = ProxyServer(
            args.host, args.port, record=args.record, seed=args.seed, public=args.public, allow_upstream=args.allow_upstream
        )
    except OSError as e:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {e.strerror}") from None
    if server.warning:
        print(f"statebed proxy: {server.warning}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, _terminate)
    print(f"statebed proxy: API on {server.url}" + (f", record {args.record}" if args.record else ""), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except _Terminated:
        return EXIT_OK
    finally:
        server.server_close()
    return EXIT_OK
