"""One verdict -> exit-code table (`statebed_verify.result.EXIT_CODES`): every command's exit for
a verdict comes from it. With the table changed, `statebed verify`, the chaos harness and the
load run follow it; and no module spells a verdict's exit code as a number of its own."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import run_cli

from statebed_chaos.driver_process import DriverExit
from statebed_chaos.experiment import parse_experiment
from statebed_chaos.judge import ExperimentResult, judge
from statebed_chaos.launcher import make_nemesis
from statebed_load.load_run import LoadResult
from statebed_store.failpoint_control import Control
from statebed_verify import EXIT_CODES, Verdict
from statebed_verify.history import History

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["src/statebed_job", "src/statebed_chaos", "src/statebed_load", "src/statebed_report", "src/statebed_cli"]
VERDICTS: list[Verdict] = [True, False, "unknown"]
ODD = {True: 40, False: 41, "unknown": 43}  # no command uses these on its own
# names that would be a second verdict table
VERDICT_NAMES = {"EXIT_OK", "EXIT_VALID", "EXIT_NEGATIVE", "EXIT_INVALID", "EXIT_FAILED", "EXIT_UNKNOWN"}


@pytest.fixture
def odd_table(monkeypatch: pytest.MonkeyPatch) -> dict[object, int]:
    for verdict, code in ODD.items():
        monkeypatch.setitem(EXIT_CODES, verdict, code)
    return EXIT_CODES


def _pairs(node: ast.Assign) -> list[tuple[ast.expr, ast.expr]]:
    out: list[tuple[ast.expr, ast.expr]] = []
    for target in node.targets:
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) and len(target.elts) == len(node.value.elts):
            out += list(zip(target.elts, node.value.elts, strict=True))
        else:
            out.append((target, node.value))
    return out


def _name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _has_int(node: ast.AST | None) -> bool:
    return node is not None and any(
        isinstance(n, ast.Constant) and type(n.value) is int for n in ast.walk(node)
    )  # not a subscript's key: EXIT_CODES["unknown"] has none


def literal_exit_codes(source: str, name: str = "<probe>") -> list[str]:
    """`line what` for each verdict exit code written as a number: an `exit_code` set or returned
    from a literal, or a verdict-named constant (EXIT_OK, EXIT_FAILED, ...) given one."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.keyword) and node.arg == "exit_code" and _has_int(node.value):
            found.append(f"{node.value.lineno} exit_code=")
        elif isinstance(node, ast.Assign):
            for target, value in _pairs(node):
                if (_name(target) == "exit_code" or _name(target) in VERDICT_NAMES) and _has_int(value):
                    found.append(f"{node.lineno} {_name(target)} =")
        elif isinstance(node, ast.FunctionDef) and node.name == "exit_code":
            found += [f"{r.lineno} return" for r in ast.walk(node) if isinstance(r, ast.Return) and _has_int(r.value)]
    return found


def test_the_scan_sees_each_form_of_a_literal_exit_code() -> None:
    """Positive control: the forms today's code had, and none of the table's own uses."""
    probe = (
        "r = R(exit_code=3)\n"
        "r.valid, r.exit_code = v, 3\n"
        "EXIT_OK, EXIT_NEGATIVE, EXIT_UNUSABLE = 0, 1, 2\n"
        "class L:\n"
        "    def exit_code(self):\n"
        "        return 0 if self.valid is True else 3\n"
        "ok = R(exit_code=EXIT_CODES['unknown'])\n"
        "EXIT_OK, EXIT_FAILED = EXIT_CODES[True], EXIT_CODES[False]\n"
        "EXIT_UNUSABLE = 2\n"
    )
    assert sorted(int(f.split(" ", 1)[0]) for f in literal_exit_codes(probe)) == [1, 2, 3, 3, 6]


def test_no_package_spells_a_verdict_exit_code() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{f}"
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        for f in literal_exit_codes(p.read_text(), str(p))
    ]
    assert found == []


@dataclass
class _Report:
    valid: Verdict
    anomalies: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid}


@pytest.mark.parametrize("verdict", VERDICTS)
def test_verify_exits_by_the_table(
    verdict: Verdict,
    odd_table: dict[object, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The command's own path (arguments, storage, `check_safe`, JSON) with the verdict given."""
    monkeypatch.setattr("statebed_cli.commands.verify.verify_lineage", lambda *a, **k: _Report(verdict))
    code, out, err = run_cli(capsys, "verify", "lineage", str(tmp_path), "--json")
    assert (code, json.loads(out or "{}").get("valid")) == (ODD[verdict], verdict), err


@pytest.mark.parametrize("verdict", VERDICTS)
def test_load_run_exits_by_the_table(verdict: Verdict, odd_table: dict[object, int]) -> None:
    assert LoadResult(run_dir="r", valid=verdict).exit_code == ODD[verdict]
    assert LoadResult(run_dir="r", valid=verdict, lost_acknowledged=1).exit_code == ODD[False]  # a lost record is invalid


@pytest.mark.parametrize("verdict", VERDICTS)
def test_chaos_run_exits_by_the_table(verdict: Verdict, odd_table: dict[object, int]) -> None:
    result = ExperimentResult("x", 1, "unknown", [], [], 0, 0, None, "r", 0.0, -1, "")
    result.settle([True, verdict])
    assert (result.valid, result.exit_code) == (verdict, ODD[verdict])


def test_a_faulted_run_that_left_nothing_exits_unknown_by_the_table(odd_table: dict[object, int], tmp_path: Path) -> None:
    """The judge's early return (no run directory) takes its code from the table too (it was a literal 3)."""
    exp = parse_experiment({"name": "x"})
    history = History(tmp_path / "history.jsonl")
    nemesis = make_nemesis(exp, [], tmp_path / "faulted", Control(tmp_path / "control.json"), history, None, 1, lambda _: None)
    result = ExperimentResult("x", 1, "unknown", [], [], 0, 0, None, str(tmp_path), 0.0, -1, "")
    died = DriverExit(pid=1, code=1, start=0.0, end=1.0, timed_out=False, stdout="", stderr="")
    judge(exp, tmp_path / "faulted", None, [died], nemesis, None, history, result, lambda _: None)
    assert (result.valid, result.exit_code) == ("unknown", ODD["unknown"])
    assert "the faulted run left no run directory" in result.reasons
