"""The baselines cache (`statebed_chaos.baseline_cache`): one baseline per key, across processes
when a directory is given; a cached run is read again on use and a bad entry is a miss."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from job_helpers import InProcessJob

from statebed_base.errors import UsageError
from statebed_chaos.baseline import Baseline, state_view
from statebed_chaos.baseline_cache import ENTRY, Baselines
from statebed_cli.backend import baselines_cache
from statebed_job.config import JobOptions
from statebed_model.rundir import RunDir

KEY = ("count", "v2", "local", "local", 2, 2, 3, 100, 20, 10, (), 1)


pytestmark = pytest.mark.usefixtures("providers_closed")  # conftest.py: drained and closed after each test


def finished_run(root: Path) -> Baseline:
    job = InProcessJob(root, JobOptions(workload="count", batches=3, rows_per_batch=100, keyspace=20))
    for b in range(3):
        assert job.batch(b).status == "committed"
    return Baseline(str(root), state_view(RunDir(root)), {"state": {"valid": True}})


def test_a_durable_baseline_is_found_by_another_process_and_read_again(tmp_path: Path) -> None:
    base = finished_run(tmp_path / "run")
    Baselines(tmp_path / "cache").put(KEY, base, durable=True)
    found = Baselines(tmp_path / "cache").get(KEY)  # a fresh cache: what another process sees
    assert found is not None and found.view == base.view and found.verdicts == base.verdicts
    assert Path(found.run_dir).is_relative_to(tmp_path / "cache") and found.run_dir != base.run_dir
    assert Baselines(tmp_path / "cache").get((*KEY[:-1], 2)) is None  # another seed is another key


def test_memory_only_without_a_directory_or_when_not_durable(tmp_path: Path) -> None:
    base = Baseline(str(tmp_path / "nowhere"), {1: (1, 1)}, {})
    memory = Baselines()
    memory.put(KEY, base, durable=True)
    assert memory.get(KEY) is base and memory.run_dirs() == [base.run_dir]
    on_disk = Baselines(tmp_path / "cache")
    on_disk.put(KEY, base, durable=False)  # an S3 baseline: its checkpoint dies with its server
    assert on_disk.get(KEY) is base and Baselines(tmp_path / "cache").get(KEY) is None
    failed = Baselines()
    failed.put(KEY, Baseline(str(tmp_path), None, {}, error="the baseline run exited 4"), durable=True)
    assert failed.get(KEY) is None  # a failed baseline is never reused


def test_an_entry_that_no_longer_reads_or_names_another_key_is_a_miss(tmp_path: Path) -> None:
    base = finished_run(tmp_path / "run")
    Baselines(tmp_path / "cache").put(KEY, base, durable=True)
    (entry,) = (tmp_path / "cache").iterdir()
    doc = json.loads((entry / ENTRY).read_text())
    (entry / ENTRY).write_text(json.dumps({**doc, "key": repr(("other",))}))
    assert Baselines(tmp_path / "cache").get(KEY) is None
    (entry / ENTRY).write_text(json.dumps(doc))
    assert Baselines(tmp_path / "cache").get(KEY) is not None
    (entry / "run" / "run.json").write_text("{half")
    assert Baselines(tmp_path / "cache").get(KEY) is None


def test_the_flag_refuses_a_path_that_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match=r"--baselines .*file: exists and is not a directory"):
        baselines_cache(argparse.Namespace(baselines=tmp_path / "file"))
    made = baselines_cache(argparse.Namespace(baselines=tmp_path / "new" / "dir"))
    assert made.directory == (tmp_path / "new" / "dir").absolute() and made.directory.is_dir()
    assert baselines_cache(argparse.Namespace(baselines=None)).directory is None
