"""Entry point of `statebed`: every outcome is an exit code and at most one line on stderr.

Exit codes: 0 ok / valid, 1 verdict negative, 2 unusable input or usage, 3 unknown, 4 the run
failed (Spark failed, an injected fault fired), 5 a protocol violation was detected, 70 an
internal error (a bug: one line, the trace only with STATEBED_LOG_LEVEL=DEBUG), 130 interrupted.

Nothing a command prints can drive the terminal: stdout and stderr pass through
`statebed_base.entry.escaped_output`, and names are printed through `statebed_base.names.printable`
(newlines too), so a hostile file name cannot forge a line. The codes and the one line are
`statebed_base.entry.guarded`'s, shared with `python -m statebed_job`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from statebed_base.entry import escaped_output, guarded
from statebed_base.log import setup_logging

from .commands import chaos, cleanup, cluster, demo, diff, dump, load, ls, plan, report, rewind, run, verify

COMMANDS = (run, verify, cluster, plan, ls, dump, diff, rewind, cleanup, demo, chaos, report, load)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="statebed",
        description="statebed: a resilience test-bed for streaming state stores (checkpoint format V2).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with escaped_output():
        setup_logging()
        args = build_parser().parse_args(argv)
        return guarded(f"statebed {args.command}", lambda: int(args.run(args)))


if __name__ == "__main__":
    sys.exit(main())
