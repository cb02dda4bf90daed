"""The suite's commands see Ctrl-C even when the suite itself was started with SIGINT ignored."""

from __future__ import annotations

import signal
import subprocess
import sys


def test_commands_the_suite_starts_get_the_default_sigint_handler() -> None:
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_an_inherited_ignore_is_what_the_suite_undoes() -> None:
    """The positive control: a child started with SIGINT ignored keeps the ignore (Python's rule),
    so without the suite's reset a Ctrl-C test would wait for a run that never stops."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    ).stdout
    assert out.strip() == "True"
