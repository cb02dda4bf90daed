"""Hostile input to the CLI: one line on stderr naming the file or argument, exit 2, no traceback, no hang."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from checkpoint_helpers import STORE, Written, rewrite_changelog, run_cli, write_versions
from s3server import ACCESS_KEY, SECRET_KEY, S3Server

from statebed_store import SnapshotUploader, Storage, StoreOptions
from statebed_store.commitlog import render_commit

Capsys = pytest.CaptureFixture[str]


@pytest.fixture
def ckpt(local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> Written:
    return write_versions(local_storage, options, uploader, 4, snapshot_at=(3,), commit_log=True)


def unusable(capsys: Capsys, *argv: str) -> str:
    """Exit 2 with one line on stderr and no traceback; returns that line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


# -- symlink loops and hostile JSON -------------------------------------------------------------


def test_a_symlink_loop_is_named(capsys: Capsys, ckpt: Written) -> None:
    """A loop where a file or directory is expected is named; inside `verify lineage` it is an
    anomaly or a note and the rest of the check goes on (special files: test_cli_special_files.py)."""
    root = Path(ckpt.storage.url)
    for where in ("state/0/0/9_loop.changelog", "commits/9", "state/1"):
        (root / where).symlink_to(Path(where).name)  # points at itself
    code, out, err = run_cli(capsys, "verify", "lineage", str(root))
    assert code == 1 and "Traceback" not in err, (out, err)
    assert "unreadable-file" in out and str(root / "commits/9") in out and "symbolic links" in out
    assert "commit-gap" in out and f"skipped {root / 'state/1'}" in out
    doc = json.loads(run_cli(capsys, "verify", "lineage", "--json", str(root))[1])
    assert any(o["files"] == ["state/0/0/9_loop.changelog"] for o in doc["orphans"])  # listed, not committed
    assert str(root / "commits/9") in unusable(capsys, "ls", str(root))


def test_v1_and_v2_names_at_one_version_are_listed(capsys: Capsys, ckpt: Written) -> None:
    s = ckpt.storage
    s.write(STORE.path("3.changelog"), s.read(ckpt.path(3)))
    code, out, err = run_cli(capsys, "ls", s.url)
    assert code == 0 and "Traceback" not in err
    assert run_cli(capsys, "verify", "lineage", s.url)[0] == 0


@pytest.mark.parametrize("body", ['{"nextBatchWatermarkMs":1e400}', '{"a":' + "[" * 50_000 + "]" * 50_000 + "}"])
def test_hostile_commit_json_is_named(capsys: Capsys, ckpt: Written, body: str) -> None:
    ckpt.storage.write("commits/1", b"v2\n" + body.encode())
    assert ckpt.storage.display("commits/1") in unusable(capsys, "ls", ckpt.storage.url)
    code, out, _ = run_cli(capsys, "verify", "lineage", ckpt.storage.url)
    assert code == 1 and "unreadable-file" in out and "commits/1" in out


def test_a_deeply_nested_changelog_lineage_is_an_unreadable_file(capsys: Capsys, ckpt: Written) -> None:
    """32k nested arrays (writeUTF caps a lineage at 64 KiB): no RecursionError, the file is named."""
    deep = "[" * 32_000 + "]" * 32_000
    rewrite_changelog(ckpt.storage, ckpt.path(2), deep)
    shown = ckpt.display(2)
    code, out, err = run_cli(capsys, "verify", "lineage", "--all-versions", ckpt.storage.url)
    assert code == 1 and "Traceback" not in err, (out, err)
    assert "unreadable-file" in out and shown in out and "nested too deeply" in out
    err = unusable(capsys, "dump", ckpt.storage.url, "--operator", "0", "--partition", "0", "--version", "2", "--id", ckpt.ref(2).id or "")
    assert shown in err and "nested too deeply" in err


def test_stray_directories_are_notes(capsys: Capsys, ckpt: Written) -> None:
    root = Path(ckpt.storage.url)
    for stray in ("state/é", "state/0/0/my store"):
        (root / stray).mkdir(parents=True)
        shutil.copy(root / ckpt.path(1), root / stray)
    code, out, err = run_cli(capsys, "verify", "lineage", str(root))
    assert code == 0, (out, err)
    assert str(root / "state/é") in out and str(root / "state/0/0/my store") in out


def test_ls_names_the_stray_directories_it_skips(capsys: Capsys, ckpt: Written) -> None:
    root = Path(ckpt.storage.url)
    strays = [root / "state/é", root / "state/0/0/my store"]
    for stray in strays:
        stray.mkdir(parents=True)
        shutil.copy(root / ckpt.path(1), stray)
    code, out, err = run_cli(capsys, "ls", str(root))
    assert code == 0 and "Traceback" not in err, err
    notes = [line for line in err.splitlines() if line.startswith("statebed ls: note: skipped ")]
    assert len(notes) == 2 and all(any(str(s) in n for n in notes) for s in strays), err
    code, out, err = run_cli(capsys, "ls", "--json", str(root))
    doc = json.loads(out)
    assert code == 0 and len(doc["notes"]) == 2 and all(any(str(s) in n for n in doc["notes"]) for s in strays)
    assert [(st["operator"], st["partition"]) for st in doc["stores"]] == [(0, 0)]  # the real store is still listed


