"""`statebed cleanup` on statebed checkpoints (local and S3) and on Spark's own checkpoints
(the 4.1 / 4.3 fixtures: aggregation, two operators, a join), without starting Spark."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import run_cli, tree_hash
from conftest import s3_settings
from job_helpers import InProcessJob
from native_fixtures import QUERIES, SPARK_VERSIONS
from test_maintenance import racing

from statebed_job.config import JobOptions
from statebed_model.rundir import RunDir, RunInfo
from statebed_store import StoreFiles, open_storage
from statebed_store.checkpoint_lock import lock_checkpoint
from statebed_store.inspection import discover_stores
from statebed_store.naming import SST_DIR
from statebed_store.rebuild import rebuildability
from statebed_verify.lineage import verify_lineage

STATEBED = str(Path(sys.executable).with_name("statebed"))


pytestmark = pytest.mark.usefixtures("providers_closed")  # conftest.py: drained and closed after each test


def history(root: Path | str, batches: int = 10, **kw: Any) -> InProcessJob:
    opts = JobOptions(workload="count", batches=batches, partitions=2, rows_per_batch=300, keyspace=50, snapshot_interval=4, seed=5)
    job = InProcessJob(root, opts, **kw)
    for b in range(batches):
        job.batch(b, schedule=racing(job))  # type: ignore[arg-type]
    return job


def cli_json(capsys: Any, *argv: str) -> Any:
    code, out, err = run_cli(capsys, "cleanup", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def reasons(doc: dict[str, Any]) -> dict[str, str]:
    return {d["path"]: d["reason"] for s in doc["stores"] for d in s["deleted"]}


def test_dry_run_says_what_and_why_then_cleanup_deletes_exactly_that(tmp_path: Path, capsys: Any) -> None:
    job = history(tmp_path / "run")
    ckpt = job.run.root / "checkpoint"
    digest = tree_hash(ckpt)
    dry = cli_json(capsys, str(job.run.root), "--retain", "3", "--sst-grace", "0", "--dry-run")
    assert tree_hash(ckpt) == digest  # a dry run changes nothing
    why = reasons(dry)
    kinds = {r.split(" (")[0].split(" of ")[0] if not r.startswith("orphan of attempt") else "orphan of attempt" for r in why.values()}
    assert {"superseded version", "orphan of attempt", "sidecar"} <= kinds, why
    assert (
        dry["retainedBatches"] == [7, 9]
        and dry["files"] == len(why)
        and dry["bytes"] == sum(d["bytes"] for s in dry["stores"] for d in s["deleted"])
    )
    assert all(Path(p).exists() for p in why)

    done = cli_json(capsys, str(job.run.root), "--retain", "3", "--sst-grace", "0")
    assert reasons(done) == why and not any(Path(p).exists() for p in why)
    doc = rebuildability(open_storage(ckpt))
    assert doc["rebuildable"][0][1] == 9 and doc["rebuildable"][0][0] <= 7
    assert verify_lineage(open_storage(ckpt)).valid
    assert cli_json(capsys, str(ckpt), "--retain", "3", "--sst-grace", "0")["files"] == 0  # a second pass finds nothing


def test_a_held_lock_refuses_a_cleanup_naming_the_holder(tmp_path: Path, capsys: Any) -> None:
    job = history(tmp_path / "run", batches=3)
    with lock_checkpoint(job.run.root, "rewind --to-batch 1"):
        code, _, err = run_cli(capsys, "cleanup", str(job.run.root), "--retain", "1")
    assert code == 2 and "rewind --to-batch 1" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "cleanup", str(tmp_path / "nowhere"))
    assert code == 2 and "nowhere" in err and len(err.strip().splitlines()) == 1


def test_interrupted_cleanup_leaves_every_retained_batch_loadable_and_the_next_one_finishes(tmp_path: Path) -> None:
    job = history(tmp_path / "run")
    ckpt = job.run.root / "checkpoint"
    env = {**os.environ, "STATEBED_FAILPOINTS": "cleanup.delete.between=3*off->exit(9)"}
    argv = [STATEBED, "cleanup", str(job.run.root), "--retain", "3", "--sst-grace", "0", "--delete-batch", "1", "--json"]
    planned = json.loads(subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, check=True).stdout)["files"]
    killed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert killed.returncode == 9, killed.stderr  # killed between the 4th and 5th delete
    left = json.loads(subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, check=True).stdout)["files"]
    assert left == planned - 4
    storage = open_storage(ckpt)
    doc = rebuildability(storage)
    assert doc["rebuildable"][0][1] == 9 and doc["rebuildable"][0][0] <= 7
    assert verify_lineage(storage).valid
    finished = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0 and "took over the lock" in finished.stderr
    assert json.loads(finished.stdout)["files"] == left
    assert json.loads(subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, check=True).stdout)["files"] == 0


@pytest.mark.s3
def test_cleanup_and_maintenance_on_s3(tmp_path: Path, capsys: Any, s3_server: Any) -> None:
    from statebed_job.maintenance import Maintenance

    url = f"s3://statebed-test/upkeep-{time.time_ns()}"
    job = history(url, s3=s3_settings(s3_server), local=tmp_path / "local")
    m = Maintenance(job.storage, retain=4, interval_s=0, sst_grace_s=0)
    m.committed(9)
    records = m.run_pass()
    assert records and all(r.error is None and r.files_deleted > 0 for r in records)
    env = {"STATEBED_S3_ENDPOINT": s3_server.endpoint, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}
    settings = s3_settings(s3_server)
    args = ["--s3-endpoint", settings.endpoint, "--s3-access-key", settings.access_key, "--s3-secret-key", settings.secret_key]
    assert env
    dry = cli_json(capsys, url, "--retain", "2", "--sst-grace", "0", "--dry-run", *args)
    assert dry["layout"] == "run-dir" and dry["files"] > 0
    done = cli_json(capsys, url, "--retain", "2", "--sst-grace", "0", *args)
    assert reasons(done) == reasons(dry)
    doc = rebuildability(job.storage)
    assert doc["rebuildable"][0][1] == 9 and doc["rebuildable"][0][0] <= 8
    assert verify_lineage(job.storage).valid


# -- Spark's own checkpoints (fixtures written by Spark 4.1.4 and 4.3.0) -------------------


def dump(ckpt: Path, capsys: Any) -> str:
    code, out, err = run_cli(capsys, "dump", str(ckpt))
    assert code == 0, err
    return out


def plant_orphans(ckpt: Path) -> set[str]:
    """A losing attempt's changelog (a copy under a fresh id at the latest version) and an old unreferenced SST."""
    storage = open_storage(ckpt)
    store = discover_stores(storage)[0]
    files = StoreFiles(storage, store)
    name = max(files.files, key=lambda n: n.version)
    src = ckpt / store.path(name.name)
    orphan = src.with_name(f"{name.version}_{'0' * 8}-dead-beef-0000-{'0' * 12}.changelog")
    shutil.copyfile(src, orphan)
    sst = ckpt / store.dir / SST_DIR / "000999-deadbeef-0000-0000-0000-000000000000.sst"
    sst.parent.mkdir(exist_ok=True)
    sst.write_bytes(b"not referenced by any snapshot")
    os.utime(sst, (time.time() - 3600, time.time() - 3600))
    return {str(orphan), str(sst)}


