"""The command-level checks every native checkpoint gets: ls, ls --rebuildable, verify lineage, diff, rewind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import run_cli

Capsys = pytest.CaptureFixture[str]
Where = tuple[int, int, str]


def _json(capsys: Capsys, *argv: str, codes: tuple[int, ...] = (0,)) -> Any:
    code, out, err = run_cli(capsys, *argv)
    assert code in codes, f"statebed {' '.join(argv)} exited {code}: {err}"
    return json.loads(out)


def _lines(capsys: Capsys, *argv: str) -> list[dict[str, Any]]:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, f"statebed {' '.join(argv)} exited {code}: {err}"
    return [json.loads(line) for line in out.splitlines()]


def committed_batches(ckpt: Path) -> list[int]:
    return sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())


def check_ls(capsys: Capsys, ckpt: Path, stores: int) -> None:
    """`ls` names every store; `ls --rebuildable` says every committed batch can be rebuilt in each."""
    listed = _json(capsys, "ls", "--json", str(ckpt))
    assert len(listed["stores"]) == stores, [(s["operator"], s["partition"], s["store"]) for s in listed["stores"]]
    assert all(v["ids"] for s in listed["stores"] for v in s["versions"])
    rebuild = _json(capsys, "ls", "--rebuildable", "--json", str(ckpt))
    batches = committed_batches(ckpt)
    assert rebuild["committed"] == [[batches[0], batches[-1]]]
    assert rebuild["rebuildable"] == rebuild["committed"], rebuild


def check_lineage(capsys: Capsys, ckpt: Path, fmt: int) -> None:
    """V2: one linear, loadable history (exit 0). V1 records no ids: unknown (exit 3), never valid."""
    code, out, err = run_cli(capsys, "verify", "lineage", "--json", str(ckpt))
    assert code == (0 if fmt == 2 else 3), f"{ckpt}: exit {code}: {out[-400:]} {err}"
    doc = json.loads(out)
    assert doc["anomalies"] == [], doc["anomalies"]


def state_at(capsys: Capsys, ckpt: Path, batch: int) -> dict[Where, dict[str, str]]:
    """Every store's state committed at `batch`: {(operator, partition, store): {key: value}} (rendered)."""
    out: dict[Where, dict[str, str]] = {}
    for d in _lines(capsys, "dump", str(ckpt), "--batch", str(batch)):
        key = d.get("key", d.get("key_b64"))
        out.setdefault((d["operator"], d["partition"], d["store"]), {})[key] = d.get("value", d.get("value_b64"))
    return out


def check_diff(capsys: Capsys, ckpt: Path, a: int, b: int) -> int:
    """`diff --batch a --batch b` lists exactly the keys whose values differ between the two dumps; their number."""
    sa, sb = state_at(capsys, ckpt, a), state_at(capsys, ckpt, b)
    want = set()
    for where in set(sa) | set(sb):
        ka, kb = sa.get(where, {}), sb.get(where, {})
        want |= {(*where, k) for k in set(ka) | set(kb) if ka.get(k) != kb.get(k)}
    got = {
        (d["operator"], d["partition"], d["store"], d.get("key", d.get("key_b64")))
        for d in _lines(capsys, "diff", str(ckpt), "--batch", str(a), "--batch", str(b))
    }
    assert got == want
    assert want, f"{ckpt}: batches {a} and {b} hold the same state: the diff checked nothing"
    return len(want)


def check_rewind(capsys: Capsys, ckpt: Path, scratch: Path, batch: int) -> None:
    """A rewound copy's latest state is the state batch `batch` committed, store by store."""
    copy = scratch / f"{ckpt.name}-rewound"
    shutil.copytree(ckpt, copy)
    before = state_at(capsys, copy, batch)
    code, _, err = run_cli(capsys, "rewind", "--to-batch", str(batch), str(copy))
    assert code == 0, err
    assert committed_batches(copy)[-1] == batch
    assert state_at(capsys, copy, batch) == before
