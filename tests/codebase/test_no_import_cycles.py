"""No import cycle among statebed's modules: every import counts, at module level and inside
functions alike (a lazy import that closes a circle still ties the two modules together).

An import names the most specific module it can: `from pkg import sub` is an edge to
`pkg.sub` when that is a module, else to `pkg` (its __init__). The parent package a
Python import runs first is not an edge: a package's __init__ re-exporting its modules
would otherwise close a circle with each of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from test_layering import PACKAGES as _LAYERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = list(_LAYERS.values())  # every package, as the layering test lists them


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages."""
    out = {}
    for pkg in PACKAGES:
        base = (ROOT / pkg).parent
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(f.relative_to(base).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (relative imports resolved against `importer`)."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def edges(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The statebed modules `name` imports, anywhere in its body."""
    out = set()
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names if a.name in known}
        elif isinstance(n, ast.ImportFrom):
            mod = _resolve(name, path.name == "__init__.py", n)
            for a in n.names:
                target = f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod
                if target in known and target != name:
                    out.add(target)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_finder_sees_a_circle_through_a_lazy_import() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("def f():\n    from .failpoints import parse_spec\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _resolve("statebed_store.failpoint_control", False, node) == "statebed_store.failpoints"


def test_no_import_cycle_among_statebed_modules() -> None:
    known = modules()
    graph = {name: edges(name, path, known) for name, path in known.items()}
    assert cycles(graph) == []
