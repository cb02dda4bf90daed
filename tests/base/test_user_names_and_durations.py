"""The two parsers of what a user types that ends up in a path or a timer: `statebed_base.names.path_segment`
(a name that becomes one file name) and `durations.parse_duration` (Locust's timespans)."""

from __future__ import annotations

import pytest

from statebed_base.durations import parse_duration
from statebed_base.errors import UsageError
from statebed_base.names import MAX_SEGMENT_BYTES, path_segment


@pytest.mark.parametrize("name", ["experiment", "zombie-upload-sample3-v1-s1", "a.b", "ünïcode", "x" * MAX_SEGMENT_BYTES])
def test_ordinary_names_are_path_segments(name: str) -> None:
    assert path_segment(name, "name") == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "it is empty"),
        (".", "it starts with '.'"),
        ("..", "it starts with '.'"),
        ("../../x", "it starts with '.'"),
        ("a/../b", "it holds '/', '\\' or '..'"),
        ("a..b", "it holds '/', '\\' or '..'"),
        ("a\\b", "it holds '/', '\\' or '..'"),
        ("a\x00b", "control character"),
        ("a\nb", "control character"),
        ("\x1b[31mred", "control character"),
        ("a\u202eb", "control character"),  # a bidi override (format character) forges what a terminal shows
        ("x" * (MAX_SEGMENT_BYTES + 1), f"longer than {MAX_SEGMENT_BYTES} bytes"),
        (7, "expected a string"),
    ],
)
def test_names_that_could_leave_a_directory_or_forge_output_are_refused(name: object, why: str) -> None:
    with pytest.raises(UsageError) as e:
        path_segment(name, "f.yaml: name")
    msg = str(e.value)
    assert msg.startswith(f"f.yaml: name: {name!r} cannot be a file name: ") and why in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(30, 30.0), (2.5, 2.5), ("30", 30.0), ("30s", 30.0), ("2m", 120.0), ("1h30m", 5400.0), ("1h2m3s", 3723.0), (" 10S ", 10.0)],
)
def test_durations_are_locust_timespans(value: object, seconds: float) -> None:
    assert parse_duration(value, "--duration", maximum=86400) == seconds


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "expected a duration like 30, 30s, 2m or 1h30m, got ''"),
        ("soon", "expected a duration like"),
        ("1d", "expected a duration like"),
        ("30m1h", "expected a duration like"),  # Locust's order: h, m, s
        ("1e3", "expected a duration like"),
        (True, "expected a duration like"),
        (float("inf"), "expected a duration like"),
        ("0", "expected a number > 0"),
        ("-5", "expected a number > 0"),
        ("25h", "must be at most 24h (86400 s), got '25h'"),
    ],
)
def test_a_bad_duration_names_the_flag(value: object, why: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_duration(value, "--duration", maximum=86400)
    assert str(e.value).startswith("--duration: ") and why in str(e.value)


def test_zero_is_a_duration_only_where_allowed() -> None:
    assert parse_duration("0s", "after_s", maximum=60, zero_ok=True) == 0.0
    with pytest.raises(UsageError, match="expected a number >= 0"):
        parse_duration("-1", "after_s", maximum=60, zero_ok=True)
