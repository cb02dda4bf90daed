"""ls --rebuildable, dump --batch, diff and rewind on the committed Spark 4.1.4 / 4.3.0 V2 checkpoints
and on statebed checkpoints; expectations come from the fixture files (commit JSON, changelog replay)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import run_cli, tree_hash, write_versions
from native_fixtures import QUERIES, SPARK_VERSIONS
from test_cli_native import Store, committed, replayed

from statebed_store import CommitLog, SnapshotUploader, StoreOptions, open_storage
from statebed_store.cleanup import cleanup_store

Capsys = pytest.CaptureFixture[str]


def run_json(capsys: Capsys, *argv: str) -> Any:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


def decode(doc: dict[str, Any], field: str) -> bytes | None:
    if f"{field}_b64" in doc:
        return base64.b64decode(doc[f"{field}_b64"])
    return None if doc[field] is None else str(doc[field]).encode()


def copy(native: dict[str, Path], spark: str, query: str, tmp_path: Path) -> Path:
    root = tmp_path / query
    shutil.copytree(native[spark] / query, root)
    return root


def names(d: Path) -> list[str]:
    return sorted((p.name for p in d.iterdir()), key=lambda n: (len(n), n))


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
@pytest.mark.parametrize("query", QUERIES)
def test_every_committed_batch_of_the_fixtures_is_rebuildable(capsys: Capsys, native: dict[str, Path], spark: str, query: str) -> None:
    stores = committed(native[spark], query)
    last = max(v for ids in stores.values() for v in ids) - 1
    doc = run_json(capsys, "ls", str(native[spark] / query), "--rebuildable", "--json")
    assert doc["committed"] == doc["rebuildable"] == [[0, last]] and doc["latestBatch"] == last
    got = {Store(s["operator"], s["partition"], s["store"]): (s["rebuildable"], s["firstUnrebuildable"]) for s in doc["stores"]}
    assert got == {s: ([[0, last]], None) for s in stores}


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_rebuildable_names_the_file_retention_removed(capsys: Capsys, native: dict[str, Path], spark: str, tmp_path: Path) -> None:
    root = copy(native, spark, "agg", tmp_path)
    store, ids = next((s, i) for s, i in committed(tmp_path, "agg").items() if s.partition == 1)
    # what retention would remove below version 4: every file of versions 1..3 of this store
    gone = [p for u in (1, 2, 3) for p in (root / store.dir).glob(f"{u}_{ids[u]}.*")]
    for p in gone:
        p.unlink()
    snap = min((u for u in ids if u > 3 and (root / store.dir / f"{u}_{ids[u]}.zip").exists()), default=None)
    doc = run_json(capsys, "ls", str(root), "--rebuildable", "--json")
    entry = next(s for s in doc["stores"] if (s["operator"], s["partition"]) == (0, 1))
    first_ok = (snap or 4) - 1  # versions from the first remaining snapshot on (batch = version - 1) still load
    assert entry["rebuildable"] == [[first_ok, 9]] and doc["rebuildable"] == [[first_ok, 9]]
    bad = entry["firstUnrebuildable"]
    assert bad["batch"] == first_ok - 1 and bad["id"] == ids[first_ok]
    assert bad["file"] and not Path(bad["file"]).exists() and bad["file"] in bad["reason"]
    code, out, err = run_cli(capsys, "ls", str(root), "--rebuildable")
    assert code == 0 and f"batch {first_ok - 1} cannot" in out and bad["file"] in out
    # a rewind below it is refused naming that file, and changes nothing
    digest = tree_hash(root)
    code, _, err = run_cli(capsys, "rewind", str(root), "--to-batch", str(first_ok - 1))
    assert code == 2 and bad["file"] in err and tree_hash(root) == digest


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
@pytest.mark.parametrize("query", QUERIES)
def test_dump_every_store_at_every_committed_batch(capsys: Capsys, native: dict[str, Path], spark: str, query: str) -> None:
    root = native[spark] / query
    stores = committed(native[spark], query)
    versions = sorted({v for ids in stores.values() for v in ids})
    for version in (versions[0], versions[len(versions) // 2], versions[-1]):
        code, out, err = run_cli(capsys, "dump", str(root), "--batch", str(version - 1))
        assert code == 0, err
        got: dict[Store, dict[bytes, bytes]] = {}
        for line in out.splitlines():
            doc = json.loads(line)
            key, value = decode(doc, "key"), decode(doc, "value")
            assert key is not None and value is not None
            got.setdefault(Store(doc["operator"], doc["partition"], doc["store"]), {})[key] = value
        want = {s: replayed(root, s, ids, version) for s, ids in stores.items()}
        assert got == {s: st for s, st in want.items() if st}, (query, version)


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
@pytest.mark.parametrize("query", QUERIES)
def test_diff_between_two_batches(capsys: Capsys, native: dict[str, Path], spark: str, query: str) -> None:
    root = native[spark] / query
    stores = committed(native[spark], query)
    a, b = 1, max(v for ids in stores.values() for v in ids) - 1
    code, out, err = run_cli(capsys, "diff", str(root), "--batch", str(a), "--batch", str(b))
    assert code == 0, err
    got = set()
    for line in out.splitlines():
        doc = json.loads(line)
        got.add((Store(doc["operator"], doc["partition"], doc["store"]), decode(doc, "key"), decode(doc, "a"), decode(doc, "b")))
    want = set()
    for s, ids in stores.items():
        left, right = replayed(root, s, ids, a + 1), replayed(root, s, ids, b + 1)
        want |= {(s, k, left.get(k), right.get(k)) for k in left.keys() | right.keys() if left.get(k) != right.get(k)}
    assert got == want and want, query
    code, out, _ = run_cli(capsys, "diff", str(root), "--batch", str(b), "--batch", str(b))
    assert code == 0 and out == ""
    code, _, err = run_cli(capsys, "diff", str(root), "--batch", str(a))
    assert code == 2 and "exactly twice" in err


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
@pytest.mark.parametrize("query", ["dedup_agg", "join"])
def test_rewind_dry_run_then_rewind_then_undo(capsys: Capsys, native: dict[str, Path], spark: str, query: str, tmp_path: Path) -> None:
    root = copy(native, spark, query, tmp_path)
    last = len([n for n in names(root / "commits") if n.isdigit()]) - 1
    original = tree_hash(root)
    dry = run_json(capsys, "rewind", str(root), "--to-batch", "3", "--dry-run", "--json")
    assert tree_hash(root) == original and not (root / "_rewind").exists()
    assert dry["dryRun"] and dry["layout"] == "spark" and dry["nextBatch"] == 4 and dry["latestBatch"] == last
    later = range(4, last + 1)
    want = {f"{d}/{n}" for d in ("commits", "offsets") for b in later for n in (str(b), f".{b}.crc")}
    source = {m["from"] for m in dry["moves"]} - want
    assert {m["from"] for m in dry["moves"]} >= want and all(p.startswith("sources/") for p in source) and source
    doc = run_json(capsys, "rewind", str(root), "--to-batch", "3", "--json")
    assert [m["from"] for m in doc["moves"]] == [m["from"] for m in dry["moves"]] and not doc["dryRun"]
    assert [n for n in names(root / "commits") if not n.startswith(".")] == ["0", "1", "2", "3"]
    assert [n for n in names(root / "offsets") if not n.startswith(".")] == ["0", "1", "2", "3"]
    for log in (root / "sources").iterdir():  # a file source's own log ends at batch 3's logOffset (here = 3)
        assert [n for n in names(log) if not n.startswith(".")] == ["0", "1", "2", "3"]
    for m in doc["moves"]:
        assert (root / m["to"]).is_file() and m["to"].startswith(doc["backup"] + "/files/" + m["from"][:0])
    journal = json.loads((root / doc["backup"] / "journal.json").read_text())
    assert journal["status"] == "done" and journal["toBatch"] == 3 and len(journal["moves"]) == len(doc["moves"])
    # the state of every store at batch 3 still loads: ls --rebuildable ends there
    assert run_json(capsys, "ls", str(root), "--rebuildable", "--json")["rebuildable"] == [[0, 3]]
    code, out, err = run_cli(capsys, "rewind", str(root), "--undo")
    assert code == 0, err
    assert tree_hash(root / "commits") == tree_hash(native[spark] / query / "commits")
    shutil.rmtree(root / "_rewind")
    assert tree_hash(root) == original
    code, _, err = run_cli(capsys, "rewind", str(root), "--undo")
    assert code == 2 and "no rewind to undo" in err


def test_undo_refuses_when_a_moved_entry_was_written_again(capsys: Capsys, native: dict[str, Path], tmp_path: Path) -> None:
    root = copy(native, "4.3.0", "agg", tmp_path)
    run_json(capsys, "rewind", str(root), "--to-batch", "5", "--json")
    (root / "commits" / "6").write_text("v2\n{}")  # a reprocess committed batch 6 again
    digest = tree_hash(root)
    code, _, err = run_cli(capsys, "rewind", str(root), "--undo")
    assert code == 2 and str(root / "commits" / "6") in err and "written after it" in err
    assert tree_hash(root) == digest


def _statebed(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "statebed_cli.main", *argv], capture_output=True, text=True, env=env, timeout=120)


def test_an_interrupted_rewind_is_finished_by_the_next_command(capsys: Capsys, native: dict[str, Path], tmp_path: Path) -> None:
    import os

    root = copy(native, "4.1.4", "agg", tmp_path)
    original = tree_hash(root)
    env = {**os.environ, "STATEBED_FAILPOINTS": "rewind.move.after=4*off->exit(137)"}
    proc = _statebed("rewind", str(root), "--to-batch", "2", env=env)  # dies after its fifth move, like a SIGKILL
    assert proc.returncode == 137
    (journal,) = (root / "_rewind").glob("*/journal.json")
    moves = json.loads(journal.read_text())["moves"]
    assert sum((root / m["to"]).exists() for m in moves) == 5 < len(moves)  # half-done
    half = tree_hash(root)
    code, _, err = run_cli(capsys, "rewind", str(root), "--dry-run", "--to-batch", "2")
    assert code == 2 and "interrupted rewind must be finished first" in err and tree_hash(root) == half  # a dry run changes nothing
    doc = run_json(capsys, "rewind", str(root), "--to-batch", "2", "--json")  # the next command completes it
    assert doc["moves"] == [] and json.loads(journal.read_text())["status"] == "done"
    assert all((root / m["to"]).exists() and not (root / m["from"]).exists() for m in moves)
    # an undo interrupted in its turn is finished by the next command too, back to the original tree
    env["STATEBED_FAILPOINTS"] = "rewind.move.after=2*off->exit(137)"
    assert _statebed("rewind", str(root), "--undo", env=env).returncode == 137
    assert json.loads(journal.read_text())["status"] == "undoing"
    code, _, err = run_cli(capsys, "rewind", str(root), "--undo")
    assert code == 2 and "undid the interrupted rewind" in err and "no rewind to undo" in err
    assert json.loads(journal.read_text())["status"] == "undone"
    shutil.rmtree(root / "_rewind")
    assert tree_hash(root) == original


def test_statebed_checkpoint_rewind_and_retention(capsys: Capsys, tmp_path: Path) -> None:
    """A statebed checkpoint (commits/ and state/, no offsets): only commits move; below retention is refused."""
    storage = open_storage(tmp_path / "ckpt")
    opts = StoreOptions(local_dir=tmp_path / "local", snapshot_interval=100)
    written = write_versions(storage, opts, SnapshotUploader(), versions=6, snapshot_at=(4,), commit_log=True)
    cleanup_store(storage, written.store, [written.ref(v) for v in (5, 6)], sst_orphan_grace_s=0)
    doc = run_json(capsys, "ls", str(tmp_path / "ckpt"), "--rebuildable", "--json")
    assert doc["rebuildable"] == [[3, 5]]  # versions 4..6: the snapshot at 4 and the changelogs after it stay
    bad = doc["stores"][0]["firstUnrebuildable"]
    assert bad["batch"] == 2 and bad["file"] == written.display(3)
    code, _, err = run_cli(capsys, "rewind", str(tmp_path / "ckpt"), "--to-batch", "2")
    assert code == 2 and written.display(3) in err
    doc = run_json(capsys, "rewind", str(tmp_path / "ckpt"), "--to-batch", "3", "--json")
    assert doc["layout"] == "statebed" and [m["from"] for m in doc["moves"]] == ["commits/5", "commits/4"]
    assert CommitLog(storage).batch_ids() == [0, 1, 2, 3]
    code, out, _ = run_cli(capsys, "dump", str(tmp_path / "ckpt"), "--operator", "0", "--partition", "0", "--batch", "3")
    assert code == 0
    assert {json.loads(line)["key"]: json.loads(line)["value"] for line in out.splitlines()} == {
        k.decode(): v.decode() for k, v in written.states[4].items()
    }


def test_rewind_refuses_bad_targets(capsys: Capsys, native: dict[str, Path], tmp_path: Path) -> None:
    root = copy(native, "4.3.0", "agg", tmp_path)
    digest = tree_hash(root)
    for argv, msg in [
        (["--to-batch", "10"], "latest committed batch"),
        (["--to-batch", "3", "--undo"], "not allowed with"),
    ]:
        code, _, err = run_cli(capsys, "rewind", str(root), *argv)
        assert code == 2 and msg in err, err
    code, _, err = run_cli(capsys, "rewind", "s3://bucket/x", "--to-batch", "1")
    assert code == 2 and "needs a local checkpoint directory" in err
    (root / "commits" / "4").rename(tmp_path / "c4")
    code, _, err = run_cli(capsys, "rewind", str(root), "--to-batch", "4")
    assert code == 2 and str(root / "commits" / "4") in err
    (tmp_path / "c4").rename(root / "commits" / "4")
    assert tree_hash(root) == digest
