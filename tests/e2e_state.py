"""`--e2e-state FILE`: a resumable run (`make e2e`, docs/testing.md).

Each test that passed (setup, call and teardown) is appended to FILE as one line,
`<node id>\t<seconds>`, the moment it finishes; a later run with the same FILE deselects those
node ids, so a run cut short (a 3-hour session, a Ctrl-C) continues where it stopped. Failed,
skipped and errored tests are never recorded: a rerun runs them again. Removing FILE
(`make e2e-reset`) starts over. When every selected test has already passed, the run says so and
exits 0 (pytest's "no tests ran", exit 5, would read as a failure).
"""

from __future__ import annotations

from pathlib import Path

import pytest

_FILE = pytest.StashKey[Path]()
_SKIPPED = pytest.StashKey[int]()
# The report hooks get no config: the state file and each running test's phase reports live here,
# for the one session a pytest process runs.
_state_file: list[Path] = []
_current_phases: dict[str, list[pytest.TestReport]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--e2e-state",
        metavar="FILE",
        default=None,
        help="resumable run: skip the node ids FILE lists as passed, append each test that passes (make e2e)",
    )


def passed_tests(state: Path) -> dict[str, float]:
    """FILE's node ids and their seconds (a torn last line, from a run killed mid-write, is ignored)."""
    if not state.exists():
        return {}
    done: dict[str, float] = {}
    for line in state.read_text().splitlines():
        nodeid, _, seconds = line.partition("\t")
        try:
            done[nodeid] = float(seconds)
        except ValueError:
            continue
    return done


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    option = config.getoption("--e2e-state")
    if option is None:
        return
    state = Path(option).absolute()  # a test may change the working directory (monkeypatch.chdir): the file stays put
    state.parent.mkdir(parents=True, exist_ok=True)
    config.stash[_FILE] = state
    done = passed_tests(state)
    keep = [i for i in items if i.nodeid not in done]
    skipped = [i for i in items if i.nodeid in done]
    config.stash[_SKIPPED] = len(skipped)
    if skipped:
        config.hook.pytest_deselected(items=skipped)
        items[:] = keep


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    phases = _current_phases.get(report.nodeid)
    if phases is None:
        return
    phases.append(report)
    if report.when == "teardown":
        del _current_phases[report.nodeid]
        if all(r.passed for r in phases) and any(r.when == "call" for r in phases):
            seconds = sum(r.duration for r in phases)
            with _state_file[0].open("a") as f:
                f.write(f"{report.nodeid}\t{seconds:.1f}\n")


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    del location
    if _state_file:
        _current_phases[nodeid] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    option = session.config.getoption("--e2e-state")
    _state_file.clear()
    _current_phases.clear()
    if option is not None:
        _state_file.append(Path(option).absolute())  # as the collection hook: a chdir in a test cannot move it


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    del exitstatus
    if _FILE not in config.stash:
        return
    state = config.stash[_FILE]
    done = passed_tests(state)
    terminalreporter.write_line(
        f"e2e state {state}: {len(done)} passed so far ({sum(done.values()) / 60:.1f} min summed), "
        f"{config.stash[_SKIPPED]} of them skipped this run as already passed (make e2e-reset starts over)"
    )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Every selected test passed in an earlier run: nothing left to do is success, not pytest's exit 5."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and _FILE in session.config.stash and session.config.stash[_SKIPPED] > 0:
        session.exitstatus = pytest.ExitCode.OK
