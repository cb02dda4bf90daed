"""`statebed ls`: every store, version and id, what is committed, and each file's lineage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import STORE, Written, run_cli, write_versions

from statebed_store import SnapshotUploader, StateStoreProvider, Storage, StoreOptions


def lineage(w: Written, versions: range) -> list[dict[str, Any]]:
    return [{"version": v, "id": w.results[v].checkpoint_id} for v in versions]


def test_ls_json_document(
    capsys: pytest.CaptureFixture[str], local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    w = write_versions(local_storage, options, uploader, 4, snapshot_at=(2,), commit_log=True)
    # a second, uncommitted attempt of version 4 (a speculative task's orphan)
    with StateStoreProvider(local_storage, STORE, options, uploader=uploader) as p, p.load(3, w.results[3].checkpoint_id) as txn:
        txn.put_many([b"x"], [b"y"])
        orphan = txn.commit(snapshot=False)
    code, out, err = run_cli(capsys, "ls", local_storage.url, "--json")
    assert code == 0, err
    doc = json.loads(out)

    def item(v: int, cid: str | None, committed: bool, lin: list[dict[str, Any]]) -> dict[str, Any]:
        # needed: what the committed plans read (version 2's snapshot shadows its changelog; the orphan none)
        needed = [] if not committed else ["snapshot"] if v == 2 else ["changelog"]
        return {
            "id": cid,
            "committed": committed,
            "changelog": True,
            "snapshot": v == 2,
            "needed": needed,
            "lineage": lin,
            "changelogFormat": 3,
        }

    versions = [
        {"version": 1, "ids": [item(1, w.results[1].checkpoint_id, True, [])]},
        {"version": 2, "ids": [item(2, w.results[2].checkpoint_id, True, lineage(w, range(1, 2)))]},
        {"version": 3, "ids": [item(3, w.results[3].checkpoint_id, True, lineage(w, range(2, 3)))]},
        {
            "version": 4,
            "ids": sorted(
                [
                    item(4, w.results[4].checkpoint_id, True, lineage(w, range(2, 4))),
                    item(4, orphan.checkpoint_id, False, lineage(w, range(2, 4))),  # loaded from snapshot 2
                ],
                key=lambda e: e["id"],
            ),
        },
    ]
    assert doc == {
        "checkpoint": local_storage.url,
        "format": "v2",
        "commits": {"count": 4, "latestBatch": 3},
        "stores": [{"operator": 0, "partition": 0, "store": "default", "dir": "state/0/0", "versions": versions}],
        "notes": [],
    }


def test_ls_of_an_empty_checkpoint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run_cli(capsys, "ls", str(tmp_path), "--json")
    assert code == 0
    assert json.loads(out) == {
        "checkpoint": str(tmp_path),
        "format": "empty",
        "commits": {"count": 0, "latestBatch": None},
        "stores": [],
        "notes": [],
    }


def test_ls_reports_a_damaged_file_in_its_entry(
    capsys: pytest.CaptureFixture[str], local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    w = write_versions(local_storage, options, uploader, 3, commit_log=True)
    local_storage.write(w.path(2), b"\x00garbage")
    code, out, err = run_cli(capsys, "ls", local_storage.url, "--json")
    assert code == 0, err
    entries = {e["id"]: e for v in json.loads(out)["stores"][0]["versions"] for e in v["ids"]}
    assert w.display(2) in entries[w.results[2].checkpoint_id]["error"]
    assert "error" not in entries[w.results[3].checkpoint_id]


def test_ls_human_output(
    capsys: pytest.CaptureFixture[str], local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    w = write_versions(local_storage, options, uploader, 2, commit_log=True)
    code, out, _ = run_cli(capsys, "ls", local_storage.url)
    assert code == 0
    assert f"{local_storage.url}: format v2, 2 commits, latest batch 1" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("1 ", "2 "))]
    id1, id2 = (w.results[1].checkpoint_id or "")[:8], (w.results[2].checkpoint_id or "")[:8]
    assert rows == [["1", id1, "yes", "changelog", "changelog"], ["2", id2, "yes", "changelog", "changelog", f"1:{id1}"]]
    assert "needed" in out.splitlines()[3].split()  # the column: what a committed load plan reads


def test_ls_skips_directories_that_are_not_ascii_numbers(
    capsys: pytest.CaptureFixture[str], local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    w = write_versions(local_storage, options, uploader, 1, commit_log=True)
    for junk in ("state/\u00b2/0", "state/0/\u0663", "state/x/0", "state/0/_metadata"):
        local_storage.write(f"{junk}/1_{w.results[1].checkpoint_id}.changelog", b"junk")
    code, out, err = run_cli(capsys, "ls", local_storage.url, "--json")
    assert code == 0, err
    assert [(s["operator"], s["partition"], s["store"]) for s in json.loads(out)["stores"]] == [(0, 0, "default")]
