"""Dependencies point one way: base <- store <- model <- verify <- job <- chaos <- load <- report <- cli (every import, parsed with ast).

base (the ground floor: errors, logging, JSON safety, printable names, netaddr, durations,
process identity, local disk I/O) imports none of the others; store imports only base; model imports only store (and never pyspark: it is
Spark-free); verify (the judge: verifiers, history, attempts check) imports only store and model,
never pyspark, so a verdict needs no JVM; job never imports chaos or above; chaos never imports load, report or cli;
load (the ingest service, Locust, `load run`) never imports report or cli; report reads the
records of runs, matrices and load runs and never imports cli. Imports inside
functions count too: a lazy import is still a dependency. So does a subprocess hop: a
`[..., "-m", "statebed_x...", ...]` command in a layer below x starts the layer above it.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "statebed_base": "src/statebed_base",
    "statebed_store": "src/statebed_store",
    "statebed_model": "src/statebed_model",
    "statebed_verify": "src/statebed_verify",
    "statebed_job": "src/statebed_job",
    "statebed_chaos": "src/statebed_chaos",
    "statebed_load": "src/statebed_load",
    "statebed_report": "src/statebed_report",
    "statebed_cli": "src/statebed_cli",
}
ORDER = list(PACKAGES)  # bottom to top: each package may import only those before it
SPARK_FREE = {"statebed_model", "statebed_verify"}  # a verdict needs no JVM
FORBIDDEN = {pkg: set(ORDER[i + 1 :]) | ({"pyspark", "py4j"} if pkg in SPARK_FREE else set()) for i, pkg in enumerate(ORDER)}


def imported(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import in a module."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out += [(n.lineno, a.name.split(".")[0]) for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            out.append((n.lineno, n.module.split(".")[0]))
    return out


def spawned(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, top-level module) of every `-m MODULE` in a list or tuple literal (a command a module starts)."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.List | ast.Tuple):
            for a, b in itertools.pairwise(n.elts):
                if isinstance(a, ast.Constant) and a.value == "-m" and isinstance(b, ast.Constant) and isinstance(b.value, str):
                    out.append((b.lineno, b.value.split(".")[0]))
    return out


def violations(package: str) -> list[str]:
    found = []
    for f in sorted((ROOT / PACKAGES[package]).rglob("*.py")):
        tree = ast.parse(f.read_text(), str(f))
        for line, top in imported(tree) + spawned(tree):
            if top in FORBIDDEN[package]:
                found.append(f"{f.relative_to(ROOT)}:{line} imports {top}")
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_dependencies_point_one_way(package: str) -> None:
    assert violations(package) == []


def test_the_check_sees_lazy_imports() -> None:
    tree = ast.parse("def f():\n    from statebed_cli.main import main\n    import pyspark.sql\n")
    assert imported(tree) == [(2, "statebed_cli"), (3, "pyspark")]


def test_the_check_sees_subprocess_hops() -> None:
    """Positive control: the hop the chaos harness made (`statebed run` through the CLI) is an arrow to cli."""
    tree = ast.parse('cmd = [sys.executable, "-m", "statebed_cli.main", "run"]\nother = ("-m", "statebed_job", d)\n')
    assert spawned(tree) == [(1, "statebed_cli"), (2, "statebed_job")]
    assert ("statebed_cli" in FORBIDDEN["statebed_chaos"]) and ("statebed_job" not in FORBIDDEN["statebed_chaos"])


def test_every_package_of_the_tree_has_a_place_in_the_order_and_ships_py_typed() -> None:
    """A new statebed_* package cannot escape the rule, and type information ships with each one."""
    found = {d.name: str(d.relative_to(ROOT)) for d in ROOT.glob("src/statebed_*") if (d / "__init__.py").is_file()}
    assert found == PACKAGES
    assert [p for p in PACKAGES.values() if not (ROOT / p / "py.typed").is_file()] == []


def test_no_folder_at_the_root_is_named_like_a_package() -> None:
    """`pip install -v -e .` prints setuptools' "Please be careful with folders in your working
    directory with the same name as your package": the packages live one level down
    (`src/statebed_store`), so a folder at the root named like one would shadow it from there.
    There is none (`make` installs with --quiet: a newcomer sees no such line)."""
    assert sorted(d.name for d in ROOT.iterdir() if d.is_dir() and d.name in PACKAGES) == []
    assert all(len(Path(p).parts) == 2 for p in PACKAGES.values())
