"""The Storage contract, run over a local directory and a real S3 server (`storage` fixture)."""

from __future__ import annotations

import pytest

from statebed_base.errors import AlreadyExistsError, MissingFileError, UsageError
from statebed_store import Storage

DATA = bytes(range(256)) * 4


def test_read_whole_and_ranges(storage: Storage) -> None:
    storage.write("state/0/0/f.bin", DATA)
    assert storage.read("state/0/0/f.bin") == DATA
    assert storage.read("state/0/0/f.bin", 10, 20) == DATA[10:30]
    assert storage.read("state/0/0/f.bin", 0, 5) == DATA[:5]
    assert storage.read("state/0/0/f.bin", 1000) == DATA[1000:]
    assert storage.read("state/0/0/f.bin", 1000, 500) == DATA[1000:]  # range past the end is clipped
    assert storage.read("state/0/0/f.bin", len(DATA)) == b""
    assert storage.read("state/0/0/f.bin", len(DATA) + 10, 4) == b""
    assert storage.read("state/0/0/f.bin", 3, 0) == b""  # an empty range is empty, not the rest


def test_empty_file(storage: Storage) -> None:
    storage.write("a/empty", b"")
    assert storage.exists("a/empty")
    assert storage.read("a/empty") == b""
    assert storage.read("a/empty", 0, 100) == b""
    assert [(f.name, f.size) for f in storage.list("a")] == [("empty", 0)]


def test_missing_file_names_the_path(storage: Storage) -> None:
    for call in (
        lambda: storage.read("state/0/0/7_x.changelog"),
        lambda: storage.read("state/0/0/7_x.changelog", 0, 10),
        lambda: storage.read("state/0/0/7_x.changelog", 0, 0),
    ):
        with pytest.raises(MissingFileError) as e:
            call()
        assert e.value.file == storage.display("state/0/0/7_x.changelog")
        assert storage.display("state/0/0/7_x.changelog") in str(e.value)
    assert not storage.exists("state/0/0/7_x.changelog")


def test_display_is_absolute(storage: Storage) -> None:
    shown = storage.display("state/0/1/2_a.zip")
    assert shown.endswith("/state/0/1/2_a.zip")
    assert shown.startswith(("/", "s3://")) and shown.startswith(storage.url)


def test_create_only_refuses_an_existing_file_and_keeps_it(storage: Storage) -> None:
    storage.write("state/0/0/1_a.changelog", b"first", create_only=True)
    with pytest.raises(AlreadyExistsError) as e:
        storage.write("state/0/0/1_a.changelog", b"second!", create_only=True)
    assert e.value.file == storage.display("state/0/0/1_a.changelog") and e.value.file in str(e.value)
    assert storage.read("state/0/0/1_a.changelog") == b"first"
    assert [(f.name, f.size) for f in storage.list("state/0/0")] == [("1_a.changelog", 5)]


def test_overwrite_replaces(storage: Storage) -> None:
    storage.write("commits/0", b"old contents")
    storage.write("commits/0", b"new")
    assert storage.read("commits/0") == b"new"
    assert [(f.name, f.size) for f in storage.list("commits")] == [("0", 3)]


def test_list_shows_visible_direct_children_only(storage: Storage) -> None:
    storage.write("state/0/0/1_a.changelog", b"1")
    storage.write("state/0/0/1_a.changelog.crc", b"22")
    storage.write("state/0/0/.1_a.changelog.crc", b"hidden")
    storage.write("state/0/0/SSTs/000008-x.sst", b"sst")
    storage.write("state/0/0/left-keyToNumValues/1_b.changelog", b"x")
    storage.write("state/0/0/.hidden-dir/y", b"y")
    storage.write("state/0/0x/other", b"sibling with a common prefix")
    listed = {f.name: f.size for f in storage.list("state/0/0")}
    assert listed == {"1_a.changelog": 1, "1_a.changelog.crc": 2}
    assert all(f.mtime > 1e9 for f in storage.list("state/0/0"))
    assert sorted(storage.list_dirs("state/0/0")) == ["SSTs", "left-keyToNumValues"]
    assert sorted(storage.list_dirs("state")) == ["0"]
    assert sorted(storage.list_dirs("state/0")) == ["0", "0x"]
    assert storage.list("state/0") == []
    assert [f.name for f in storage.list("state/0/0/SSTs")] == ["000008-x.sst"]


def test_list_of_missing_directories_is_empty(storage: Storage) -> None:
    assert storage.list("state/9/9") == []
    assert storage.list_dirs("state/9/9") == []
    assert storage.list("") == [] and storage.list_dirs("") == []


def test_directories_are_not_files(storage: Storage) -> None:
    storage.write("state/0/0/1_a.changelog", b"1")
    assert not storage.exists("state/0/0")
    assert storage.exists("state/0/0/1_a.changelog")


def test_delete_is_idempotent(storage: Storage) -> None:
    storage.write("state/0/0/a", b"a")
    storage.write("state/0/0/b", b"b")
    storage.delete(["state/0/0/a", "state/0/0/never-existed"])
    assert [f.name for f in storage.list("state/0/0")] == ["b"]
    storage.delete(["state/0/0/a"])
    storage.delete([])
    assert storage.read("state/0/0/b") == b"b"
    with pytest.raises(MissingFileError):
        storage.read("state/0/0/a")


def test_many_deletes_in_one_call(storage: Storage) -> None:
    paths = [f"SSTs/{i:04d}.sst" for i in range(30)]
    for p in paths:
        storage.write(p, b"s")
    storage.delete(paths[:25])
    assert sorted(f.name for f in storage.list("SSTs")) == [f"{i:04d}.sst" for i in range(25, 30)]


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a/../../x", "a//b", "./a", "a/./b"])
def test_paths_cannot_escape_the_root(storage: Storage, bad: str) -> None:
    for call in (lambda: storage.read(bad), lambda: storage.write(bad, b"x"), lambda: storage.list(bad)):
        with pytest.raises(UsageError) as e:
            call()
        assert repr(bad) in str(e.value)


def test_no_temporary_files_are_left_behind(storage: Storage) -> None:
    for i in range(5):
        storage.write(f"state/0/0/{i}_a.changelog", b"x" * i, create_only=True)
    storage.write("state/0/0/1_a.changelog", b"dup", create_only=False)
    with pytest.raises(AlreadyExistsError):
        storage.write("state/0/0/2_a.changelog", b"dup", create_only=True)
    names = sorted(f.name for f in storage.list("state/0/0"))
    assert names == [f"{i}_a.changelog" for i in range(5)]
    assert storage.list_dirs("state/0/0") == []
