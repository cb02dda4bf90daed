"""Attempt records: written at an attempt's start, rewritten at its end, read back in order."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from statebed_base.errors import CorruptFileError, InjectedFault
from statebed_model.attempts import ATTEMPTS_DIR, read_attempts, write_end, write_loaded, write_start


def test_a_record_is_rewritten_in_place_from_info_to_ok(tmp_path: Path) -> None:
    d = tmp_path / ATTEMPTS_DIR
    rec = write_start(d, batch=3, partition=1, attempt=0, stage=7, task_attempt_id=42, version=4, base_id="b-id")
    assert [p.name for p in d.iterdir()] == [rec.file_name] and rec.file_name == f"b3-p1-a0-t42-pid{rec.pid}.json"
    [seen] = read_attempts(tmp_path)
    assert seen == rec and seen.outcome == "info" and seen.end is None and seen.checkpoint_id is None
    loaded = write_loaded(d, rec, "new-id")  # an attempt killed from here on still owns "new-id"
    assert read_attempts(tmp_path) == [loaded] and (loaded.outcome, loaded.checkpoint_id) == ("info", "new-id")
    done = write_end(d, loaded, "ok", checkpoint_id="new-id")
    assert [p.name for p in d.iterdir()] == [rec.file_name]
    assert read_attempts(tmp_path) == [done]
    assert (done.outcome, done.checkpoint_id, done.base_id, done.version, done.error) == ("ok", "new-id", "b-id", 4, None)
    assert done.end is not None and done.end >= done.start and done.host and done.stage == 7


def test_a_failure_keeps_the_first_line_of_its_error(tmp_path: Path) -> None:
    d = tmp_path / ATTEMPTS_DIR
    rec = write_start(d, batch=0, partition=0, attempt=1)
    failed = write_end(d, rec, "fail", checkpoint_id="orphan", error=InjectedFault("failpoint x fired: boom\nmore\ndetail"))
    assert failed.error == "InjectedFault: failpoint x fired: boom" and failed.checkpoint_id == "orphan"
    assert read_attempts(tmp_path)[0].outcome == "fail" and "-t" not in rec.file_name  # no Spark task id outside Spark
    with pytest.raises(ValueError, match="ok or fail"):
        write_end(d, rec, "info")


def test_records_come_back_by_batch_partition_then_start(tmp_path: Path) -> None:
    d = tmp_path / ATTEMPTS_DIR
    order = [(1, 1, 0, 10), (0, 1, 0, 11), (1, 0, 1, 12), (1, 0, 0, 13), (0, 0, 0, 14)]
    for batch, partition, attempt, tid in order:
        write_start(d, batch=batch, partition=partition, attempt=attempt, task_attempt_id=tid)
    got = [(r.batch, r.partition, r.task_attempt_id) for r in read_attempts(tmp_path)]
    assert got == [(0, 0, 14), (0, 1, 11), (1, 0, 12), (1, 0, 13), (1, 1, 10)]


def test_no_directory_means_no_records_and_bad_records_are_named(tmp_path: Path) -> None:
    assert read_attempts(tmp_path) == []
    d = tmp_path / ATTEMPTS_DIR
    d.mkdir()
    (d / "b0-p0-a0-t1-pid1.json").write_text("{not json")
    with pytest.raises(CorruptFileError, match=r"b0-p0-a0-t1-pid1\.json"):
        read_attempts(tmp_path)
    (d / "b0-p0-a0-t1-pid1.json").write_text(json.dumps({"batch": 0, "partition": 0}))
    with pytest.raises(CorruptFileError, match="unexpected or missing fields"):
        read_attempts(tmp_path)
    rec = write_start(tmp_path / "other", batch=0, partition=0, attempt=0)
    (d / "b0-p0-a0-t1-pid1.json").write_text(json.dumps({**rec.to_json(), "outcome": "maybe"}))
    with pytest.raises(CorruptFileError, match="outcome 'maybe'"):
        read_attempts(tmp_path)


def test_a_record_that_cannot_be_written_is_a_warning_not_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("in the way")
    with caplog.at_level(logging.WARNING, logger="statebed.attempts"):
        rec = write_start(blocked / ATTEMPTS_DIR, batch=0, partition=0, attempt=0)
        write_end(blocked / ATTEMPTS_DIR, rec, "ok")
    assert [r.getMessage() for r in caplog.records] == ["cannot write an attempt record"] * 2
    assert blocked.read_text() == "in the way"
