"""A firing record names its process by host, PID and start time, never by PID alone: every
executor JVM of a Kubernetes run is PID 7 in its own pod, on one shared runs volume."""

from __future__ import annotations

import os

from statebed_base import procfs
from statebed_store import failpoints
from statebed_store.failpoint_control import firing_file, firing_process


def test_two_pods_with_the_same_pid_write_two_files() -> None:
    assert firing_file("10.0.0.5", 7, 1234) == "fired-10.0.0.5-7-1234.jsonl"
    assert firing_file("10.0.0.5", 7, 1234) != firing_file("10.0.0.6", 7, 1234)
    assert firing_file("10.0.0.5", 7, 1234) != firing_file("10.0.0.5", 7, 1235)  # a restarted JVM reusing the PID


def test_a_host_name_is_reduced_to_file_name_characters() -> None:
    assert firing_file("../x/\x1b:y", 7, None) == "fired-.._x___y-7-0.jsonl"  # no path separator, no control character
    assert firing_file("", 7, 1) == "fired-unknown-7-1.jsonl"


def test_records_of_one_process_match_and_of_another_do_not() -> None:
    a = {"host": "10.0.0.5", "pid": 7, "started": 1234, "hit": 1}
    assert firing_process(a) == firing_process({**a, "hit": 2})
    assert firing_process(a) != firing_process({**a, "host": "10.0.0.6"})
    assert firing_process(a) != firing_process({**a, "started": 99})


def test_this_process_start_time_is_procs() -> None:
    found = procfs.stat(os.getpid())
    assert found is not None and failpoints._started(os.getpid()) == found[2]