@pytest.mark.parametrize("version", SPARK_VERSIONS)
@pytest.mark.parametrize("query", QUERIES)
def test_spark_checkpoint_orphans_are_reported_and_deleted_only_when_asked(
    native: dict[str, Path], tmp_path: Path, capsys: Any, version: str, query: str
) -> None:
    ckpt = tmp_path / query
    shutil.copytree(native[version] / query, ckpt)
    before_state = dump(ckpt, capsys)
    before_rebuild = rebuildability(open_storage(ckpt))["rebuildable"]
    clean = cli_json(capsys, str(ckpt), "--dry-run")
    assert clean["layout"] == "spark"
    planted = plant_orphans(ckpt)
    digest = tree_hash(ckpt)
    dry = cli_json(capsys, str(ckpt), "--dry-run")
    assert tree_hash(ckpt) == digest
    found = reasons(dry)
    assert planted <= set(found) and set(found) - planted == set(reasons(clean))
    assert found[min(p for p in planted if p.endswith(".changelog"))].startswith("orphan of attempt")
    assert dry["bytes"] >= sum(os.path.getsize(p) for p in planted)
    code, _, err = run_cli(capsys, "cleanup", str(ckpt))
    assert code == 2 and "--delete-orphans" in err
    done = cli_json(capsys, str(ckpt), "--delete-orphans")
    assert reasons(done) == found and not any(Path(p).exists() for p in planted)
    assert rebuildability(open_storage(ckpt))["rebuildable"] == before_rebuild
    assert dump(ckpt, capsys) == before_state


@pytest.mark.parametrize("format", ["native", "native-v1", "native-v2"])
def test_a_native_run_directory_is_sparks_checkpoint_never_cleaned_as_statebeds(
    native: dict[str, Path], tmp_path: Path, capsys: Any, format: str
) -> None:
    """Every native format's run keeps Spark's checkpoint, which Spark's maintenance owns: a plain
    cleanup of the run directory is refused and deletes nothing (native-v1 / native-v2 were once
    cleaned with statebed's rules)."""
    run = RunDir(tmp_path / "run")
    run.create(RunInfo(workload="count", format=format, partitions=3, checkpoint="spark-checkpoint"))
    shutil.copytree(native["4.3.0"] / "agg", run.spark_checkpoint)
    digest = tree_hash(run.spark_checkpoint)
    code, _, err = run_cli(capsys, "cleanup", str(run.root), "--retain", "1", "--sst-grace", "0")
    assert code == 2 and "is a Spark checkpoint" in err and "--delete-orphans" in err, err
    assert tree_hash(run.spark_checkpoint) == digest
    assert cli_json(capsys, str(run.root), "--dry-run")["layout"] == "spark"
