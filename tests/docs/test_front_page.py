"""The README is a front page, the reference lives in docs/: the README stays short, its
set-up section gives exactly the two commands (`make run`, `make test`) and names every
prerequisite tests/prereqs.sh checks, and every relative link in README.md and docs/*.md
reaches a file (and a heading, when it names one) that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
REFERENCE = ["cli", "store", "chaos", "load", "rewind-cleanup", "kubernetes", "results"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def section(text: str, title: str) -> str:
    """The body of the `## title` section, up to the next `## ` heading."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert found is not None, f"no '## {title}' section"
    return found.group(1)


def commands(markdown: str) -> list[str]:
    """Command lines of the fenced shell blocks, comments dropped."""
    blocks = re.findall(r"^```sh\n(.*?)^```", markdown, re.M | re.S)
    lines = (line.split("#", 1)[0].strip() for block in blocks for line in block.splitlines())
    return [line for line in lines if line]


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    titles = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", t.strip().lower()).replace(" ", "-") for t in titles}


def test_the_readme_is_a_front_page_of_at_most_150_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; the reference belongs in docs/"


def test_the_set_up_section_has_exactly_the_two_commands() -> None:
    setup = section(README.read_text(), "Set up and run")
    assert commands(setup) == ["make run", "make test"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "make test" in ci  # CI runs the README's test command, not its own


def test_every_prerequisite_the_check_names_is_in_the_set_up_section() -> None:
    setup = section(README.read_text(), "Set up and run")
    packages = set(re.findall(r"apt-get install ([\w.+-]+)", (ROOT / "tests" / "prereqs.sh").read_text()))
    assert {"python3", "python3-venv", "openjdk-17-jre-headless", "chromium"} <= packages  # the check still names them
    missing = sorted(p for p in packages if f"`{p}`" not in setup)
    assert not missing, f"README's prerequisites do not name {missing}"
    for needed in ("Python 3.11+", "`make`", "Java 17", "Chromium"):
        assert needed in setup, needed


def test_the_readme_links_every_reference_page() -> None:
    linked = set(LINK.findall(README.read_text()))
    for name in REFERENCE:
        assert (ROOT / "docs" / f"{name}.md").is_file(), name
        assert f"docs/{name}.md" in linked, f"README does not link docs/{name}.md"


def test_every_relative_link_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:: not a file of the repository
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or ROOT not in dest.parents:
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert len(PAGES) > len(REFERENCE) and not broken, broken


def test_the_native_table_has_a_row_for_every_fault_that_applies_to_spark_s_store() -> None:
    """Issue 28: native-v1 and native-v2 columns for every fault kind the matrix runs on Spark's
    own store (docs/results.md, linked from the README); each kind that does not apply is named
    as such below the table."""
    from statebed_chaos.faults import KINDS
    from statebed_chaos.matrix_presets import PRESETS, plan_cells

    assert "docs/results.md#sparks-own-store-under-faults-native-v1-and-native-v2-per-fault" in README.read_text()
    body = section((ROOT / "docs" / "results.md").read_text(), "Spark's own store under faults: native-v1 and native-v2 per fault")
    rows = [line.split("|")[1:-1] for line in body.splitlines() if line.startswith("| `")]
    assert rows and all(len(r) == 3 and all(c.strip() for c in r) for r in rows), rows
    in_rows = {k for r in rows for k in re.findall(r"`([a-z0-9-]+)`", r[0]) if k in KINDS}
    cells, skipped = plan_cells(PRESETS["full"], 1, workloads=["sample3"], formats=["native-v1", "native-v2"])
    assert in_rows == {c.fault for c in cells}, in_rows ^ {c.fault for c in cells}
    rest = body.split("\n\n")[-2] if body.strip() else ""
    for kind in {s.fault for s in skipped}:
        assert kind in rest or (kind.startswith("storage-") and "Storage faults" in rest), kind
