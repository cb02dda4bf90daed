"""native-v1 / native-v2: the run modes on Spark's own store (issue 28 #3), without Spark.

`native` stays what it was (checkpoint format V2, `--native`), so older run.json files,
experiment files and scripts read on; `native-v1` is Spark's V1 on the same queries."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from statebed_base.errors import CorruptFileError, UsageError
from statebed_chaos.experiment import parse_experiment
from statebed_chaos.faults import fault_class
from statebed_chaos.faults.base import FaultSpec, NotApplicable, Trigger
from statebed_cli.commands.run import _options
from statebed_cli.main import build_parser
from statebed_job.config import JobOptions
from statebed_job.session import CHECKPOINT_FORMAT_CONF, RETAIN_CONF, spark_conf
from statebed_model.native_state import collect_list_ids, encode_sample, native_items
from statebed_model.rundir import RunDir
from statebed_report.reproduce import run_argv
from statebed_store.formats import get_format
from statebed_store.location import is_remote

CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"


@pytest.mark.parametrize(("format", "version"), [("native-v1", "1"), ("native-v2", "2"), ("native", "2")])
def test_native_session_sets_the_checkpoint_format(tmp_path: Path, format: str, version: str) -> None:
    conf = spark_conf(JobOptions(format=format), RunDir(tmp_path), "local[2]")  # type: ignore[arg-type]
    assert CHECKPOINT_FORMAT_CONF == CONF and conf[CONF] == version
    assert conf["spark.sql.streaming.stateStore.providerClass"].endswith("RocksDBStateStoreProvider")


def test_statebed_modes_do_not_touch_spark_store_confs(tmp_path: Path) -> None:
    conf = spark_conf(JobOptions(format="v1", retain=7), RunDir(tmp_path), "local[2]")
    assert CONF not in conf and RETAIN_CONF not in conf


@pytest.mark.parametrize("format", ["native", "native-v1", "native-v2"])
def test_retain_is_sparks_min_batches_to_retain_in_native_modes(tmp_path: Path, format: str) -> None:
    args = build_parser().parse_args(
        ["run", "--format", format, "--retain", "7"] if format != "native" else ["run", "--native", "--retain", "7"]
    )
    assert spark_conf(_options(args), RunDir(tmp_path), "local[2]")[RETAIN_CONF] == "7"
    assert spark_conf(JobOptions(format=format), RunDir(tmp_path), "local[2]")[RETAIN_CONF] == "100"  # type: ignore[arg-type]
    assert RETAIN_CONF == "spark.sql.streaming.minBatchesToRetain"


def test_native_modes() -> None:
    assert [get_format(m).native for m in ("native", "native-v1", "native-v2", "v1", "v2")] == [True, True, True, False, False]
    assert [get_format(m).version for m in ("native", "native-v1", "native-v2")] == [2, 1, 2]
    assert [get_format(m).plugin for m in ("native", "native-v1", "native-v2", "v1", "v2")] == [False, True, True, False, False]
    with pytest.raises(UsageError, match="format: unknown format 'native-v3' \\(known: v1, v2, native-v1, native-v2\\)"):
        get_format("native-v3")
    with pytest.raises(UsageError, match="native-v1, native-v2"):
        JobOptions(format="native-v3")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "format"), [(["--format", "native-v1"], "native-v1"), (["--format", "native-v2"], "native-v2"), (["--native"], "native")]
)
def test_run_cli_takes_the_native_formats(argv: list[str], format: str) -> None:
    args = build_parser().parse_args(["run", "--workload", "sample3", *argv])
    opts = _options(args)
    assert opts.format == format and opts.native
    assert run_argv(opts)[: 2 + len(argv)] == ["--workload", "sample3", *argv]  # the reproduce line round-trips


def test_an_experiment_in_native_v1_parses_and_process_faults_apply() -> None:
    exp = parse_experiment(
        {"name": "n", "workload": "bucket-collect", "format": "native-v1", "faults": [{"kind": "restart-driver", "at": {"batch": 2}}]}
    )
    assert exp.format.name == "native-v1" and exp.faults[0].params.get("step") in (None, "at-trigger")
    restart = fault_class("restart-driver")(exp.faults[0])
    restart.check(get_format("native-v1"), "local", "local")
    assert restart.point(get_format("native-v1")) is None  # at-trigger: no statebed failpoint in a native run
    worker = fault_class("kill-python-worker")(FaultSpec(id="w", kind="kill-python-worker", at=Trigger(batch=1)))
    with pytest.raises(NotApplicable):
        worker.check(get_format("native-v2"), "standalone", "local")


def test_collect_list_buffer_decodes() -> None:
    """Spark's serialized collect_list buffer: an UnsafeRow (no version byte) of one array<long>."""
    ids = [7, 3, 11]
    array = struct.pack("<q", len(ids)) + b"\0" * 8 + struct.pack(f"<{len(ids)}q", *ids)
    row = b"\0" * 8 + struct.pack("<Q", (16 << 32) | len(array)) + array
    assert collect_list_ids(row) == ids
    with pytest.raises(CorruptFileError):
        collect_list_ids(row[:20])


def test_native_bucket_collect_state_translates() -> None:
    """A bucket-collect state row as Spark's RocksDB store holds it -> statebed's encoding."""
    array = struct.pack("<q", 2) + b"\0" * 8 + struct.pack("<2q", 5, 9)
    buffer = b"\0" * 8 + struct.pack("<Q", (16 << 32) | len(array)) + array
    key = b"\0" + b"\0" * 8 + struct.pack("<q", 42)
    value = b"\0" + b"\0" * 8 + struct.pack("<Q", (16 << 32) | len(buffer)) + buffer
    assert list(native_items("bucket-collect", [(key, value)])) == [((42).to_bytes(8, "big"), struct.pack(">2q", 5, 9))]


