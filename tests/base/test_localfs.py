"""`localfs`'s one writer and one reader on special files (issue 24, items 3 and 8).

`atomic_write` replaces a regular file or nothing: never a device, FIFO, socket or directory,
nor what a symlink to one points at. `read_regular` reads only regular files (symlinks to one
followed) and names anything else. FIFOs are read only in the CLI tests, which run commands as
subprocesses (test_cli_special_files.py): a regression there cannot hang this suite.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from statebed_base.errors import AlreadyExistsError, NotRegularFileError
from statebed_base.localfs import atomic_write, read_regular
from statebed_store.storage.local import LocalStorage


@pytest.fixture
def held() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    yield socks
    for s in socks:
        s.close()


def _socket(p: Path, held: list[socket.socket]) -> None:
    s = socket.socket(socket.AF_UNIX)
    held.append(s)
    cwd = os.getcwd()
    os.chdir(p.parent)  # socket paths are limited to 108 bytes
    try:
        s.bind(p.name)
    finally:
        os.chdir(cwd)


def _fifo_behind_a_symlink(p: Path) -> None:
    os.mkfifo(p.with_name("fifo"))
    p.symlink_to("fifo")


MAKERS: dict[str, Callable[[Path], None]] = {
    "fifo": os.mkfifo,
    "directory": Path.mkdir,
    "symlink to a fifo": _fifo_behind_a_symlink,
    "symlink loop": lambda p: p.symlink_to(p.name),
}


@pytest.mark.parametrize("kind", [*MAKERS, "socket"])
def test_atomic_write_never_replaces_a_special_file(tmp_path: Path, kind: str, held: list[socket.socket]) -> None:
    target = tmp_path / "out.json"
    if kind == "socket":
        _socket(target, held)
    else:
        MAKERS[kind](target)
    before = os.lstat(target)
    with pytest.raises(NotRegularFileError) as e:
        atomic_write(target, b"{}")
    assert str(target) in str(e.value)
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)  # the very same entry, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"out.json", *(["fifo"] if "symlink to" in kind else [])})  # no temp left
    with pytest.raises(NotRegularFileError):
        LocalStorage(tmp_path).write("out.json", b"{}")  # every writer of checkpoint storage goes through it


def test_atomic_write_refuses_a_device(tmp_path: Path) -> None:
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    with pytest.raises(NotRegularFileError, match="character device"):
        atomic_write(link, b"x")
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_atomic_write_replaces_a_regular_file_and_create_only_keeps_a_special_one(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(AlreadyExistsError):
        atomic_write(fifo, b"x", create_only=True)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_read_regular_names_what_is_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "loop").symlink_to("loop")
    for path, what in (
        (tmp_path / "dir", "is a directory"),
        (tmp_path / "loop", "cannot be resolved"),
        (Path("/dev/zero"), "character device"),
    ):
        with pytest.raises(NotRegularFileError, match=what) as e:
            read_regular(path)
        assert e.value.file == str(path)


def test_read_regular_follows_a_symlink_to_a_file_and_caps_the_size(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_bytes(b"x" * 100)
    (tmp_path / "link.yaml").symlink_to("real.yaml")
    assert read_regular(tmp_path / "link.yaml") == b"x" * 100
    assert read_regular(tmp_path / "link.yaml", max_bytes=100) == b"x" * 100
    assert read_regular(tmp_path / "real.yaml", start=90, length=5) == b"x" * 5
    with pytest.raises(NotRegularFileError, match="larger than the 99 bytes allowed"):
        read_regular(tmp_path / "link.yaml", max_bytes=99)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent")


def test_local_storage_lists_special_entries_so_reads_can_name_them(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_bytes(b"abc")
    (tmp_path / "dangling").symlink_to("nowhere")
    s = LocalStorage(tmp_path)
    assert sorted((f.name, f.size) for f in s.list("")) == [("fifo", 0), ("file", 3), ("loop", 0)]
    assert s.list_dirs("") == ["dir"]
    assert [s.exists(n) for n in ("fifo", "loop", "file", "dir", "dangling", "absent")] == [True, True, True, False, False, False]
    for name in ("loop", "dir"):  # (a FIFO's read: in a subprocess, test_cli_special_files.py)
        with pytest.raises(NotRegularFileError):
            s.read(name)
