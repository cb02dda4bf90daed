"""Special files where a regular file is expected (issue 24, items 8 and 9): a FIFO, socket,
device, directory or symlink loop is an error naming it, never a blocking open; inside
`verify lineage` it is an `unreadable-file` anomaly and the rest of the check goes on; no
commit log entry is silently passed over.

FIFOs would block a plain `open`, so every command runs as a subprocess; its timeout is only
a safety net for a regression (the assertions are on exit codes and messages, never on time).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from checkpoint_helpers import Written, write_versions

from statebed_store import SnapshotUploader, Storage, StoreOptions

SAFETY_NET_S = 300  # never reached unless a regression blocks; not an assertion


def statebed(*argv: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """`statebed ARGV` in a child process: (exit code, stdout, stderr)."""
    p = subprocess.run(
        [sys.executable, "-m", "statebed_cli.main", *argv], capture_output=True, text=True, timeout=SAFETY_NET_S, cwd=cwd, check=False
    )
    return p.returncode, p.stdout, p.stderr


def one_error_line(code: int, err: str, named: str) -> None:
    assert code == 2, (code, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and named in err, err


@pytest.fixture
def ckpt(local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> Written:
    return write_versions(local_storage, options, uploader, 4, snapshot_at=(3,), commit_log=True)


@pytest.fixture
def bound_sockets() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for s in held:
        s.close()


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _loop(p: Path) -> None:
    p.symlink_to(p.name)


def _directory(p: Path) -> None:
    p.mkdir()


SPECIALS: dict[str, Callable[[Path], None]] = {"fifo": _fifo, "symlink loop": _loop, "directory": _directory}


def _make_socket(p: Path, held: list[socket.socket]) -> None:
    """A bound Unix socket at `p` (bound from its directory: socket paths are limited to 108 bytes)."""
    s = socket.socket(socket.AF_UNIX)
    held.append(s)
    cwd = os.getcwd()
    os.chdir(p.parent)
    try:
        s.bind(p.name)
    finally:
        os.chdir(cwd)


def _replace(p: Path, kind: str, held: list[socket.socket]) -> None:
    p.unlink()
    if kind == "socket":
        _make_socket(p, held)
    else:
        SPECIALS[kind](p)


# -- checkpoint files ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "socket", "symlink loop", "directory"])
def test_a_special_committed_changelog_is_an_unreadable_file(ckpt: Written, kind: str, bound_sockets: list[socket.socket]) -> None:
    shown = ckpt.display(2)
    _replace(Path(shown), kind, bound_sockets)
    Path(shown + ".crc").unlink()
    code, out, err = statebed("verify", "lineage", "--json", ckpt.storage.url)
    assert code == 1 and "Traceback" not in err, (code, out, err)
    doc = json.loads(out)
    mine = [a for a in doc["anomalies"] if shown in a["files"]]
    assert [a["kind"] for a in mine] == ["unreadable-file"] and mine[0]["version"] == 2, doc
    # the rest of the check went on: versions 3 and 4 were checked, the latest plan (snapshot 3) too
    assert doc["checked"]["versions"] == 4 and not [a for a in doc["anomalies"] if a["version"] in (3, 4)], doc
    code, out, err = statebed(
        "dump", ckpt.storage.url, "--operator", "0", "--partition", "0", "--version", "2", "--id", str(ckpt.ref(2).id)
    )
    one_error_line(code, err, shown)


def test_ls_names_a_special_state_file(ckpt: Written) -> None:
    shown = ckpt.display(4)
    _replace(Path(shown), "fifo", [])
    code, out, err = statebed("ls", ckpt.storage.url)
    assert code == 0 and "Traceback" not in err, err
    assert "is a FIFO" in out and shown in out


# -- commit log entries -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "socket", "symlink loop", "directory"])
def test_a_special_commit_entry_is_reported(ckpt: Written, kind: str, bound_sockets: list[socket.socket]) -> None:
    entry = Path(ckpt.storage.url) / "commits" / "9"
    entry.write_text("placeholder")
    _replace(entry, kind, bound_sockets)
    code, out, err = statebed("verify", "lineage", "--json", ckpt.storage.url)
    assert code == 1 and "Traceback" not in err, (code, out, err)
    kinds = {(a["kind"], tuple(a["files"])) for a in json.loads(out)["anomalies"]}
    assert ("unreadable-file", (str(entry),)) in kinds, kinds
    assert any(k == "commit-gap" for k, _ in kinds)  # batches 4..8: batch 9 was not passed over
    code, _, err = statebed("ls", ckpt.storage.url)
    one_error_line(code, err, str(entry))


def test_a_batch_id_beyond_what_the_old_checker_read_is_checked(ckpt: Written) -> None:
    """19 digits (a Java long Spark accepts) used to be ignored: now it is a commit like any other."""
    root = Path(ckpt.storage.url)
    shutil.copy(root / "commits" / "3", root / "commits" / str(2**63 - 1))
    code, out, err = statebed("verify", "lineage", "--json", str(root))
    assert code == 1, (out, err)
    gaps = [a for a in json.loads(out)["anomalies"] if a["kind"] == "commit-gap"]
    assert len(gaps) == 1 and gaps[0]["batches"] == [4, 2**63 - 2], gaps
    code, out, err = statebed("ls", "--json", str(root))
    assert code == 0 and json.loads(out)["commits"] == {"count": 5, "latestBatch": 2**63 - 1}, (out, err)


@pytest.mark.parametrize("name", ["+7", "07", "-1"])
def test_a_name_spark_reads_as_a_batch_is_a_note(ckpt: Written, name: str) -> None:
    root = Path(ckpt.storage.url)
    shutil.copy(root / "commits" / "3", root / "commits" / name)
    for argv in (["verify", "lineage"], ["ls"]):
        code, out, err = statebed(*argv, str(root))
        assert code == 0, (argv, out, err)
        assert f"{root / 'commits' / name}: Spark reads it as batch" in out + err


def test_rewind_accounts_for_every_later_entry(ckpt: Written) -> None:
    root = Path(ckpt.storage.url)
    commits = root / "commits"
    shutil.copy(commits / "3", commits / str(2**63 - 1))
    code, out, err = statebed("rewind", str(root), "--to-batch", "1")
    assert code == 0, (out, err)
    assert sorted(p.name for p in commits.iterdir() if not p.name.startswith(".")) == ["0", "1"]  # nothing left behind
    code, out, err = statebed("rewind", str(root), "--undo")
    assert code == 0, (out, err)
    for odd, why in (("5", "is a directory"), ("+9", "Spark reads it as batch 9")):  # refused, naming it; nothing moved
        (commits / odd).mkdir() if odd == "5" else shutil.copy(commits / "3", commits / odd)
        code, out, err = statebed("rewind", str(root), "--to-batch", "1")
        one_error_line(code, err, f"{commits / odd}: {why}")
        assert (commits / "3").is_file()
        shutil.rmtree(commits / odd) if odd == "5" else (commits / odd).unlink()


# -- run, experiment and demo files -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "symlink loop", "directory"])
def test_a_special_run_json_is_named(tmp_path: Path, kind: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    SPECIALS[kind](run / "run.json")
    code, _, err = statebed("report", str(run))
    one_error_line(code, err, str(run / "run.json"))
    code, _, err = statebed("verify", "state", str(run))
    one_error_line(code, err, str(run / "run.json"))


@pytest.mark.parametrize("name", ["verdict.json", "experiment.yaml", "history.jsonl"])
def test_a_special_experiment_record_is_named(tmp_path: Path, name: str) -> None:
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "experiment.yaml").write_text("name: x\n")
    (exp / "history.jsonl").write_text("")
    (exp / name).unlink(missing_ok=True)
    os.mkfifo(exp / name)
    code, _, err = statebed("report", str(exp))
    one_error_line(code, err, str(exp / name))


def test_a_special_matrix_record_is_named(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "matrix.json")
    code, _, err = statebed("report", str(tmp_path))
    one_error_line(code, err, str(tmp_path / "matrix.json"))


@pytest.mark.parametrize("where", ["fifo", "/dev/zero", "directory"])
def test_a_special_experiment_file_is_refused(tmp_path: Path, where: str) -> None:
    path = Path(where) if where.startswith("/") else tmp_path / where
    if where == "fifo":
        os.mkfifo(path)
    elif where == "directory":
        path.mkdir()
    code, _, err = statebed("chaos", "run", str(path), "--out", str(tmp_path / "out"))
    one_error_line(code, err, str(path))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_special_demo_marker_is_named(tmp_path: Path, kind: str) -> None:
    ckpt = tmp_path / "demo"
    ckpt.mkdir()
    SPECIALS[kind](ckpt / "demo.json")
    code, _, err = statebed("demo", "--checkpoint", str(ckpt), "--batches", "1", "--rows", "10")
    one_error_line(code, err, str(ckpt / "demo.json"))
    assert sorted(os.listdir(ckpt)) == ["demo.json"]  # nothing written
