"""Experiment files: every mistake is one line naming the file and the field; schedules replay."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from statebed_base.errors import UsageError
from statebed_chaos.experiment import Experiment, load_experiment, parse_experiment
from statebed_chaos.schedule import realise

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "experiments"


def _error(tmp_path: Path, text: str) -> str:
    f = tmp_path / "e.yaml"
    f.write_text(text)
    with pytest.raises(UsageError) as e:
        load_experiment(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}: ") and "\n" not in msg
    return msg


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("batchs: 3\n", "batchs: unknown key"),
        ("batches: three\n", "batches: must be an integer in 1..100000"),
        ("batches: true\n", "batches: must be an integer in 1..100000"),
        ("format: v3\n", "format: must be one of v1, v2, native"),
        ("format: native-v3\n", "format: must be one of v1, v2, native, native-v1, native-v2"),
        ("faults: {kind: x}\n", "faults: must be a list"),
        ("faults:\n  - kind: nope\n", "faults[0]: kind: unknown fault kind 'nope'"),
        ("faults:\n  - {kind: fail-changelog-upload, when: 3}\n", "faults[0].when: unknown key"),
        ("faults:\n  - {kind: fail-changelog-upload, at: {batch: -1}}\n", "faults[0].at.batch: must be an integer in 0..100000"),
        ("faults:\n  - kind: kill-executor\n", "faults[0]: kill-executor needs cluster: standalone"),
        ("faults:\n  - kind: fail-changelog-upload\n  - kind: fail-changelog-upload\n    id: f1\n", "faults: duplicate fault id 'f1'"),
        ("schedule: {random: {count: 2, kinds: [kill-executor]}}\n", "schedule.random.kinds: kill-executor needs cluster: standalone"),
        (
            "schedule: {random: {count: 2, kinds: [fail-changelog-upload], batches: [3, 1]}}\n",
            "schedule.random.batches: must be 0 <= first",
        ),
        ("verifiers: [lineage, vibes]\n", "verifiers: unknown verifier 'vibes'"),
        ("checkpoint_file_manager: magic\n", "checkpoint_file_manager: must be one of rename, abortable"),
        ("format: native-v2\ncheckpoint_file_manager: abortable\n", "checkpoint_file_manager: abortable needs a plug-in format"),
        ("format: native-v2\nspark_features: [self-heal]\n", "spark_features: unknown feature 'self-heal' (known: auto-snapshot-repair"),
        ("spark_features: [row-checksum]\n", "spark_features: are Spark's own store's: they need a native format"),
        ("format: native-v2\nspark_features: row-checksum\n", "spark_features: must be a list"),
        ("proxy: {api: localhost:8474}\n", "proxy.api: must be an http(s):// URL"),
        ("name: [a\n", "not valid YAML at line"),
        ("- 1\n", "(top level): must be a mapping"),
    ],
)
def test_errors_name_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    assert field in _error(tmp_path, text)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read the experiment file"):
        load_experiment(tmp_path / "missing.yaml")


def test_defaults_and_round_trip() -> None:
    exp = parse_experiment({"name": "t", "faults": [{"kind": "fail-changelog-upload", "at": {"batch": 2}, "params": {"partition": 1}}]})
    assert (exp.workload, exp.format.name, exp.storage, exp.cluster, exp.seed) == ("count", "v2", "local", "local", None)
    assert exp.faults[0].id == "f1" and exp.faults[0].at.batch == 2 and exp.faults[0].params == {"partition": 1}
    again = parse_experiment(yaml.safe_load(exp.to_yaml()))
    assert again == exp


def test_a_native_run_sets_every_spark_feature_explicitly_and_round_trips_them() -> None:
    exp = parse_experiment({"format": "native-v2", "spark_features": ["row-checksum", "row-checksum"]})
    assert exp.spark_features == ("row-checksum",)
    conf = exp.spark_conf()
    assert conf["spark.sql.streaming.stateStore.rowChecksum.enabled"] == "true"
    assert conf["spark.sql.streaming.stateStore.autoSnapshotRepair.enabled"] == "false"
    assert conf["spark.sql.streaming.stateStore.forceSnapshotUploadOnLag"] == "false"
    assert parse_experiment(yaml.safe_load(exp.to_yaml())) == exp
    off = parse_experiment({"format": "native-v2", "spark_features": []}).spark_conf()
    assert {k: v for k, v in off.items() if k.endswith(".enabled")} == {
        "spark.sql.streaming.stateStore.autoSnapshotRepair.enabled": "false",
        "spark.sql.streaming.stateStore.rowChecksum.enabled": "false",
    }
    default = parse_experiment({"format": "native-v2"})  # not given: Spark 4.3's defaults, set explicitly
    assert default.spark_features is None and parse_experiment(yaml.safe_load(default.to_yaml())) == default
    assert default.spark_conf()["spark.sql.streaming.stateStore.autoSnapshotRepair.enabled"] == "true"
    assert default.spark_conf()["spark.sql.streaming.stateStore.forceSnapshotUploadOnLag"] == "true"
    assert not any("stateStore" in k for k in parse_experiment({"format": "v2"}).spark_conf())  # statebed's store: none


def test_random_schedule_replays_per_seed() -> None:
    exp = parse_experiment(
        {
            "cluster": "standalone",
            "schedule": {"random": {"count": 4, "kinds": ["kill-executor", "pause-executor"], "batches": [1, 4], "after_s": 1.0}},
        }
    )
    a, b, c = realise(exp, 7), realise(exp, 7), realise(exp, 8)
    assert a == b and [s.id for s in a] == ["f1", "f2", "f3", "f4"]
    assert all(1 <= s.at.batch <= 4 and 0 <= s.at.after_s <= 1.0 for s in a)
    assert [(s.kind, s.at) for s in a] != [(s.kind, s.at) for s in c]


def test_examples_load() -> None:
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert len(files) >= 5
    for f in files:
        assert isinstance(load_experiment(f), Experiment)


# -- issue 24: names that become paths, bounded sizes, typed params, durations -------------------


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name: ../../other\n", "name: '../../other' cannot be a file name"),
        ("name: a/b\n", "name: 'a/b' cannot be a file name"),
        ("name: .hidden\n", "name: '.hidden' cannot be a file name: it starts with '.'"),
        ('name: "a\\0b"\n', "name: 'a\\x00b' cannot be a file name: it holds a control character"),
        ('name: "two\\nlines"\n', "name: 'two\\nlines' cannot be a file name"),
        ('name: "\\e[31mred"\n', "cannot be a file name: it holds a control character"),
        ("faults:\n  - {kind: fail-changelog-upload, id: ../f}\n", "faults[0].id: '../f' cannot be a file name"),
        ("faults:\n  - {kind: fail-changelog-upload, id: 7}\n", "faults[0].id: must be a non-empty string"),
    ],
)
def test_a_name_that_would_leave_the_output_directory_is_refused(tmp_path: Path, text: str, field: str) -> None:
    assert field in _error(tmp_path, text)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("batches: 100001\n", "batches: must be an integer in 1..100000, got 100001"),
        ("partitions: 1025\n", "partitions: must be an integer in 1..1024"),
        ("rows_per_batch: 10000000000\n", "rows_per_batch: must be an integer in 1..10000000"),
        ("keyspace: 1000000000\n", "keyspace: must be an integer in 1..100000000"),
        ("snapshot_interval: 100001\n", "snapshot_interval: must be an integer in 1..100000"),
        ("max_driver_restarts: 101\n", "max_driver_restarts: must be an integer in 0..100"),
        ("seed: 9223372036854775808\n", "seed: must be an integer in 0..9223372036854775807"),
        ("timeout_s: 8d\n", "timeout_s: expected a duration like 30, 30s, 2m or 1h30m"),
        ("timeout_s: 700000\n", "timeout_s: must be at most 168h (604800 s)"),
        ("faults:\n  - {kind: fail-changelog-upload, for_s: 2h}\n", "faults[0].for_s: must be at most 1h (3600 s)"),
        ("faults:\n  - {kind: fail-changelog-upload, at: {batch: 100001}}\n", "faults[0].at.batch: must be an integer in 0..100000"),
        ("schedule: {random: {count: 1001, kinds: [fail-changelog-upload]}}\n", "schedule.random.count: must be an integer in 1..1000"),
        (
            "schedule: {random: {count: 2, kinds: [fail-changelog-upload], batches: [1, 100001]}}\n",
            "schedule.random.batches: must be 0 <= first <= last <= 100000",
        ),
        (
            "schedule: {random: {count: 2, kinds: [fail-changelog-upload], for_s: [1, 2h]}}\n",
            "schedule.random.for_s[1]: must be at most 1h",
        ),
        ("schedule: {random: {count: 2, kinds: [fail-changelog-upload], after_s: soon}}\n", "schedule.random.after_s: expected a duration"),
    ],
)
def test_sizes_and_durations_are_bounded_with_the_limit_in_the_error(tmp_path: Path, text: str, field: str) -> None:
    assert field in _error(tmp_path, text)


def test_more_faults_than_the_limit_are_refused(tmp_path: Path) -> None:
    text = "faults:\n" + "".join(f"  - {{kind: fail-changelog-upload, id: x{i}}}\n" for i in range(990))
    text += "schedule: {random: {count: 11, kinds: [fail-changelog-upload]}}\n"
    assert "faults: 990 explicit + 11 drawn faults: at most 1000" in _error(tmp_path, text)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ("{ms: abc}", "faults[0].params.ms: must be an integer in 0..3600000 (milliseconds), got 'abc'"),
        ("{partition: x}", "faults[0].params.partition: must be an integer in 0..1023, got 'x'"),
        ("{ms: 1.5}", "faults[0].params.ms: must be an integer"),
        ("{wait_s: later}", "faults[0].params.wait_s: expected a duration"),
        ("{toxicity: 2}", "faults[0].params.toxicity: must be a number in 0..1"),
        ("{when: [a]}", "faults[0].params.when: must be a string, number or boolean"),
        ("{stream: sideways}", "faults[0].params.stream: must be one of upstream, downstream, both, got 'sideways'"),
    ],
)
def test_params_of_the_wrong_type_are_usage_errors(tmp_path: Path, params: str, field: str) -> None:
    assert field in _error(tmp_path, f"cluster: standalone\nfaults:\n  - {{kind: slow-attempt, params: {params}}}\n")


def test_a_number_given_as_a_string_is_refused_before_a_fault_converts_it(tmp_path: Path) -> None:
    """`slow-attempt` would turn `ms: '12'` into 12 itself, `ms: abc` into a crash: the file says what a param is."""
    text = "cluster: standalone\nfaults:\n  - {kind: slow-attempt, params: {ms: '12'}}\n"
    assert "faults[0].params.ms: must be an integer" in _error(tmp_path, text)


@pytest.mark.parametrize(
    ("value", "seconds"), [("30", 30.0), ("30s", 30.0), ("2m", 120.0), ("1h", 3600.0), ("1m30s", 90.0), ("0h2m3s", 123.0), ("2.5", 2.5)]
)
def test_durations_accept_locust_timespans(value: str, seconds: float) -> None:
    doc = {
        "cluster": "standalone",
        "timeout_s": value,
        "faults": [{"kind": "pause-executor", "for_s": value, "at": {"after_s": value}, "params": {"wait_s": value}}],
        "schedule": {"random": {"count": 1, "kinds": ["pause-executor"], "after_s": value, "for_s": [value, value]}},
    }
    exp = parse_experiment(doc)
    f = exp.faults[0]
    assert exp.timeout_s == f.for_s == f.at.after_s == f.params["wait_s"] == seconds
    assert exp.schedule is not None and exp.schedule.after_s == seconds and exp.schedule.for_s == (seconds, seconds)
    assert parse_experiment(yaml.safe_load(exp.to_yaml())) == exp  # the realised file replays
    assert parse_experiment({"timeout_s": "1h30m"}).timeout_s == 5400.0


def test_an_experiment_file_over_1_mib_is_refused_before_parsing(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    f.write_text("name: big\n# " + "x" * (1 << 20) + "\n")
    with pytest.raises(UsageError, match=r"big.yaml: is larger than the 1048576 bytes allowed"):
        load_experiment(f)
