"""Entry point of `statebed`: every outcome is an exit code and at most one line on stderr.

Exit codes: 0 ok / valid, 1 verdict negative, 2 unusable input or usage, 3 unknown, 4 the run
failed (Spark failed, an injected fault fired), 5 a protocol violation was detected, 70 an
internal error (a bug: one line, the trace only with STATEBED_LOG_LEVEL=DEBUG), 130 interrupted.

Nothing a command prints can drive the terminal: stdout and stderr pass through `_Escaping`
(control characters but newline, carriage return and tab become `\\x1b`-style escapes), and names are printed
through `naming.printable` (newlines too), so a hostile file name cannot forge a line.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from statebed_base.errors import ProtocolViolationError, RunFailedError, StatebedError
from statebed_base.log import get_logger, setup_logging
from statebed_base.names import printable

from .commands import chaos, cleanup, cluster, demo, diff, dump, load, ls, plan, proxy, report, rewind, run, verify
from .common import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PROTOCOL, EXIT_RUN_FAILED, EXIT_UNUSABLE

COMMANDS = (run, verify, cluster, plan, ls, dump, diff, rewind, cleanup, demo, proxy, chaos, report, load)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="statebed",
        description="statebed: a resilience test-bed for streaming state stores (checkpoint format V2).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def _terminate(_signum: int, _frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C, so clusters and Spark sessions are stopped by their `finally`."""
    raise KeyboardInterrupt


_LAYOUT = re.compile(r"([\n\r\t])")  # what the CLI's own layout uses (`\r`: a progress line on a terminal)


class _Escaping:
    """A text stream that escapes every control character but newline, carriage return and tab
    (ANSI sequences included) before writing."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write("".join(p if i % 2 else printable(p) for i, p in enumerate(_LAYOUT.split(text))))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextmanager
def _escaped_output() -> Iterator[None]:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Escaping(sys.stdout), _Escaping(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def main(argv: Sequence[str] | None = None) -> int:
    with _escaped_output():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    setup_logging()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except StatebedError as e:
        get_logger("cli").debug("error", exc_info=True)  # the chain (e.g. Spark's trace) for whoever debugs it
        print(f"statebed {args.command}: {_kind(e)}: {printable(e)}", file=sys.stderr)
        return exit_code(e)
    except KeyboardInterrupt:
        print(f"statebed {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: one line for the user, the trace for whoever debugs it
        get_logger("cli").debug("internal error", exc_info=True)
        print(
            f"statebed {args.command}: internal error: {type(e).__name__}: {printable(e)} (run with STATEBED_LOG_LEVEL=DEBUG for the trace)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def exit_code(e: StatebedError) -> int:
    """4 for a run that failed, 5 for a protocol violation, 2 for any other (unusable input)."""
    if isinstance(e, ProtocolViolationError):
        return EXIT_PROTOCOL
    if isinstance(e, RunFailedError):
        return EXIT_RUN_FAILED
    return EXIT_UNUSABLE


def _kind(e: StatebedError) -> str:
    if isinstance(e, ProtocolViolationError):
        return "protocol violation"
    if isinstance(e, RunFailedError):
        return "run failed"
    return "error"


if __name__ == "__main__":
    sys.exit(main())
