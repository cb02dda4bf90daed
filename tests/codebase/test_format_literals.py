"""One owner of the formats (src/statebed_store/formats.py): no other source module names one
to decide anything. A module asks a `Format` (`get_format(name).native`, `.ids`, `.plugin`,
`.version`, `.store_format`) or uses the owner's constants (`V1`, `RUN_FORMATS`, ...).

Flagged outside the owner: a `native`, `native-v1` or `native-v2` string anywhere but a
docstring, a dict key or a subscript (JSON field names: the matrix's `"native"` counts); a `v1`
or `v2` string compared with something, passed as `mode=` / `format=` / `choices=` /
`default=`, given as a field's default, or listed next to another format name. A module-level
UPPERCASE constant may hold such strings when they are a file header's version (Spark's
commit log says `v1`): its name says what it is."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("src", "k8s")
OWNER = ROOT / "src" / "statebed_store" / "formats.py"
NATIVE = {"native", "native-v1", "native-v2"}
SHORT = {"v1", "v2"}
KEYWORDS = {"mode", "format", "choices", "default"}


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _constant_name(parent: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Inside a module-level assignment to UPPERCASE names (`_SCHEMA_V1, _SCHEMA_V2 = ...` too)."""
    node: ast.AST | None = parent
    while node is not None and not isinstance(node, (ast.Assign, ast.AnnAssign)):
        node = parents.get(id(node))
    if node is None or not isinstance(parents.get(id(node)), ast.Module):
        return False
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    names = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    return all(isinstance(n, ast.Name) and n.id.lstrip("_").isupper() for n in names)


def _is_key(node: ast.Constant, parent: ast.AST) -> bool:
    return (isinstance(parent, ast.Dict) and any(k is node for k in parent.keys)) or (
        isinstance(parent, ast.Subscript) and parent.slice is node
    )


def _short_flagged(node: ast.Constant, parent: ast.AST) -> bool:
    if isinstance(parent, ast.Compare):
        return True
    if isinstance(parent, ast.keyword):
        return parent.arg in KEYWORDS
    if isinstance(parent, ast.AnnAssign):
        return isinstance(parent.target, ast.Name) and parent.target.id in ("mode", "format")
    if isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
        names = [e.value for e in parent.elts if isinstance(e, ast.Constant)]
        return sum(n in SHORT | NATIVE for n in names) >= 2
    return False


def literals(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    parents, docs = _parents(tree), _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docs:
            continue
        if node.value not in NATIVE | SHORT:
            continue
        parent = parents[id(node)]
        if _is_key(node, parent) or _constant_name(parent, parents):
            continue
        if node.value in NATIVE or _short_flagged(node, parent):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    return found


def sources() -> list[Path]:
    """Every Python file of the packages (and the k8s scripts)."""
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if ".venv" not in p.parts]
    assert len(files) > 150
    return files


def test_no_format_literal_outside_its_owner() -> None:
    files = [p for p in sources() if p != OWNER]
    found = [hit for p in files for hit in literals(p)]
    assert found == [], "\n".join(found)


def test_the_ban_sees_what_it_bans(tmp_path: Path) -> None:
    """Positive control: each shape the ban covers is flagged, and what it allows is not."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(opts, p):\n"
        "    if opts.mode == 'v1': pass\n"
        "    p.add_argument('--format', choices=('v1', 'v2'))\n"
        "    x = 'native-v2'\n"
        "    g(format='v2')\n"
        "    return {'native': 1}, opts['native'], COUNTS\n"
        "COUNTS = ('v1', 'v2')\n"
    )
    hits = literals(bad, tmp_path)
    assert sorted(h.split(": ", 1)[0].rsplit(":", 1)[1] for h in hits) == ["2", "3", "3", "4", "5"], hits


OTHER_NAMES = {"mode", "modes"}  # the code calls a format `format` (JSON keys are the owner's: to_run_json)


def other_names(path: Path, root: Path = ROOT) -> list[str]:
    """Attributes, parameters and annotated fields called `mode`: the format under a second name.
    A plain local (`mode = env(...)`) or a keyword to a library (`mode="lines"`) is not flagged."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        name = (
            node.attr
            if isinstance(node, ast.Attribute)
            else node.arg
            if isinstance(node, ast.arg)
            else node.target.id
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            else None
        )
        if name in OTHER_NAMES:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    return found


def test_one_name_for_a_format_in_the_code() -> None:
    found = [hit for p in sources() for hit in other_names(p)]
    assert found == [], "\n".join(found)


def test_the_one_name_ban_sees_what_it_bans(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "class C:\n    mode: str\n    modes = ()\ndef f(opts, mode):\n    mode2 = opts.mode\n    g(mode='lines')\n    mode = 1\n"
    )
    hits = other_names(bad, tmp_path)
    assert sorted(h.split(": ", 1)[0].rsplit(":", 1)[1] for h in hits) == ["2", "4", "5"], hits
