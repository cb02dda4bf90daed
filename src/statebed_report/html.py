"""The page: one self-contained HTML file (plotly.js, styles and data inline, nothing fetched).

Charts are Plotly figures rendered by plotly.js, embedded once per page; this module only lays
them out with tables and text. Everything from a run's records is escaped.
"""

from __future__ import annotations

import html
import json
import posixpath
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from statebed_verify import Verdict

__all__ = ["VERDICT_CLASS", "as_verdict", "cell", "code", "esc", "figure", "page", "safe_href", "section", "table", "verdict_label"]

VERDICT_CLASS = {True: "valid", False: "invalid", "unknown": "unknown", None: "unknown"}
_CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1f2328; background: #f6f8fa; }
main { max-width: 1280px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #d0d7de; }
.sub { color: #57606a; margin: 0 0 12px; } .note { color: #57606a; font-size: 13px; }
section { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; padding: 4px 16px 14px; margin: 14px 0; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; } th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font: 12.5px ui-monospace, SFMono-Regular, Menlo, monospace; } pre { background: #f6f8fa; padding: 8px; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
.valid { background: #1a7f37; } .invalid { background: #cf222e; } .unknown { background: #9a6700; } .na { background: #8c959f; }
td.valid, td.invalid, td.unknown, td.na { color: #fff; font-weight: 600; text-align: center; } td.valid a, td.invalid a, td.unknown a { color: #fff; }
.verdict { font-size: 20px; padding: 10px 16px; border-radius: 6px; color: #fff; margin: 10px 0; }
.progress { background: #ddf4ff; border: 1px solid #54aeff; padding: 8px 12px; border-radius: 6px; margin: 10px 0; font-weight: 600; }
.plot { width: 100%; }
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def safe_href(path: str | None) -> str | None:
    """An href for a file next to the report: a relative path, percent-quoted and `./`-prefixed,
    so no name (`javascript:...`, `//host`, `\\\\host`) can become a scheme or another host; None
    (no link) for anything else: an absolute path or URL, or a path with a backslash or NUL."""
    if not path or posixpath.isabs(path) or "\\" in path or "\0" in path:
        return None
    return "./" + urllib.parse.quote(path, safe="/")


def as_verdict(value: Any) -> Verdict:
    """A verdict read from a record: true and false as they are, anything else unknown."""
    return value if isinstance(value, bool) else "unknown"


def verdict_label(valid: Any) -> str:
    return {True: "valid", False: "INVALID"}.get(valid, "unknown") if isinstance(valid, bool) else "unknown"


def code(text: str) -> str:
    return f"<pre><code>{esc(text)}</code></pre>"


def cell(value: Any) -> str:
    """A table cell's text: lists and dicts as compact JSON, numbers right-aligned."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="num">{esc(value)}</td>'
    if isinstance(value, (list, dict)):
        return f"<td><code>{esc(json.dumps(value, default=str, ensure_ascii=False))}</code></td>"
    return f"<td>{esc(value)}</td>"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, table_id: str | None = None, raw: bool = False) -> str:
    """A table; with `raw`, cells are already HTML (`<td ...>...</td>`)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(str(c) if raw else cell(c) for c in row) + "</tr>" for row in rows)
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def section(title: str, body: str, *, ident: str) -> str:
    return f'<section id="{esc(ident)}"><h2>{esc(title)}</h2>{body}</section>'


def figure(fig: go.Figure, div_id: str, height: int) -> str:
    """A Plotly figure as a div and its newPlot call (plotly.js itself is in the page head)."""
    fig.update_layout(height=height, template="plotly_white", margin={"l": 60, "r": 20, "t": 40, "b": 40})
    return str(
        pio.to_html(
            fig, full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG, default_height=f"{height}px", default_width="100%"
        )
    )


def page(title: str, subtitle: str, body: Sequence[str], *, kind: str) -> str:
    """The whole document; `kind` (run, experiment, matrix) is on <body> for tools that read it."""
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>'
        f'<body data-kind="{esc(kind)}"><main><h1>{esc(title)}</h1><p class="sub">{esc(subtitle)} · report generated {generated}</p>'
        + "".join(body)
        + "</main></body></html>\n"
    )
