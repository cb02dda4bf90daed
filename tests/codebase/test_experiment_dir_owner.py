"""One owner of the experiment and matrix directory's names (`statebed_model.experimentdir`),
and each of its files written whole by the store's one atomic writer.

The scan looks at every string constant in the packages (f-string parts too): one that *is*
an experiment-directory file name (`verdict.json`, `load/verdict.json`, ...) is a name spelled
outside its owner. Prose that mentions a name (docstrings, messages) is not a name.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest
from test_layering import PACKAGES as _LAYERS

from statebed_base.errors import NotRegularFileError, UsageError
from statebed_model.experimentdir import ExperimentDir, MatrixDir, control_file

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = list(_LAYERS.values())  # every package, as the layering test lists them
OWNER = Path("src/statebed_model/experimentdir.py")
# Being rewritten this round by other hands, to take their names from ExperimentDir: the one
# harness (issue 26) and the load run's Prometheus exporter (issue 29).
PENDING: set[Path] = set()
NAME = re.compile(r"^[\w./-]*(verdict\.json|history\.jsonl|experiment\.yaml|matrix\.json|control\.json|report\.html|series\.jsonl)$")


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def spelled_names(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line name` for each string constant that is an experiment-directory file name."""
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(root)
    return [
        f"{rel}:{n.lineno} {n.value}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and NAME.match(n.value.strip())
    ]


def plain_writes(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line` for each `.write_text(...)` call: a write that is not atomic (scratch files in a temporary directory use write_bytes)."""
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(root)
    return [
        f"{rel}:{n.lineno}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "write_text"
    ]


def test_the_scan_finds_a_spelled_name(tmp_path: Path) -> None:
    """Positive control: the scan sees a name in a plain string and inside an f-string."""
    mod = tmp_path / "_probe_module.py"
    mod.write_text("x = 'history.jsonl'\ny = f\"{x / 'verdict.json'}\"\nz = 'no verdict.json yet'\nPath('a').write_text('b')\n")
    assert [s.split(" ", 1)[1] for s in spelled_names(mod, tmp_path)] == ["history.jsonl", "verdict.json"]
    assert len(plain_writes(mod, tmp_path)) == 1


def test_only_experimentdir_spells_experiment_directory_names() -> None:
    found = [s for p in _modules() if p.relative_to(ROOT) not in {OWNER, *PENDING} for s in spelled_names(p)]
    assert found == []


def test_no_plain_write_text_in_the_packages() -> None:
    found = [s for p in _modules() if p.relative_to(ROOT) not in PENDING for s in plain_writes(p)]
    assert found == []


def test_layout(tmp_path: Path) -> None:
    d = ExperimentDir(tmp_path / "exp")
    assert (d.experiment.name, d.verdict.name, d.history.name) == ("experiment.yaml", "verdict.json", "history.jsonl")
    assert d.load_verdict == tmp_path / "exp" / "load" / "verdict.json"
    assert control_file(d.faulted) == tmp_path / "exp" / "faulted" / "failpoints" / "control.json"
    assert d.reproduce(7) == f"statebed chaos run {tmp_path / 'exp' / 'experiment.yaml'} --seed 7"
    assert MatrixDir(tmp_path).cell("c1").root == tmp_path / "c1"


def test_files_round_trip_and_are_published_whole(tmp_path: Path) -> None:
    d = ExperimentDir(tmp_path)
    d.write_verdict({"valid": True, "seed": 3})
    assert d.read_verdict() == {"valid": True, "seed": 3}
    assert d.verdict.read_text().endswith("}\n")
    d.add_processes([{"pid": 1}])
    d.add_processes([{"pid": 2}])
    assert [p["pid"] for p in __import__("json").loads(d.processes.read_text())] == [1, 2]
    m = MatrixDir(tmp_path)
    m.write_record({"runs": [], "summary": {}})
    assert m.record.read_text() == '{\n  "runs": [],\n  "summary": {}\n}\n'
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # no temp file left behind


def test_a_fifo_where_a_file_goes_is_an_error_never_replaced(tmp_path: Path) -> None:
    d = ExperimentDir(tmp_path)
    os.mkfifo(d.verdict)
    with pytest.raises(NotRegularFileError):
        d.write_verdict({"valid": True})
    with pytest.raises(UsageError, match="verdict.json"):
        d.read_verdict()
    assert Path(d.verdict).is_fifo()
