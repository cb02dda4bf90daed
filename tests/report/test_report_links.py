"""Links in reports are relative paths or nothing (issue 24, item 7): a cell directory or a
`run_dir` named `javascript:...` never becomes a link with that scheme."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from statebed_report import write_report
from statebed_report.html import safe_href

EVIL = "javascript:alert(document.domain)"


@pytest.mark.parametrize(
    ("path", "href"),
    [
        ("cell-1/report.html", "./cell-1/report.html"),
        ("../other matrix/c/report.html", "./../other%20matrix/c/report.html"),
        (f"{EVIL}/report.html", "./javascript%3Aalert%28document.domain%29/report.html"),
        ("/etc/passwd", None),
        ("//evil.example/x", None),
        ("\\\\evil.example\\x", None),
        ("", None),
        (None, None),
    ],
)
def test_safe_href(path: str | None, href: str | None) -> None:
    assert safe_href(path) == href


def _hrefs(page: str) -> list[str]:
    """The links of the page's own body (plotly.js, inlined in the head, has its own)."""
    return re.findall(r'<a href="([^"]*)"', page[page.index("<main>") :])


def _cell(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "experiment.yaml").write_text("name: x\n")
    (d / "verdict.json").write_text('{"valid": false, "anomalies": []}')
    (d / "report.html").write_text("<html></html>")  # kept cells have their report already
    return d


def test_a_cell_directory_named_like_a_scheme_links_relatively(tmp_path: Path) -> None:
    """A matrix in progress links every cell directory present."""
    _cell(tmp_path, EVIL)
    page = write_report(tmp_path).read_text()
    hrefs = _hrefs(page)
    assert hrefs == ["./javascript%3Aalert%28document.domain%29/report.html"], hrefs


def test_a_run_dir_named_like_a_scheme_links_relatively(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A finished matrix links each kept cell by its `run_dir` (here relative, as a hand-edited record could)."""
    monkeypatch.chdir(tmp_path)
    _cell(tmp_path / "elsewhere", EVIL)
    run = {"fault": "f", "workload": "count", "format": "v1", "seed": 1, "valid": False, "cell": "c1", "run_dir": f"elsewhere/{EVIL}"}
    summary = {"preset": "quick", "cells": 1, "exit_code": 1, "notes": [], "skipped": [], "failing": []}
    (tmp_path / "matrix.json").write_text(json.dumps({"runs": [run], "summary": summary}))
    page = write_report(tmp_path).read_text()
    hrefs = _hrefs(page)
    assert hrefs and all(h == "./elsewhere/javascript%3Aalert%28document.domain%29/report.html" for h in hrefs), hrefs
