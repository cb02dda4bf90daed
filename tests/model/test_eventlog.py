"""Reading Spark's event log: a fixture trimmed from two real standalone runs (batch 3 of each;
tests/fixtures/make_eventlog_fixture.py). In app ...115904 the executor of attempt 0 of a
state task was paused after its speculative copy committed; in app ...115418 it was paused
before, was declared lost, and its shuffle blocks with it. The second log is still
`.inprogress` and ends in a partial line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from statebed_base.errors import CorruptFileError, MissingFileError, UsageError
from statebed_model.eventlog import read_event_log

FIXTURE = Path(__file__).parents[1] / "fixtures" / "eventlog"
PAUSED_AFTER_COPY = "app-20261123115904-0000"
LOST = "app-20261123115418-0000"


def test_a_speculative_copy_is_paired_with_the_original_on_the_paused_executor() -> None:
    log = read_event_log(FIXTURE)
    pairs = log.speculative_successes("0", PAUSED_AFTER_COPY)
    assert [(o.task_id, c.task_id) for o, c in pairs] == [(17, 20)]
    original, copy = pairs[0]
    assert (original.stage, original.index, original.attempt, original.host, original.speculative) == (11, 0, 0, "127.0.0.3", False)
    assert original.outcome is None and original.finish_ms is None and not original.succeeded  # paused: never ended
    assert (copy.executor, copy.attempt, copy.speculative, copy.outcome) == ("1", 1, True, "Success")
    assert copy.launch_ms > original.launch_ms and copy.finish_ms is not None
    assert log.speculative_successes("1", PAUSED_AFTER_COPY) == []  # nothing ran first on the other executor


def test_executor_loss_fetch_failures_and_stage_retries() -> None:
    log = read_event_log(FIXTURE)
    lost = log.executor("0", LOST)
    assert lost.host == "127.0.0.3" and lost.removed_ms is not None and "heartbeat" in (lost.removed_reason or "")
    attempts = log.attempts_of((LOST, 11, 0, 0))
    assert [(t.attempt, t.executor, t.speculative, t.outcome) for t in attempts] == [
        (0, "0", False, "ExecutorLostFailure"),
        (1, "2", False, "Success"),
        (2, "1", True, "FetchFailed"),  # its copy could not fetch the lost executor's shuffle blocks
    ]
    assert log.speculative_successes(app=LOST) == []
    stages = {(s.stage, s.attempt): s for s in log.stages if s.app == LOST}
    assert stages[(11, 0)].failure == "org.apache.spark.shuffle.FetchFailedException" and stages[(11, 1)].tasks == 2
    assert stages[(11, 1)].failure is None and stages[(11, 1)].completed_ms is not None


def test_tasks_and_stages_carry_the_streaming_batch_of_their_job() -> None:
    log = read_event_log(FIXTURE)
    assert {t.batch for t in log.tasks} == {3} and {s.batch for s in log.stages} == {3}
    assert sorted((j.app, j.job, j.stages, j.result) for j in log.jobs) == [
        (LOST, 6, (9,), "JobSucceeded"),
        (LOST, 7, (10, 11), "JobSucceeded"),
        (PAUSED_AFTER_COPY, 6, (9,), "JobSucceeded"),
        (PAUSED_AFTER_COPY, 7, (10, 11), "JobSucceeded"),
    ]


def test_a_log_in_progress_ends_in_a_partial_line_that_is_skipped() -> None:
    log = read_event_log(FIXTURE)
    assert log.partial == [str(FIXTURE / f"{LOST}.inprogress")]
    assert {t.app for t in log.tasks} == {LOST, PAUSED_AFTER_COPY}  # ".inprogress" is not part of the app id
    assert len([t for t in log.tasks if t.app == LOST]) == 10
    one = read_event_log(FIXTURE / PAUSED_AFTER_COPY)  # a single file reads the same
    assert one.partial == [] and [t for t in log.tasks if t.app == PAUSED_AFTER_COPY] == one.tasks


def test_an_executor_id_names_one_executor_per_app() -> None:
    log = read_event_log(FIXTURE)
    with pytest.raises(UsageError, match="ambiguous"):
        log.executor("0")
    with pytest.raises(UsageError, match="not in the event log"):
        log.executor("9")
    assert log.executor("2").app == LOST


def test_a_broken_line_before_the_end_names_the_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "app-1"
    lines = (FIXTURE / PAUSED_AFTER_COPY).read_text().splitlines()
    f.write_text("\n".join([*lines[:3], '{"Event": "SparkListenerTaskEnd", "Stage', *lines[3:]]) + "\n")
    with pytest.raises(CorruptFileError, match=r"app-1: line 4 is not JSON"):
        read_event_log(tmp_path)
    f.write_text('{"Event": "SparkListenerTaskStart", "Stage ID": 1}\n')
    with pytest.raises(CorruptFileError, match=r"app-1: line 1: SparkListenerTaskStart without the field"):
        read_event_log(f)


def test_unreadable_inputs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(MissingFileError, match="no such event log"):
        read_event_log(tmp_path / "nope")
    shutil.copy(FIXTURE / PAUSED_AFTER_COPY, tmp_path / "app-1.lz4")
    with pytest.raises(CorruptFileError, match="compressed event log"):
        read_event_log(tmp_path)


def test_rolling_logs_and_checksum_sidecars(tmp_path: Path) -> None:
    roll = tmp_path / f"eventlog_v2_{PAUSED_AFTER_COPY}"
    roll.mkdir()
    lines = (FIXTURE / PAUSED_AFTER_COPY).read_text().splitlines(keepends=True)
    (roll / f"events_2_{PAUSED_AFTER_COPY}").write_text("".join(lines[10:]))
    (roll / f"events_1_{PAUSED_AFTER_COPY}").write_text("".join(lines[:10]))
    (tmp_path / f".{PAUSED_AFTER_COPY}.crc").write_bytes(b"\x00crc")
    log = read_event_log(tmp_path)
    assert log.tasks == read_event_log(FIXTURE / PAUSED_AFTER_COPY).tasks


def test_properties_query_progress_and_task_errors_are_read(tmp_path: Path) -> None:
    """What the judge and corrupt-snapshot read: each app's Spark properties, each progress's summed
    state-operator metrics, and a failed task's exception (lines as Spark 4.3 writes them)."""
    task = {"Task ID": 1, "Index": 0, "Attempt": 0, "Executor ID": "driver", "Host": "localhost", "Speculative": False, "Launch Time": 5}
    events = [
        {
            "Event": "SparkListenerEnvironmentUpdate",
            "Spark Properties": {"spark.sql.streaming.stateStore.autoSnapshotRepair.enabled": "true"},
        },
        {"Event": "SparkListenerTaskStart", "Stage ID": 1, "Stage Attempt ID": 0, "Task Info": task},
        {
            "Event": "SparkListenerTaskEnd",
            "Stage ID": 1,
            "Stage Attempt ID": 0,
            "Task End Reason": {
                "Reason": "ExceptionFailure",
                "Class Name": "org.apache.spark.SparkException",
                "Description": "[CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] An error occurred during loading state.\nmore",
            },
            "Task Info": {**task, "Finish Time": 9},
        },
        {
            "Event": "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent",
            "progress": {
                "batchId": 4,
                "stateOperators": [
                    {"customMetrics": {"rocksdbNumSnapshotsAutoRepaired": 1, "rocksdbGetCount": 10}},
                    {"customMetrics": {"rocksdbNumSnapshotsAutoRepaired": 2}},
                ],
            },
        },
    ]
    (tmp_path / "local-1").write_text("".join(json.dumps(e) + "\n" for e in events))
    log = read_event_log(tmp_path)
    assert log.properties == {"local-1": {"spark.sql.streaming.stateStore.autoSnapshotRepair.enabled": "true"}}
    assert [(p.app, p.batch, p.metrics) for p in log.progress] == [
        ("local-1", 4, {"rocksdbNumSnapshotsAutoRepaired": 3, "rocksdbGetCount": 10})
    ]
    (failed,) = log.tasks
    assert failed.outcome == "ExceptionFailure"
    assert (
        failed.error == "org.apache.spark.SparkException: [CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] An error occurred during loading state."
    )
