"""A check that says unknown names why, so an unknown cell or load run never shows no reason
(the whole catalogue had 80 unknown V1 cells whose `reasons` were empty)."""

from __future__ import annotations

from pathlib import Path

from statebed_chaos.judge import _undecided, check_run
from statebed_model.rundir import RunDir


def test_checks_that_could_not_read_the_run_say_so_in_the_reasons(tmp_path: Path) -> None:
    checked = check_run(RunDir(tmp_path), None)  # no run.json: neither verifier can read the run
    assert checked.verdicts == ["unknown", "unknown"]
    assert [r.split(": ", 1)[0] for r in checked.reasons] == ["lineage", "state"], checked.reasons
    assert all("could not decide" in r and "run.json" in r for r in checked.reasons), checked.reasons


def test_only_the_counted_checks_give_reasons(tmp_path: Path) -> None:
    checked = check_run(RunDir(tmp_path), None, counted=["state"])
    assert checked.verdicts == ["unknown"] and [r.split(": ", 1)[0] for r in checked.reasons] == ["state"]


def test_the_reason_keeps_two_notes_and_counts_the_rest() -> None:
    assert _undecided("lineage", ["a", "b", "c", "d"]) == "lineage: could not decide: a; b (+2 more notes)"
    assert _undecided("attempts", []) == "attempts: could not decide (it left no note)"
