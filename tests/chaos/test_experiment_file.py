"""Experiment files: every mistake is one line naming the file and the field; schedules replay."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from statebed_chaos.experiment import Experiment, load_experiment, parse_experiment
from statebed_chaos.schedule import realise
from statebed_store.errors import UsageError

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
        ("batches: three\n", "batches: must be an integer >= 1"),
        ("batches: true\n", "batches: must be an integer >= 1"),
        ("format: v3\n", "format: must be one of v1, v2, native"),
        ("workload: bucket-collect\nformat: native\n", "workload: native runs support count only"),
        ("faults: {kind: x}\n", "faults: must be a list"),
        ("faults:\n  - kind: nope\n", "faults[0]: kind: unknown fault kind 'nope'"),
        ("faults:\n  - {kind: fail-changelog-upload, when: 3}\n", "faults[0].when: unknown key"),
        ("faults:\n  - {kind: fail-changelog-upload, at: {batch: -1}}\n", "faults[0].at.batch: must be an integer >= 0"),
        ("faults:\n  - kind: kill-executor\n", "faults[0]: kill-executor needs cluster: standalone"),
        ("faults:\n  - kind: fail-changelog-upload\n  - kind: fail-changelog-upload\n    id: f1\n", "faults: duplicate fault id 'f1'"),
        ("schedule: {random: {count: 2, kinds: [kill-executor]}}\n", "schedule.random.kinds: kill-executor needs cluster: standalone"),
        (
            "schedule: {random: {count: 2, kinds: [fail-changelog-upload], batches: [3, 1]}}\n",
            "schedule.random.batches: must be 0 <= first",
        ),
        ("verifiers: [lineage, vibes]\n", "verifiers: unknown verifier 'vibes'"),
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
    assert (exp.workload, exp.format, exp.storage, exp.cluster, exp.seed) == ("count", "v2", "local", "local", None)
    assert exp.faults[0].id == "f1" and exp.faults[0].at.batch == 2 and exp.faults[0].params == {"partition": 1}
    again = parse_experiment(yaml.safe_load(exp.to_yaml()))
    assert again == exp


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
