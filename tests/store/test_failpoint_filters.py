"""Failpoint task filters (`[batch=3,partition=1,attempt=0]term`) and the `hold(ms)` action."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_failpoints_runtime import wait_for

from statebed_base.errors import InjectedFault, UsageError
from statebed_store import failpoints
from statebed_store.failpoints import Control

POINT = "commitlog.write.before"


@pytest.fixture
def control(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Control]:
    """This process follows a fresh control file, polled on every hit."""
    monkeypatch.setattr(failpoints, "CONTROL_POLL_S", 0.0)
    ctl = Control(tmp_path / "failpoints" / "control.json")
    previous = failpoints.use_control(ctl.path)
    try:
        yield ctl
    finally:
        failpoints.use_control(previous)


def hits_in(task: dict[str, int] | None, n: int = 1) -> list[bool]:
    if task is None:
        return [failpoints.hit(POINT) for _ in range(n)]
    with failpoints.task_context(**task):
        return [failpoints.hit(POINT) for _ in range(n)]


def test_filter_round_trips_in_canonical_key_order() -> None:
    [term] = failpoints.parse_spec(f"{POINT}=[attempt=0,batch=3,partition=1]30%2*error(boom)")[POINT]
    assert term.task == {"batch": 3, "partition": 1, "attempt": 0} and term.count == 2 and term.pct == 30.0
    assert term.describe() == "[batch=3,partition=1,attempt=0]30%2*error(boom)"
    assert failpoints.parse_spec(f"{POINT}={term.describe()}")[POINT][0] == term
    assert failpoints.parse_spec(f"{POINT}=[batch=2]hold(5000)->drop")[POINT][0].describe() == "[batch=2]hold(5000)"


@pytest.mark.parametrize(
    ("terms", "message"),
    [
        ("[batch=x]error", "bad task filter"),
        ("[executor=1]error", "bad task filter"),
        ("[batch=1,batch=2]error", "bad task filter"),
        ("[]error", "bad task filter"),
        ("[batch=-1]error", "bad task filter"),
        ("[batch=1error", "cannot parse term"),
        ("hold", "hold needs a bound"),
        ("hold(0)", "hold needs a bound"),
        ("hold(600001)", "hold needs a bound"),
    ],
)
def test_bad_filters_and_holds_are_one_line_usage_errors(terms: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as err:
        failpoints.arm(POINT, terms)
    assert str(err.value).startswith(f"failpoint {POINT}:") and "\n" not in str(err.value)
    assert failpoints.stats() == {}


def test_a_filter_matches_only_when_every_listed_key_is_equal() -> None:
    failpoints.arm(POINT, "[batch=1,partition=0]drop")
    assert hits_in(None) == [False]
    assert hits_in({"batch": 1}) == [False]  # partition unknown: no match
    assert hits_in({"batch": 1, "partition": 1, "attempt": 0}) == [False]
    assert hits_in({"batch": 2, "partition": 0, "attempt": 0}) == [False]
    assert hits_in({"batch": 1, "partition": 0, "attempt": 3}) == [True]  # attempt not listed: any


def test_a_skipped_term_consumes_neither_count_nor_roll() -> None:
    failpoints.arm(POINT, "[batch=2]1*drop")
    assert hits_in({"batch": 1}, 20) == [False] * 20
    assert hits_in({"batch": 2}, 3) == [True, False, False]

    failpoints.configure(f"{POINT}=[batch=2]50%drop", seed=9)
    pure = hits_in({"batch": 2}, 60)
    assert 0 < sum(pure) < 60
    failpoints.configure(f"{POINT}=[batch=2]50%drop", seed=9)
    mixed = []
    for _ in range(60):
        assert hits_in({"batch": 7}, 2) == [False, False]
        mixed += hits_in({"batch": 2})
    assert mixed == pure


def test_terms_with_filters_chain_to_the_next_term() -> None:
    failpoints.arm(POINT, "[batch=1]1*drop->[batch=2]error(second)->off")
    assert hits_in({"batch": 1}, 2) == [True, False]
    with pytest.raises(InjectedFault, match="second"):
        hits_in({"batch": 2})


def hold_in_thread(task: dict[str, int]) -> tuple[threading.Thread, list[bool]]:
    out: list[bool] = []

    def run() -> None:
        out.extend(hits_in(task))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def firings_of(control: Control, action: str) -> Callable[[], list[dict[str, Any]]]:
    return lambda: [f for f in control.firings() if f["action"] == action]


def test_hold_is_released_by_another_thread_and_both_ends_are_recorded(control: Control) -> None:
    control.arm(f"{POINT}=[batch=5]hold(600000)")
    assert hits_in({"batch": 4}) == [False]  # this process has applied the arming before the threads hit
    task = {"batch": 5, "partition": 1, "attempt": 0}
    first, out1 = hold_in_thread(task)
    second, out2 = hold_in_thread({**task, "partition": 0})
    try:
        wait_for("both holds to start", lambda: len(firings_of(control, "hold(600000)")()) == 2)
        assert first.is_alive() and second.is_alive()
    finally:
        version = control.release(POINT)
    assert control.read()["released"] == {POINT: 1} and version == control.read()["version"]
    first.join(60)
    second.join(60)
    assert not first.is_alive() and not second.is_alive() and out1 == out2 == [False]
    ends = firings_of(control, "released")()
    assert sorted(f["task"]["partition"] for f in ends) == [0, 1]
    assert all(f["failpoint"] == POINT and f["task"]["batch"] == 5 and f["held_s"] >= 0 for f in ends)
    assert not firings_of(control, "hold-timeout")()


def test_a_release_before_the_hold_began_does_not_end_it(control: Control) -> None:
    control.arm(f"{POINT}=1*hold(200)")
    control.release(POINT)
    assert hits_in({"batch": 0}) == [False]  # returns once the bound elapses
    assert [f["action"] for f in control.firings()] == ["hold(200)", "hold-timeout"]
    assert control.firings()[1]["task"] == {"batch": 0}


def test_a_hold_without_a_control_file_just_waits() -> None:
    assert failpoints.control_version() is None
    failpoints.arm(POINT, "1*hold(20)")
    assert hits_in(None, 2) == [False, False]
    assert failpoints.stats()[POINT]["fired"] == {"hold": 1}


HOLDER = """
import sys
from statebed_store import failpoints
with failpoints.task_context(batch=3, partition=1, attempt=0):
    print("result", failpoints.hit(sys.argv[1]), flush=True)
"""


def test_hold_in_another_process_is_released_through_the_control_file(tmp_path: Path) -> None:
    control = Control(tmp_path / "failpoints" / "control.json")
    control.arm(f"{POINT}=[partition=1]1*hold(600000)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEBED_FAILPOINTS")}
    env[failpoints.CONTROL_ENV] = str(control.path)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, POINT], env=env, stdout=subprocess.PIPE, text=True)
    try:
        [start] = wait_for("the hold to start", firings_of(control, "hold(600000)"))
        assert start["pid"] == proc.pid and proc.poll() is None
        control.release(POINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == 0 and out.strip() == "result False"
    [end] = firings_of(control, "released")()
    assert end["pid"] == proc.pid and end["task"] == start["task"] == {"batch": 3, "partition": 1, "attempt": 0}