def test_sample_encoding_matches_the_statebed_workload() -> None:
    items = dict(encode_sample(4, [10, 12], 5))
    k = (4).to_bytes(8, "big")
    assert items == {k + b"\0" + (10).to_bytes(8, "big"): b"", k + b"\0" + (12).to_bytes(8, "big"): b"", k + b"\1": (5).to_bytes(8, "big")}


def _row(*longs: int) -> bytes:
    """A version-0 UnsafeRow of longs, as Spark's state encoding stores it."""
    return b"\0" + b"\0" * 8 + struct.pack(f"<{len(longs)}q", *longs)


def test_native_sample3_state_translates_per_column_family() -> None:
    """transformWithState keys start with a 2-byte column family id; a ListState value is
    `[length][row]` per element; `$rowCounter_sample` must agree with the list."""
    families = {2: "$rowCounter_sample", 3: "sample", 4: "seen"}
    fam = {n: i.to_bytes(2, "little") for i, n in families.items()}
    listed = b"".join(len(_row(i)).to_bytes(4, "little") + _row(i) for i in (10, 12))
    items = [(fam["sample"] + _row(4), listed), (fam["seen"] + _row(4), _row(5)), (fam["$rowCounter_sample"] + _row(4), _row(2))]
    assert dict(native_items("sample3", items, families)) == dict(encode_sample(4, [10, 12], 5))
    with pytest.raises(CorruptFileError, match="rowCounter"):
        list(native_items("sample3", [*items[:2], (fam["$rowCounter_sample"] + _row(4), _row(3))], families))
    with pytest.raises(CorruptFileError, match="does not fit"):
        list(native_items("sample3", [(fam["sample"] + _row(4), listed[:-1])], families))
    with pytest.raises(UsageError, match="column families"):
        list(native_items("sample3", items))


@pytest.mark.parametrize(
    ("kind", "params", "native_point"),
    [
        ("delay-snapshot-upload", {}, "native.snapshot.upload"),
        ("drop-snapshot-upload", {}, "native.snapshot.upload"),
        ("fail-changelog-upload", {}, "native.changelog.upload"),
    ],
)
def test_failpoint_faults_reach_native_v1_v2_through_the_jvm_plugin(
    tmp_path: Path, kind: str, params: dict[str, str], native_point: str
) -> None:
    """native-v1 / native-v2 sessions load the plug-in; the faults whose write has a twin there
    arm the plug-in's point. `native` keeps running without it, so they do not apply there."""
    from statebed_job.jvm_plugin import POINTS

    f = fault_class(kind)(FaultSpec(id="f", kind=kind, at=Trigger(batch=1), params=params))
    for format in ("native-v1", "native-v2"):
        f.check(get_format(format), "standalone", "local")
    with pytest.raises(NotApplicable):
        f.check(get_format("native"), "standalone", "local")
    assert native_point in POINTS and f.native_points[f.point] == native_point  # type: ignore[attr-defined]


def test_native_v1_v2_sessions_load_the_plugin_and_native_does_not(tmp_path: Path) -> None:
    for format, loaded in (("native-v1", True), ("native-v2", True), ("native", False)):
        conf = spark_conf(JobOptions(format=format), RunDir(tmp_path), "local[2]")  # type: ignore[arg-type]
        assert ("spark.sql.streaming.checkpointFileManagerClass" in conf) == loaded
        assert ("spark.hadoop.statebed.failpoints.control" in conf) == loaded


def test_failpoints_without_a_native_twin_do_not_apply_to_native() -> None:
    f = fault_class("fail-changelog-upload")(FaultSpec(id="f", kind="fail-changelog-upload", at=Trigger(batch=1), params={"when": "after"}))
    with pytest.raises(NotApplicable, match="no point in Spark"):
        f.check(get_format("native-v2"), "standalone", "local")
    with pytest.raises(NotApplicable, match="one try"):
        fault_class("fail-changelog-upload")(FaultSpec(id="g", kind="fail-changelog-upload", at=Trigger(batch=1))).check(
            get_format("native-v1"), "local", "local"
        )


@pytest.mark.parametrize("fmt", ["native-v1", "native-v2"])
def test_load_run_takes_the_native_formats(tmp_path: Path, fmt: str) -> None:
    from statebed_load.load_run import LoadOptions, job_options

    args = build_parser().parse_args(["load", "run", "--format", fmt])
    assert args.format == fmt
    assert job_options(LoadOptions(format=fmt), None, 7, tmp_path).format == fmt


def test_load_run_keeps_the_experiments_checkpoint_file_manager(tmp_path: Path) -> None:
    """A load run of an experiment with Spark's cloud file manager in a bucket runs with it, as the
    chaos run of the same experiment does (it used to fall back to the rename-based default)."""
    from statebed_chaos.launcher import job_options as chaos_job_options
    from statebed_load.load_run import LoadOptions, job_options

    exp = parse_experiment(
        {"name": "a", "workload": "count", "format": "native-v2", "storage": "s3", "checkpoint_file_manager": "abortable"}
    )
    load = job_options(LoadOptions(format="native-v2"), exp, 7, tmp_path)
    assert load.checkpoint_file_manager == "abortable" and is_remote(load.checkpoint)
    assert chaos_job_options(exp, 7, tmp_path / "run").checkpoint_file_manager == "abortable"
