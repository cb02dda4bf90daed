"""`statebed_report.reproduce.run_argv` is the one builder of a `statebed run` command line (the report's
reproduce line): the real CLI parser turns it back into exactly the same options, for the
defaults and for every option set to something else. The harnesses carry no command line: they
describe the run in its directory (`run.json`) and start `python -m statebed_job RUN_DIR`."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any

import pytest

from statebed_base.errors import FieldError, UsageError
from statebed_chaos.experiment import parse_experiment
from statebed_chaos.launcher import describe, job_options, run_command
from statebed_cli.commands.run import _options
from statebed_cli.main import build_parser
from statebed_job.config import JobOptions, flag_of, run_flags
from statebed_load.load_run import LoadOptions
from statebed_load.load_run import describe as load_describe
from statebed_load.load_run import job_command as load_job_command
from statebed_model.rundir import RunDir, RunInfo
from statebed_report.records import read_run
from statebed_report.reproduce import run_argv
from statebed_report.run_report import view_of_run
from statebed_store.formats import FORMATS

# one value other than the default for every field of JobOptions (a new field needs one here)
NON_DEFAULT: dict[str, dict[str, Any]] = {
    "workload": {"workload": "sample3"},
    "batches": {"batches": 9},
    "partitions": {"partitions": 7},
    "rows_per_batch": {"rows_per_batch": 123},
    "keyspace": {"keyspace": 17},
    "format": {"format": "v1"},
    "cluster": {"cluster": "standalone"},
    "workers": {"workers": 3},
    "checkpoint": {"checkpoint": "s3://bucket/some prefix"},
    "snapshot_interval": {"snapshot_interval": 4},
    "hedge": {"hedge": "adaptive"},
    "slow_task": {"slow_task": "1:0:2500"},
    "source": {"source": "ingest", "landing": "/tmp/land ing"},
    "landing": {"source": "ingest", "landing": "relative/landing"},
    "duration_s": {"source": "ingest", "landing": "l", "duration_s": 0.1},
    "until_records": {"source": "ingest", "landing": "l", "until_records": 5},
    "stop_file": {"source": "ingest", "landing": "l", "stop_file": "/abs/stop"},
    "trigger_ms": {"trigger_ms": 77},
    "extra_conf": {"extra_conf": {"spark.a": "1", "spark.b": "x=y"}},
    "seed": {"seed": 2**63 - 1},
    "retain": {"retain": 3},
    "maintenance_interval_s": {"maintenance_interval_s": 0.0},
    "sst_grace_s": {"sst_grace_s": 30.0},
    "checkpoint_file_manager": {"format": "native-v2", "checkpoint": "s3://b/p", "checkpoint_file_manager": "abortable"},
}


def parse(argv: list[str]) -> JobOptions:
    """What `statebed run ARGV` runs with (the real parser and the real argument-to-options step)."""
    return _options(build_parser().parse_args(["run", *argv]))


def test_every_field_has_a_non_default_sample() -> None:
    assert set(NON_DEFAULT) == {f.name for f in dataclasses.fields(JobOptions)}


def test_defaults_round_trip() -> None:
    opts = JobOptions(seed=42)
    assert parse(run_argv(opts)) == opts


@pytest.mark.parametrize("field", sorted(NON_DEFAULT))
def test_every_non_default_option_round_trips(field: str) -> None:
    opts = JobOptions(**{"seed": 3, **NON_DEFAULT[field]})
    assert parse(run_argv(opts)) == opts


def test_native_and_everything_at_once_round_trip() -> None:
    every: dict[str, Any] = {}
    for sample in NON_DEFAULT.values():
        every |= sample
    for format in ("native", "native-v1", "native-v2", "v1"):
        manager = "abortable" if FORMATS[format].plugin else "rename"  # the cloud manager is the plug-in's
        opts = JobOptions(**{**every, "format": format, "checkpoint_file_manager": manager})
        assert parse(run_argv(opts)) == opts


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"checkpoint_file_manager": "magic"}, "must be rename or abortable"),
        ({"checkpoint_file_manager": "abortable", "format": "native-v2"}, "on an s3:// checkpoint"),
        ({"checkpoint_file_manager": "abortable", "format": "v2", "checkpoint": "s3://b/p"}, "native-v1, native-v2"),
    ],
)
def test_the_cloud_file_manager_is_only_for_the_plugin_in_a_bucket(fields: dict[str, Any], detail: str) -> None:
    with pytest.raises(FieldError, match="checkpoint_file_manager") as e:
        JobOptions(**fields)
    assert detail in str(e.value)


def described(run_dir: Path) -> JobOptions:
    """The options a described run directory holds (what `python -m statebed_job RUN_DIR` runs with)."""
    info = RunDir(run_dir).read_info()
    assert info.started is False
    return JobOptions.from_json(info.params)


def test_the_chaos_harness_describes_the_experiments_options_and_starts_the_job_from_them(tmp_path: Path) -> None:
    exp = parse_experiment({"name": "x", "batches": 4, "partitions": 5, "rows_per_batch": 50, "storage": "s3", "workers": 3})
    run_dir = tmp_path / "faulted"
    describe(exp, 9, run_dir)
    assert run_command(run_dir)[1:] == ["-m", "statebed_job", str(run_dir), "--json"]
    opts = described(run_dir)
    assert opts == job_options(exp, 9, run_dir)
    assert (opts.batches, opts.partitions, opts.rows_per_batch, opts.workers, opts.seed) == (4, 5, 50, 3, 9)
    assert opts.checkpoint == f"s3://statebed/{tmp_path.name}-faulted-9"
    assert run_command(run_dir, resume=True)[-1] == "--resume"


def test_the_load_command_is_an_ingest_run(tmp_path: Path) -> None:
    load_describe(LoadOptions(partitions=4, trigger_ms=250), None, 11, tmp_path)
    cmd = load_job_command(tmp_path)
    assert cmd[1:4] == ["-m", "statebed_job", str(tmp_path)] and cmd[cmd.index("--metrics-port") + 1] == "0"
    opts = described(tmp_path)
    assert (opts.source, opts.landing, opts.stop_file) == ("ingest", str(tmp_path / "landing"), str(tmp_path / "load" / "stop"))
    assert (opts.partitions, opts.trigger_ms, opts.seed, opts.format) == (4, 250, 11, "v2")


def test_the_reports_reproduce_line_replays_the_saved_options(tmp_path: Path) -> None:
    opts = JobOptions(seed=8, hedge="on", batches=2, extra_conf={"spark.x": "1"})
    run = RunDir(tmp_path / "run")
    run.create(
        RunInfo(workload=opts.workload, format=opts.format, partitions=opts.partitions, checkpoint=opts.checkpoint, params=opts.to_json())
    )
    line = shlex.split(view_of_run(read_run(run.root)).reproduce)
    assert line[:4] == ["statebed", "run", "--run-dir", f"{run.root}-replay"]
    assert parse(line[4:]) == opts  # --hedge was missing from the hand-built line


def test_every_option_is_one_row_of_the_table_the_parser_errors_and_reproduce_line_share() -> None:
    """The table of run options (`Flag` on each JobOptions field) is the only place a flag is
    spelled: the parser has exactly its flags (plus the command's own), with its choices; a bad
    field is reported by its flag; the CLI no longer imports the report to name one."""
    flags = run_flags()
    assert set(flags) == {f.name for f in dataclasses.fields(JobOptions)}  # every field has its row
    run_parser = next(a for a in build_parser()._subparsers._group_actions[0].choices.values() if a.prog.endswith(" run"))  # type: ignore[union-attr]
    by_flag = {s: a for a in run_parser._actions for s in a.option_strings}
    own = {"-h", "--help", "--native", "--master", "--metrics-port", "--run-dir", "--resume", "--no-verify", "--no-report", "--json"}
    assert set(by_flag) - own - {"--s3-endpoint", "--s3-access-key", "--s3-secret-key"} == {f.name for f in flags.values()}
    for flag in flags.values():
        assert tuple(by_flag[flag.name].choices or ()) == flag.choices, flag.name
    assert flag_of("snapshot_interval") == "--snapshot-interval" and flag_of("extra_conf") == "--conf" and flag_of("x") == "x"
    with pytest.raises(UsageError, match=r"^--slow-task wants BATCH:PARTITION:MILLISECONDS"):
        parse(["--slow-task", "a:b"])
    source = (Path(__file__).resolve().parents[2] / "src/statebed_cli/commands/run.py").read_text()
    assert "statebed_report" not in source
