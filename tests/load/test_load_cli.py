"""`statebed load run` and the continuous `statebed run` flags refuse bad input with exit 2 and one line, before starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkpoint_helpers import run_cli

Capsys = pytest.CaptureFixture[str]


def fails(capsys: Capsys, *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (2, ""), (code, out, err)
    assert len(err.strip().splitlines()) >= 1 and "Traceback" not in err
    return err


def test_bad_load_arguments_are_exit_2(capsys: Capsys, tmp_path: Path) -> None:
    assert "invalid choice: 'wave'" in fails(capsys, "load", "run", "--shape", "wave")
    assert "expected a number > 0" in fails(capsys, "load", "run", "--duration", "0")
    assert "expected an integer >= 1" in fails(capsys, "load", "run", "--users", "0")
    missing = tmp_path / "nope.yaml"
    assert str(missing) in fails(capsys, "load", "run", "--experiment", str(missing))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("")
    assert f"{busy}: not empty" in fails(capsys, "load", "run", "--out", str(busy))
    assert list(busy.iterdir()) == [busy / "x"]  # nothing started, nothing written


def test_a_stop_condition_without_the_ingest_source_is_exit_2(capsys: Capsys, tmp_path: Path) -> None:
    err = fails(capsys, "run", "--duration", "5", "--run-dir", str(tmp_path / "r"))
    assert "--source must be ingest for a stop condition (a duration, a record count or a stop file)" in err
    assert not (tmp_path / "r").exists()


def test_the_locustfile_the_load_run_starts_is_there(tmp_path: Path) -> None:
    """`statebed load run` starts Locust on this file: a layout change once left it pointing nowhere."""
    from statebed_load.load_run import LOCUSTFILE, LoadOptions, locust_command

    argv = locust_command(LoadOptions(), "http://127.0.0.1:1", 1, tmp_path)
    assert argv[argv.index("-f") + 1] == str(LOCUSTFILE) and LOCUSTFILE.is_file() and LOCUSTFILE.name == "locustfile.py"
