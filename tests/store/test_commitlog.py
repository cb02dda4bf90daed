"""Commit log entries: Spark's v1/v2 lines, rendering, unknown and damaged entries, create-only writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from statebed_base.errors import CommitConflictError, CorruptFileError, NotRegularFileError, StatebedError, UnknownFormatError
from statebed_store import CommitLog, Storage, committed_id
from statebed_store.commitlog import parse_commit, render_commit

FILE = "/ckpt/commits/7"


def test_parse_spark_v1_line() -> None:
    rec = parse_commit(b'v1\n{"nextBatchWatermarkMs":0}', file=FILE, batch_id=7)
    assert (rec.batch_id, rec.version, rec.format, rec.watermark_ms, rec.state_ids) == (7, 8, 1, 0, None)
    assert rec.id_for(0, 0) is None


def test_parse_spark_v2_line() -> None:
    text = b'v2\n{"nextBatchWatermarkMs":1500,"stateUniqueIds":{"0":[["u-p0"],["u-p1"],["u-p2"]],"1":[["a","b"]]}}'
    rec = parse_commit(text, file=FILE, batch_id=7)
    assert (rec.format, rec.watermark_ms) == (2, 1500)
    assert rec.state_ids == {0: (("u-p0",), ("u-p1",), ("u-p2",)), 1: (("a", "b"),)}
    assert [rec.id_for(0, p) for p in range(3)] == ["u-p0", "u-p1", "u-p2"]
    assert (rec.id_for(1, 0, 1), rec.id_for(1, 0, 2), rec.id_for(1, 1), rec.id_for(5, 0)) == ("b", None, None, None)


def test_unknown_json_fields_are_kept() -> None:
    rec = parse_commit(b'v2\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{},"future":{"x":1}}', file=FILE, batch_id=0)
    assert rec.extra == {"future": {"x": 1}}


def test_render_is_spark_exact() -> None:
    assert render_commit(None) == b'v1\n{"nextBatchWatermarkMs":0}'
    assert render_commit({1: [["b"]], 0: [["a0"], ["a1"]]}, 25) == (
        b'v2\n{"nextBatchWatermarkMs":25,"stateUniqueIds":{"0":[["a0"],["a1"]],"1":[["b"]]}}'
    )


def test_render_parse_round_trip() -> None:
    ids = {0: (("x", "y", "z", "w"), ("p", "q", "r", "s")), 3: (("t",),)}
    rec = parse_commit(render_commit(ids, 9), file=FILE, batch_id=4)
    assert (rec.state_ids, rec.watermark_ms, rec.format) == (ids, 9, 2)


@pytest.mark.parametrize("spark", ["4.1.4", "4.3.0"])
@pytest.mark.parametrize("query, operators, stores", [("agg", 1, 1), ("dedup_agg", 2, 1), ("join", 1, 4)])
def test_spark_commit_logs(native: dict[str, Path], spark: str, query: str, operators: int, stores: int) -> None:
    commits = native[spark] / query / "commits"
    names = sorted((p for p in commits.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert names
    for path in names:
        rec = parse_commit(path.read_bytes(), file=str(path), batch_id=int(path.name))
        assert rec.format == 2 and rec.state_ids is not None
        assert sorted(rec.state_ids) == list(range(operators))
        for parts in rec.state_ids.values():
            assert len(parts) == 3 and all(len(p) == stores for p in parts)
        # the committed changelog of every store exists under its id
        for op, parts in rec.state_ids.items():
            for p, ids in enumerate(parts):
                for i, cid in enumerate(ids):
                    sub = (
                        ""
                        if stores == 1
                        else ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")[i]
                        + "/"
                    )
                    assert (commits.parent / f"state/{op}/{p}/{sub}{rec.version}_{cid}.changelog").is_file()


def test_unknown_version_v9() -> None:
    with pytest.raises(UnknownFormatError, match="unknown commit log format v9") as e:
        parse_commit(b'v9\n{"nextBatchWatermarkMs":0}', file=FILE, batch_id=7)
    assert e.value.file == FILE


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", "empty"),
        (b"\x00\xff\x13garbage", "does not start with a version line"),
        (b"hello\n{}", "does not start with a version line"),
        (b'{"nextBatchWatermarkMs":0}', "does not start with a version line"),
        (b"v2\n{broken", "not valid JSON"),
        (b"v2\n[1]", "not an object"),
        (b'v2\n{"stateUniqueIds":[1]}', "stateUniqueIds is not an object"),
        (b'v2\n{"stateUniqueIds":{"x":[]}}', "stateUniqueIds\\['x'\\] is malformed"),
        (b'v2\n{"stateUniqueIds":{"0":["a"]}}', "stateUniqueIds\\[0\\]\\[0\\] is not a list"),
        (b'v2\n{"stateUniqueIds":{"0":[["../a"]]}}', "malformed id '../a'"),
        (b'v2\n{"stateUniqueIds":{"0":[[5]]}}', "malformed id 5"),
    ],
)
def test_garbage_is_a_corrupt_file(data: bytes, match: str) -> None:
    with pytest.raises(CorruptFileError, match=match) as e:
        parse_commit(data, file=FILE, batch_id=7)
    assert e.value.file == FILE and FILE in str(e.value)


def test_commit_log_over_storage(storage: Storage) -> None:
    log = CommitLog(storage)
    assert log.batch_ids() == [] and log.latest() is None and log.read(0) is None
    log.write(0, {0: [["a0"], ["a1"]]})
    log.write(1, {0: [["b0"], ["b1"]]}, watermark_ms=5)
    storage.write("commits/.1.crc", b"hadoop checksum")  # hidden files are not batches
    assert log.batch_ids() == [0, 1]
    assert log.latest() is not None and log.latest().state_ids == {0: (("b0",), ("b1",))}  # type: ignore[union-attr]
    assert storage.read("commits/1") == b'v2\n{"nextBatchWatermarkMs":5,"stateUniqueIds":{"0":[["b0"],["b1"]]}}'
    assert committed_id(log, 0, 0, 1) is None
    assert committed_id(log, 2, 0, 1) == "b1"
    with pytest.raises(StatebedError, match="batch 4 is not committed") as e:
        committed_id(log, 5, 0, 0)
    assert storage.display("commits") in str(e.value)


def test_second_commit_of_a_batch_conflicts_and_keeps_the_first(storage: Storage) -> None:
    log = CommitLog(storage)
    log.write(3, {0: [["first"]]})
    with pytest.raises(CommitConflictError) as e:
        log.write(3, {0: [["second"]]})
    assert e.value.file == storage.display("commits/3") and storage.display("commits/3") in str(e.value)
    rec = log.read(3)
    assert rec is not None and rec.id_for(0, 0) == "first"


def test_corrupt_entry_through_the_log_names_the_file(storage: Storage) -> None:
    storage.write("commits/2", b"v7\n{}")
    with pytest.raises(UnknownFormatError) as e:
        CommitLog(storage).read(2)
    assert e.value.file == storage.display("commits/2")


@pytest.mark.parametrize(
    "data, match",
    [
        (b'v2\n{"nextBatchWatermarkMs":1e400}', "not valid JSON \\(number 1e400 is out of range\\)"),
        (b'v2\n{"nextBatchWatermarkMs":NaN}', "not valid JSON \\(non-finite number NaN"),
        ('v2\n{"stateUniqueIds":{"\u00b2":[]}}'.encode(), "stateUniqueIds\\['\u00b2'\\] is malformed"),
    ],
)
def test_non_finite_or_non_ascii_numbers_are_corrupt_files(data: bytes, match: str) -> None:
    with pytest.raises(CorruptFileError, match=match) as e:
        parse_commit(data, file=FILE, batch_id=7)
    assert e.value.file == FILE


def test_only_ascii_digit_names_are_batches(local_storage: Storage) -> None:
    log = CommitLog(local_storage)
    log.write(0, {0: [["a"]]})
    for name in ("\u00b2", "\u0663", "1.tmp", "_metadata"):  # superscript two, Arabic-Indic three
        local_storage.write(f"commits/{name}", b"v2\n{}")
    assert log.batch_ids() == [0]
    assert log.latest() is not None and log.latest().batch_id == 0  # type: ignore[union-attr]


def test_no_commit_entry_is_passed_over(local_storage: Storage) -> None:
    """A directory named like a batch is a batch whose read names it; a batch id up to Java's
    Long.MAX_VALUE is read; a name Spark parses as a batch but this log does not is a note."""
    log = CommitLog(local_storage)
    log.write(0, {0: [["a0"]]})
    root = Path(local_storage.url)
    (root / "commits" / "1").mkdir()
    local_storage.write(f"commits/{2**63 - 1}", render_commit({0: [["z"]]}))
    local_storage.write(f"commits/{2**63}", render_commit({0: [["z"]]}))  # not a Java long: Spark ignores it too
    for odd in ("+4", "07", "-1"):
        local_storage.write(f"commits/{odd}", render_commit({0: [["z"]]}))
    assert log.batch_ids() == [0, 1, 2**63 - 1]
    with pytest.raises(NotRegularFileError, match="is a directory") as e:
        log.read(1)
    assert e.value.file == str(root / "commits" / "1")
    rec = log.read(2**63 - 1)
    assert rec is not None and rec.version == 2**63
    notes = log.strays()
    assert [n.split(": ")[0].rsplit("/", 1)[1] for n in notes] == ["+4", "-1", "07"]
    assert all("Spark reads it as batch" in n for n in notes) and "batch 4," in notes[0]