# -- arguments ----------------------------------------------------------------------------------


def test_an_empty_checkpoint_path_is_a_usage_error(capsys: Capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # "" must not mean "here"
    for cmd in (["ls", ""], ["verify", "lineage", ""], ["plan", "", "--operator", "0", "--partition", "0", "--version", "1"]):
        assert "CKPT ''" in unusable(capsys, *cmd)


def test_a_v2_version_without_id_is_explained_in_v2_terms(capsys: Capsys, ckpt: Written) -> None:
    err = unusable(capsys, "plan", ckpt.storage.url, "--operator", "0", "--partition", "0", "--version", "2")
    assert "V2 checkpoint" in err and ckpt.results[2].checkpoint_id in err and "--id" in err
    ckpt.storage.write("commits/3", render_commit({0: [[None]]}))
    err = unusable(capsys, "dump", ckpt.storage.url, "--operator", "0", "--partition", "0")
    assert ckpt.storage.display("commits/3") in err and "records no checkpoint id" in err


@pytest.mark.parametrize(
    "url, endpoint, named",
    [
        ("s3://bucket-ok/x", "http://127.0.0.1:99999", "http://127.0.0.1:99999"),
        ("s3://Bad_Bucket!!/x", "http://127.0.0.1:1", "Bad_Bucket!!"),
    ],
)
def test_bad_s3_endpoint_or_bucket_is_named(capsys: Capsys, url: str, endpoint: str, named: str) -> None:
    assert named in unusable(capsys, "ls", url, "--s3-endpoint", endpoint)


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A loopback server that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conns.append(server.accept()[0])
            except OSError:
                return

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    server.close()
    t.join(5)
    for c in conns:
        c.close()


def test_a_silent_s3_endpoint_fails_within_the_settings(capsys: Capsys, silent_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"STATEBED_S3_CONNECT_TIMEOUT": "0.5", "STATEBED_S3_READ_TIMEOUT": "0.3", "STATEBED_S3_RETRIES": "1"}.items():
        monkeypatch.setenv(name, value)
    err = unusable(capsys, "ls", "s3://statebed-test/x", "--s3-endpoint", silent_endpoint)
    assert silent_endpoint in err and "timed out" in err


def test_bad_s3_timeout_settings_are_usage_errors(capsys: Capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATEBED_S3_READ_TIMEOUT", "soon")
    assert "STATEBED_S3_READ_TIMEOUT" in unusable(capsys, "ls", "s3://statebed-test/x", "--s3-endpoint", "http://127.0.0.1:1")
    monkeypatch.setenv("STATEBED_S3_READ_TIMEOUT", "-1")
    assert "read_timeout_s" in unusable(capsys, "ls", "s3://statebed-test/x", "--s3-endpoint", "http://127.0.0.1:1")


# -- demo ---------------------------------------------------------------------------------------


def listing(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"" for p in sorted(root.rglob("*"))}


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Temporary directories of this test only, so leftovers are ours to count."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def test_demo_refuses_a_file_and_a_foreign_checkpoint(capsys: Capsys, native: dict[str, Path], tmp_path: Path, private_tmp: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert str(a_file) in unusable(capsys, "demo", "--checkpoint", str(a_file))
    spark = shutil.copytree(native["4.3.0"] / "agg", tmp_path / "spark")
    before = listing(spark)
    assert str(spark) in unusable(capsys, "demo", "--checkpoint", str(spark), "--batches", "1")
    assert listing(spark) == before  # nothing written
    assert list(private_tmp.iterdir()) == []


def test_demo_continues_its_own_checkpoint_and_cleans_up(capsys: Capsys, tmp_path: Path, private_tmp: Path) -> None:
    ckpt = tmp_path / "demo"
    args = ["demo", "--checkpoint", str(ckpt), "--batches", "2", "--rows", "200", "--partitions", "2"]
    assert run_cli(capsys, *args)[0] == 0
    assert run_cli(capsys, *args)[0] == 0  # a rerun continues
    assert sorted(os.listdir(ckpt / "commits")) == ["0", "1", "2", "3"]
    assert "--rows 200" in unusable(capsys, *args[:-4], "--rows", "100", "--partitions", "2")
    assert list(private_tmp.iterdir()) == []


@pytest.mark.s3
def test_demo_on_s3_writes_to_s3_not_a_local_dir(
    capsys: Capsys, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, private_tmp: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    url = f"s3://statebed-test/demo-{os.getpid()}-{tmp_path.name}"
    code, out, err = run_cli(capsys, "demo", "--checkpoint", url, "--s3-endpoint", s3_server.endpoint, "--batches", "2", "--rows", "100")
    assert code == 0, err
    assert "state_equals_oracle: True" in out.replace("  ", "").replace(" :", ":")
    assert not (tmp_path / "s3:").exists() and list(private_tmp.iterdir()) == []
    code, out, _ = run_cli(capsys, "verify", "lineage", url, "--s3-endpoint", s3_server.endpoint)
    assert code == 0 and url in out
