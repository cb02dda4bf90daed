"""No terminal injection (issue 24, item 6): a checkpoint, store or file named with ANSI escapes
or newlines is printed escaped (`\\x1b`), so it can neither drive the terminal nor forge a line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from checkpoint_helpers import STORE, run_cli, write_versions

from statebed_base.names import printable
from statebed_store import SnapshotUploader, StoreOptions, open_storage

Capsys = pytest.CaptureFixture[str]
HOSTILE = "ck\x1b[31mpt\nFORGED: VALID\r"


def assert_clean(text: str, lines: int | None = None) -> None:
    assert "\x1b" not in text and "\r" not in text and "FORGED" not in text.replace("\\x0aFORGED", ""), text
    if lines is not None:
        assert len(text.strip().splitlines()) == lines, text


def test_printable_escapes_controls_and_keeps_the_rest() -> None:
    assert printable("a\x1b[31mb\nc\td\r\x7f\x85\u202e\udcff é ü/x") == "a\\x1b[31mb\\x0ac\\x09d\\x0d\\x7f\\x85\\u202e\\udcff é ü/x"
    assert printable("plain/path-1_2.changelog") == "plain/path-1_2.changelog"


@pytest.fixture
def hostile_ckpt(tmp_path: Path, options: StoreOptions, uploader: SnapshotUploader) -> Path:
    root = tmp_path / HOSTILE
    write_versions(open_storage(root), options, uploader, 3, commit_log=True)
    return root


def test_ls_and_verify_escape_a_hostile_checkpoint_name(capsys: Capsys, hostile_ckpt: Path) -> None:
    stray = hostile_ckpt / "state" / "0" / f"\x1b[2J{HOSTILE}"  # a stray directory: named in a note
    stray.mkdir()
    shutil.copy(hostile_ckpt / STORE.dir / next(p.name for p in (hostile_ckpt / STORE.dir).iterdir() if p.name.startswith("1_")), stray)
    code, out, err = run_cli(capsys, "ls", str(hostile_ckpt))
    assert code == 0, err
    assert_clean(out + err)
    assert printable(hostile_ckpt) in out and printable(stray) in err
    assert len(err.strip().splitlines()) == 1  # one note line, not three
    code, out, err = run_cli(capsys, "verify", "lineage", str(hostile_ckpt))
    assert code == 0, (out, err)
    assert_clean(out + err)
    assert out.startswith(printable(hostile_ckpt) + ": VALID")


def test_an_error_naming_a_hostile_path_is_one_escaped_line(capsys: Capsys, hostile_ckpt: Path) -> None:
    (hostile_ckpt / "commits" / "2").write_text("v9\n{}")  # unknown commit format: the error names the file
    code, out, err = run_cli(capsys, "ls", str(hostile_ckpt))
    assert code == 2
    assert_clean(err, lines=1)
    assert printable(hostile_ckpt / "commits" / "2") in err
    code, out, err = run_cli(capsys, "verify", "lineage", str(hostile_ckpt))
    assert code == 1
    assert_clean(out + err)
    code, _, err = run_cli(capsys, "ls", str(hostile_ckpt / "missing"))
    assert code == 2
    assert_clean(err, lines=1)


def test_argparse_errors_are_escaped_too(capsys: Capsys) -> None:
    code, _, err = run_cli(capsys, "verify", "\x1b[31mbogus")
    assert code == 2 and "\x1b" not in err and "\\x1b[31mbogus" in err
