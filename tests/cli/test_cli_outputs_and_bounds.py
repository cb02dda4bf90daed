"""Issue 24 items 2, 3, 11 and 17 at the CLI (no Spark): names that would leave the output
directory, output directories and files that belong to something else, `--record` that is not a
file, and durations written as Locust writes them. Each refusal is exit 2 with one line naming
the flag or field, before anything runs or is written."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import run_cli

from statebed_cli.commands import chaos, load
from statebed_cli.main import build_parser

Capsys = pytest.CaptureFixture[str]

EXPERIMENT = "name: ok\nworkload: count\nformat: v2\nbatches: 2\nfaults:\n  - {kind: fail-changelog-upload, at: {batch: 1}}\n"


def unusable(capsys: Capsys, *argv: str) -> str:
    """Exit 2 with one line on stderr (argparse's usage lines aside) and no traceback; returns the last line."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


@pytest.fixture
def no_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Stands in for the experiment and load runners: a refusal must come before either is called."""
    calls: list[Any] = []
    monkeypatch.setattr(chaos, "run_experiment", lambda *a, **k: calls.append(a) or pytest.fail("the run started"))
    monkeypatch.setattr(load, "run_load", lambda *a, **k: calls.append(a) or pytest.fail("the load run started"))
    yield calls
    assert calls == []


# -- item 2: no path escapes the output directory ------------------------------------------------


@pytest.mark.parametrize("name", ["../../victim", "a/b", ".hidden", "a\\x00b", "two\\nlines"])
def test_chaos_run_refuses_a_name_that_is_no_file_name(
    capsys: Capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_runs: list[Any], name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "e.yaml"
    f.write_text(EXPERIMENT.replace("name: ok", f'name: "{name}"'))
    line = unusable(capsys, "chaos", "run", str(f))
    assert f"{f}: name: " in line and "cannot be a file name" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]  # no runs/ directory either


def test_chaos_run_refuses_a_param_of_the_wrong_type(capsys: Capsys, tmp_path: Path, no_runs: list[Any]) -> None:
    """Item 11: `ms: abc` was a ValueError inside the fault, exit 70."""
    f = tmp_path / "e.yaml"
    f.write_text("cluster: standalone\nfaults:\n  - {kind: slow-attempt, params: {ms: abc}}\n")
    line = unusable(capsys, "chaos", "run", str(f), "--out", str(tmp_path / "out"))
    assert line == f"statebed chaos: error: {f}: faults[0].params.ms: must be an integer in 0..3600000 (milliseconds), got 'abc'"
    assert not (tmp_path / "out").exists()


# -- item 3: no run overwrites another ----------------------------------------------------------


def test_chaos_run_refuses_a_non_empty_out_directory(capsys: Capsys, tmp_path: Path, no_runs: list[Any]) -> None:
    f = tmp_path / "e.yaml"
    f.write_text(EXPERIMENT)
    other = tmp_path / "other-run"
    other.mkdir()
    (other / "verdict.json").write_text('{"valid": true}')
    line = unusable(capsys, "chaos", "run", str(f), "--out", str(other))
    assert line == f"statebed chaos: error: --out {other}: exists and is not an empty directory"
    assert (other / "verdict.json").read_text() == '{"valid": true}'
    assert f"--out {f}: exists and is not an empty directory" in unusable(capsys, "chaos", "run", str(f), "--out", str(f))


def _special(tmp_path: Path, kind: str) -> tuple[Path, Any]:
    """A FIFO, a bound Unix socket, a directory or a symlink to a regular file, made in tmp_path."""
    path = tmp_path / f"special-{kind}"
    keep: Any = None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        keep = socket.socket(socket.AF_UNIX)
        keep.bind(str(path))
    elif kind == "directory":
        path.mkdir()
    else:
        (tmp_path / "target.html").write_text("kept")
        path.symlink_to(tmp_path / "target.html")
    return path, keep


def _kind_of(path: Path) -> int:
    return os.lstat(path).st_mode & 0o170000


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory", "symlink"])
def test_report_refuses_an_output_that_is_not_a_regular_file(capsys: Capsys, tmp_path: Path, kind: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"schema": 1, "workload": "count", "mode": "v2", "partitions": 2, "checkpoint": "checkpoint"}')
    target, keep = _special(tmp_path, kind)
    before = _kind_of(target)
    try:
        line = unusable(capsys, "report", str(run), "-o", str(target))
    finally:
        if keep is not None:
            keep.close()
    assert line == f"statebed report: error: -o {target}: exists and is not a regular file; refusing to replace it"
    assert _kind_of(target) == before and not (run / "report.html").exists()


def test_report_writes_over_a_regular_file(capsys: Capsys, tmp_path: Path) -> None:
    """The positive control: a regular -o is replaced (what the refusal must not break)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"schema": 1, "workload": "count", "mode": "v2", "partitions": 2, "checkpoint": "checkpoint"}')
    (tmp_path / "r.html").write_text("old")
    code, out, err = run_cli(capsys, "report", str(run), "-o", str(tmp_path / "r.html"))
    assert code == 0, err
    assert "<html" in (tmp_path / "r.html").read_text()


def test_dev_null_is_refused_as_a_report_output(capsys: Capsys, tmp_path: Path) -> None:
    """A real device node, only looked at (lstat) before the refusal: nothing is opened."""
    assert "-o /dev/null: exists and is not a regular file" in unusable(capsys, "report", str(tmp_path), "-o", "/dev/null")
    assert not Path("/dev/null").is_file() and Path("/dev/null").is_char_device()


# -- item 11: bounded load flags; item 17: durations as Locust writes them ----------------------


@pytest.mark.parametrize(
    ("flag", "value", "why"), [("--partitions", "1025", "1024"), ("--users", "10001", "10000"), ("--keyspace", "0", "100000000")]
)
def test_load_sizes_are_bounded(capsys: Capsys, no_runs: list[Any], flag: str, value: str, why: str) -> None:
    assert f"argument {flag}: expected an integer >= 1 and <= {why}, got {value}" in unusable(capsys, "load", "run", flag, value)


@pytest.mark.parametrize(
    ("text", "seconds"), [("30", 30.0), ("30s", 30.0), ("2m", 120.0), ("1h30m", 5400.0), ("1m30s", 90.0), ("2.5", 2.5)]
)
@pytest.mark.parametrize("argv", [["load", "run", "--duration"], ["load", "run", "--kill-ingest-at"], ["run", "--duration"]])
def test_duration_flags_take_locust_timespans(argv: list[str], text: str, seconds: float) -> None:
    args = build_parser().parse_args([*argv, text])
    assert getattr(args, argv[-1].lstrip("-").replace("-", "_")) == seconds


@pytest.mark.parametrize("text", ["soon", "0", "-5", "1d", "25h", "nan"])
@pytest.mark.parametrize("argv", [["load", "run", "--duration"], ["run", "--duration"]])
def test_a_bad_duration_is_exit_2_naming_the_flag(capsys: Capsys, argv: list[str], text: str) -> None:
    line = unusable(capsys, *argv, text)
    assert line.startswith(f"statebed {argv[0]}{' run' if argv[0] == 'load' else ''}: error: argument --duration: "), line
    assert "expected a duration like 30, 30s, 2m or 1h30m" in line or "expected a number > 0" in line or "must be at most 24h" in line
