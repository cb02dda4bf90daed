"""How a statebed process ends: an exit code and at most one line on stderr, never a traceback.

One owner for every entry point (`statebed`, `python -m statebed_job RUN_DIR`): exit codes 2
unusable input or usage, 4 the run failed (Spark failed, an injected fault fired), 5 a protocol
violation was detected, 70 an internal error (a bug: one line, the trace only with
STATEBED_LOG_LEVEL=DEBUG), 130 interrupted. SIGTERM unwinds like Ctrl-C, so clusters and Spark
sessions are stopped by their `finally`. Output passes through `escaped_output`: control
characters but newline, carriage return and tab become `\\x1b`-style escapes, so a hostile
file name cannot drive the terminal or forge a line.
"""

from __future__ import annotations

import re
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from .errors import ProtocolViolationError, RunFailedError, StatebedError
from .log import get_logger
from .names import printable

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_PROTOCOL",
    "EXIT_RUN_FAILED",
    "EXIT_UNUSABLE",
    "escaped_output",
    "exit_code",
    "guarded",
    "sigterm_unwinds",
]

EXIT_UNUSABLE = 2
EXIT_RUN_FAILED, EXIT_PROTOCOL, EXIT_INTERNAL, EXIT_INTERRUPTED = 4, 5, 70, 130


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


def _terminate(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def sigterm_unwinds() -> None:
    """SIGTERM raises KeyboardInterrupt in the main thread, so `finally` blocks stop what a process
    started (servers, JVMs) as on Ctrl-C; by default SIGTERM ends Python without unwinding."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)


def guarded(prog: str, body: Callable[[], int]) -> int:
    """`body()`'s exit code; a StatebedError, Ctrl-C, SIGTERM or bug becomes one line naming `prog` and its code."""
    sigterm_unwinds()
    try:
        return int(body())
    except StatebedError as e:
        get_logger("entry").debug("error", exc_info=True)  # the chain (e.g. Spark's trace) for whoever debugs it
        print(f"{prog}: {_kind(e)}: {printable(e)}", file=sys.stderr)
        return exit_code(e)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug: one line for the user, the trace for whoever debugs it
        get_logger("entry").debug("internal error", exc_info=True)
        print(
            f"{prog}: internal error: {type(e).__name__}: {printable(e)} (run with STATEBED_LOG_LEVEL=DEBUG for the trace)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


_LAYOUT = re.compile(r"([\n\r\t])")  # what the output's own layout uses (`\r`: a progress line on a terminal)


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
def escaped_output() -> Iterator[None]:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Escaping(sys.stdout), _Escaping(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
