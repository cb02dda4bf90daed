"""docs/testing.md against the code: the tests marked `e2e` are exactly the table's "moved" rows,
each is also `slow`, each row names a `make test` test that exists and is not `e2e`, and the
Makefile runs the tiers as the page says."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "testing.md").read_text()
NODE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)")


def _marks(decorators: list[ast.expr]) -> set[str]:
    """`pytest.mark.NAME` (called or not) among decorators, or in a `pytestmark` value."""
    found = set()
    for d in decorators:
        node = d.func if isinstance(d, ast.Call) else d
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
            found.add(node.attr)
    return found


def marked_tests() -> dict[tuple[str, str], set[str]]:
    """Every test function under tests/ and its marks (its own and its module's `pytestmark`)."""
    out: dict[tuple[str, str], set[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        module: set[str] = set()
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets):
                values = stmt.value.elts if isinstance(stmt.value, ast.List | ast.Tuple) else [stmt.value]
                module |= _marks(values)
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name.startswith("test_"):
                out[(str(path.relative_to(ROOT)), stmt.name)] = module | _marks(stmt.decorator_list)
    return out


def moved_rows() -> list[tuple[tuple[str, str], list[tuple[str, str]]]]:
    section = DOC.split("## What only `make e2e` runs", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = line.split("|")
        if line.startswith("| `tests/") and len(cells) >= 4:
            (moved,) = NODE.findall(cells[1])
            rows.append((moved, NODE.findall(cells[2])))
    return rows


def test_the_e2e_tests_are_the_tables_moved_rows_and_all_slow() -> None:
    tests = marked_tests()
    e2e = {t for t, marks in tests.items() if "e2e" in marks}
    assert e2e, "no test is marked e2e"
    assert {moved for moved, _ in moved_rows()} == e2e
    assert all("slow" in tests[t] for t in e2e), [t for t in e2e if "slow" not in tests[t]]


def test_each_moved_test_names_a_make_test_test_that_covers_it() -> None:
    tests = marked_tests()
    for moved, covering in moved_rows():
        assert covering, f"{moved}: no make-test test named"
        for c in covering:
            assert c in tests, f"{moved}: {c} is no test"
            assert "e2e" not in tests[c], f"{moved}: {c} is itself e2e"


def test_every_make_test_test_the_page_names_exists_outside_e2e() -> None:
    tests = marked_tests()
    section = DOC.split("## What `make test` proves on real Spark", 1)[1].split("\n## ", 1)[0]
    named = NODE.findall(section)
    assert len(named) >= 5
    for t in named:
        assert t in tests and "e2e" not in tests[t], t
    files = set(re.findall(r"`(tests/[\w/]+\.py)", section))
    assert files and all((ROOT / f).is_file() for f in files), files


def test_the_makefile_runs_the_tiers_as_the_page_says() -> None:
    make = (ROOT / "Makefile").read_text()
    suite = re.search(r"^test:.*\n\t@\$\(MAKE\) .*-j2 .*check k8s-check jvm\n\t(.+)\n\t(.+)$", make, re.M)
    assert suite is not None, "make test runs two pytest stages"
    fast, spark = suite.groups()
    assert '-n 2 --ignore=tests/k8s --ignore=tests/kube -m "not slow and not e2e"' in fast and "suite-fast" in fast
    assert '-m "slow and not e2e" --durations=25' in spark and "-n " not in spark and "suite-spark" in spark
    e2e = re.search(r"^e2e:.*\n\t(.+)$", make, re.M)
    assert e2e is not None and "-m e2e" in e2e.group(1) and "--e2e-state=$(E2E_STATE)" in e2e.group(1)
    assert "E2E_STATE ?= runs/e2e-state/passed.tsv" in make and "runs/e2e-state/passed.tsv" in DOC
    assert re.search(r"^e2e-reset:.*\n\trm -f \$\(E2E_STATE\)$", make, re.M)
