"""Entry point of `statebed`. Exit codes: 0 ok, 1 verdict negative, 2 unusable input or usage."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from statebed_store.errors import StatebedError
from statebed_store.log import setup_logging

from .commands import cluster, demo, dump, ls, plan, run, verify
from .common import EXIT_UNUSABLE

COMMANDS = (run, verify, cluster, plan, ls, dump, demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="statebed",
        description="statebed: a resilience test-bed for streaming state stores (checkpoint format V2).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C, so clusters and Spark sessions are stopped by their `finally`."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except StatebedError as e:
        print(f"statebed {args.command}: error: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    except KeyboardInterrupt:
        print(f"statebed {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
