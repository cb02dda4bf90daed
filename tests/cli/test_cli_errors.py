"""Exit codes: 0 ok, 2 for bad arguments and for missing or corrupt files, with a message naming them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_helpers import STORE, Written, run_cli, write_versions

from statebed_store import SnapshotUploader, Storage, StoreOptions
from statebed_store.snapshot import read_zip

Capsys = pytest.CaptureFixture[str]


@pytest.fixture
def ckpt(local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> Written:
    """Versions 1-4 committed in the commit log, with a snapshot of version 3."""
    return write_versions(local_storage, options, uploader, 4, snapshot_at=(3,), commit_log=True)


def store_args(w: Written, version: int) -> list[str]:
    return ["--operator", "0", "--partition", "0", "--version", str(version), "--id", w.results[version].checkpoint_id or ""]


def fails(capsys: Capsys, *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (code, out, err)
    assert out == ""
    return err


# -- bad arguments --------------------------------------------------------------------------------


def test_ok_is_zero(capsys: Capsys, ckpt: Written) -> None:
    root = ckpt.storage.url
    for argv in (["ls", root], ["plan", root, *store_args(ckpt, 4)], ["dump", root, "--operator", "0", "--partition", "0"]):
        code, out, err = run_cli(capsys, *argv)
        assert (code, err) == (0, "") and out


@pytest.mark.parametrize("command", ["ls", "plan", "dump"])
def test_unknown_option(capsys: Capsys, ckpt: Written, command: str) -> None:
    extra = [] if command == "ls" else ["--operator", "0", "--partition", "0", "--version", "1"]
    err = fails(capsys, command, ckpt.storage.url, *extra, "--bogus")
    assert err.rstrip().endswith("error: unrecognized arguments: --bogus")


def test_unknown_command_and_missing_arguments(capsys: Capsys, ckpt: Written) -> None:
    assert "invalid choice: 'frobnicate'" in fails(capsys, "frobnicate")
    assert "required: --operator" in fails(capsys, "plan", ckpt.storage.url, "--partition", "0", "--version", "1")
    assert "required: --version" in fails(capsys, "plan", ckpt.storage.url, "--operator", "0", "--partition", "0")
    assert "CKPT" in fails(capsys, "ls")


@pytest.mark.parametrize("command", ["plan", "dump"])
@pytest.mark.parametrize("option, value, message", [
    ("--partition", "-1", "argument --partition: expected an integer >= 0, got -1"),
    ("--operator", "-3", "argument --operator: expected an integer >= 0, got -3"),
    ("--partition", "x", "argument --partition: expected an integer >= 0, got 'x'"),
    ("--version", "-2", "argument --version: expected an integer >= 0, got -2"),
])  # fmt: skip
def test_negative_or_non_numeric_numbers(capsys: Capsys, ckpt: Written, command: str, option: str, value: str, message: str) -> None:
    args = {"--operator": "0", "--partition": "0", "--version": "1"}
    args[option] = value
    err = fails(capsys, command, ckpt.storage.url, *[x for kv in args.items() for x in kv])
    assert message in err


@pytest.mark.parametrize("command", ["plan", "dump"])
@pytest.mark.parametrize("bad", ["../x", "a/b", "a_b", "x y", "-"])
def test_malformed_id(capsys: Capsys, ckpt: Written, command: str, bad: str) -> None:
    err = fails(capsys, command, ckpt.storage.url, "--operator", "0", "--partition", "0", "--version", "4", f"--id={bad}")
    assert f"--id {bad!r} is malformed" in err


@pytest.mark.parametrize("command", ["ls", "plan", "dump"])
def test_nonexistent_checkpoint_directory(capsys: Capsys, tmp_path: Path, command: str) -> None:
    missing = tmp_path / "no" / "such" / "ckpt"
    extra = [] if command == "ls" else ["--operator", "0", "--partition", "0", "--version", "1"]
    err = fails(capsys, command, str(missing), *extra)
    assert f"checkpoint {missing}: no such directory" in err
    assert not missing.exists()


def test_checkpoint_that_is_a_file(capsys: Capsys, tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    assert f"checkpoint {f}: no such directory" in fails(capsys, "ls", str(f))


def test_s3_checkpoint_without_an_endpoint(capsys: Capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("STATEBED_S3_ENDPOINT", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)
    assert "needs an endpoint" in fails(capsys, "ls", "s3://bucket/prefix")
    assert "'s3://'" in fails(capsys, "ls", "s3://", "--s3-endpoint", "http://127.0.0.1:1")


@pytest.mark.parametrize("command", ["plan", "dump"])
def test_version_zero_has_no_id(capsys: Capsys, ckpt: Written, command: str) -> None:
    err = fails(capsys, command, ckpt.storage.url, "--operator", "0", "--partition", "0", "--version", "0", "--id", "abc")
    assert "version 0 is the empty state and has no checkpoint id" in err


@pytest.mark.parametrize("command", ["plan", "dump"])
def test_store_that_does_not_exist(capsys: Capsys, ckpt: Written, command: str) -> None:
    err = fails(capsys, command, ckpt.storage.url, "--operator", "7", "--partition", "0", "--version", "1", "--id", "abc")
    assert ckpt.storage.display("state/7/0/1_abc.changelog") in err


def test_bad_store_name(capsys: Capsys, ckpt: Written) -> None:
    err = fails(capsys, "plan", ckpt.storage.url, "--operator", "0", "--partition", "0", "--store", "../../etc", "--version", "1")
    assert "store name '../../etc' is malformed" in err


def test_dump_id_without_version_and_without_commits(capsys: Capsys, ckpt: Written, tmp_path: Path) -> None:
    err = fails(capsys, "dump", ckpt.storage.url, "--operator", "0", "--partition", "0", "--id", ckpt.results[4].checkpoint_id or "")
    assert "--id needs --version" in err
    (tmp_path / "empty").mkdir()
    err = fails(capsys, "dump", str(tmp_path / "empty"), "--operator", "0", "--partition", "0")
    assert f"{tmp_path / 'empty' / 'commits'}: no commit log entries" in err


# -- missing and corrupt files ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "dump"])
def test_unknown_id_names_the_missing_file(capsys: Capsys, ckpt: Written, command: str) -> None:
    err = fails(capsys, command, ckpt.storage.url, "--operator", "0", "--partition", "0", "--version", "4", "--id", "no-such-id")
    assert ckpt.storage.display(STORE.path("4_no-such-id.changelog")) in err
    assert err.startswith(f"statebed {command}: error: ")


@pytest.mark.parametrize("command", ["plan", "dump"])
def test_missing_changelog_names_it(capsys: Capsys, ckpt: Written, command: str) -> None:
    ckpt.storage.delete([ckpt.path(3, "zip"), ckpt.path(2)])
    err = fails(capsys, command, ckpt.storage.url, *store_args(ckpt, 4))
    assert ckpt.display(2) in err


@pytest.mark.parametrize("command", ["plan", "dump"])
def test_corrupt_changelog_names_it(capsys: Capsys, ckpt: Written, command: str) -> None:
    data = bytearray(ckpt.storage.read(ckpt.path(2)))
    data[-25] ^= 0x10
    ckpt.storage.write(ckpt.path(2), bytes(data))
    err = fails(capsys, command, ckpt.storage.url, *store_args(ckpt, 2))
    assert ckpt.display(2) in err


@pytest.mark.parametrize("command", ["plan", "dump"])
def test_unknown_changelog_format_names_it(capsys: Capsys, ckpt: Written, command: str) -> None:
    from statebed_store import lz4block

    ckpt.storage.write(ckpt.path(4), lz4block.compress(b"\x00\x02v9\x00\x02[]"))
    ckpt.storage.delete([ckpt.path(4) + ".crc"])
    err = fails(capsys, command, ckpt.storage.url, *store_args(ckpt, 4))
    assert ckpt.display(4) in err and "v9" in err


def test_missing_sst_plan_reports_it_dump_falls_back(capsys: Capsys, ckpt: Written) -> None:
    meta, _ = read_zip(ckpt.storage.read(ckpt.path(3, "zip")), file="zip")
    sst = STORE.path(f"SSTs/{meta.sst_files[0].dfs}")
    ckpt.storage.delete([sst])
    # plan agrees with the load: it plans around the snapshot (naming why) and replays changelogs 1-4
    code, out, err = run_cli(capsys, "plan", ckpt.storage.url, *store_args(ckpt, 4), "--json")
    assert code == 0, err
    assert json.loads(out) == {"snapshot": None, "changelogs": [plan_entry(ckpt, v) for v in (1, 2, 3, 4)]}
    assert ckpt.storage.display(sst) in err and ckpt.display(3, "zip") in err
    # the state is still loadable from the changelogs, and dump says exactly what it is
    code, out, err = run_cli(capsys, "dump", ckpt.storage.url, *store_args(ckpt, 4))
    assert code == 0, err
    assert out.splitlines() == [f'{{"key": "{k.decode()}", "value": "{v.decode()}"}}' for k, v in sorted(ckpt.states[4].items())]


def test_corrupt_zip_plan_names_it(capsys: Capsys, ckpt: Written) -> None:
    ckpt.storage.write(ckpt.path(3, "zip"), b"PK\x03\x04 not really")
    code, out, err = run_cli(capsys, "plan", ckpt.storage.url, *store_args(ckpt, 4), "--json")  # planned around
    assert code == 0 and json.loads(out)["snapshot"] is None and ckpt.display(3, "zip") in err
    ckpt.storage.delete([ckpt.path(2, "changelog")])  # and with no way around it, exit 2 naming the zip
    err = fails(capsys, "plan", ckpt.storage.url, *store_args(ckpt, 4))
    assert ckpt.display(3, "zip") in err


def plan_entry(w: Written, v: int) -> dict[str, object]:
    ref = w.results[v]
    return {"version": v, "id": ref.checkpoint_id, "file": w.path(v)}


def test_corrupt_commit_log_names_it(capsys: Capsys, ckpt: Written) -> None:
    ckpt.storage.write("commits/3", b"v9\n{}")
    for argv in (["ls", ckpt.storage.url], ["dump", ckpt.storage.url, "--operator", "0", "--partition", "0"]):
        err = fails(capsys, *argv)
        assert ckpt.storage.display("commits/3") in err and "v9" in err
