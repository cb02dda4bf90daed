"""Upkeep on real Spark 4.3: maintenance inside `statebed run`, `statebed cleanup --delete-orphans`
on Spark's own checkpoint followed by a restart, and the cleanup-race fault on V2, statebed's and
Spark's own (native-v2: Spark's maintenance, its deletes recorded by the JVM plug-in)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import tree_hash

sys.path.insert(0, str(Path(__file__).parents[1] / "job"))
from spark_runs import statebed, summary

from statebed_chaos.experiment import load_experiment, parse_experiment
from statebed_chaos.experiment_runner import run_experiment
from statebed_model.rundir import RunDir
from statebed_store import open_storage
from statebed_store.naming import parse_state_file
from statebed_store.rebuild import rebuildability

pytestmark = pytest.mark.slow

SMALL = ["--rows-per-batch", "2000", "--keyspace", "200", "--snapshot-interval", "2"]


def ok_json(*args: str) -> Any:
    proc = statebed(*args, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def dump(ckpt: Path, batch: int) -> list[str]:
    proc = statebed("dump", str(ckpt), "--batch", str(batch))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


def test_statebed_run_keeps_the_retained_range_and_records_each_pass(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = statebed("run", "--run-dir", str(run_dir), "--batches", "8", "--retain", "2", "--maintenance-interval", "0", *SMALL, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc)
    assert all(v["valid"] is True for v in s["verdicts"].values()), s["verdicts"]
    rows = RunDir(run_dir).maintenance()
    assert rows and all(r["error"] is None for r in rows)
    assert sum(r["files_deleted"] for r in rows) > 0 and sum(r["bytes_deleted"] for r in rows) > 0
    assert {r["store"] for r in rows} == {"state/0/0", "state/0/1", "state/0/2", "commits"} and max(r["latest_batch"] for r in rows) >= 6
    trimmed = max(r["trimmed_below"] for r in rows if r["store"] == "commits")  # the log keeps the retained window, as Spark's
    assert s["batches"] == 8 and 0 < trimmed <= 6
    final = [r for r in rows if r["final"]]  # 8 batches > retain 2: the clean stop's final pass, the log's last rows
    assert final and rows[-len(final) :] == final and all(r["latest_batch"] == 7 and r["error"] is None for r in final)
    doc = rebuildability(open_storage(run_dir / "checkpoint"))
    low = doc["rebuildable"][0][0]
    assert (
        doc["committed"] == [[trimmed, 7]] and doc["rebuildable"] == [[low, 7]] and trimmed <= low <= 6
    )  # history below retention is gone


@pytest.mark.e2e
def test_a_clean_stop_leaves_what_the_retention_promises(tmp_path: Path) -> None:
    """Issue 35 #6: 14 batches, snapshots every 10 versions, retain 3. The passes during the run
    come too early for the snapshot of version 10; the final pass of a clean stop (after the last
    batch's tasks waited for their snapshot uploads) leaves versions 10..14 only: the snapshot the
    retained batches 11..13 load from, and the changelogs after it."""
    run_dir = tmp_path / "run"
    args = ["--batches", "14", "--retain", "3", "--maintenance-interval", "1", "--snapshot-interval", "10"]
    proc = statebed("run", "--run-dir", str(run_dir), *args, "--rows-per-batch", "500", "--keyspace", "100", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all(v["valid"] is True for v in summary(proc)["verdicts"].values())
    stores = sorted((run_dir / "checkpoint" / "state" / "0").iterdir())
    assert stores
    for store in stores:
        names = [parse_state_file(f.name) for f in store.iterdir()]
        assert sorted({n.version for n in names if n is not None}) == [10, 11, 12, 13, 14], (store, sorted(f.name for f in store.iterdir()))
    rows = RunDir(run_dir).maintenance()
    final = [r for r in rows if r["final"]]
    assert {r["store"] for r in final} >= {f"state/0/{s.name}" for s in stores} and all(r["error"] is None for r in final)
    assert all(r["latest_batch"] == 13 for r in final) and rows[-len(final) :] == final  # the last rows, at the last batch


@pytest.mark.e2e
def test_spark_checkpoint_orphans_swept_then_spark_restarts_on_it(tmp_path: Path) -> None:
    """A rewound and reprocessed native run leaves the abandoned timeline's files (new ids on the
    rerun): orphans no commit's plan reaches. The sweep deletes exactly those; Spark restarts on
    the swept checkpoint and its state stays equal to the oracle."""
    run_dir = tmp_path / "run"
    ckpt = run_dir / "spark-checkpoint"
    base = ["--run-dir", str(run_dir), "--workload", "count", "--native", *SMALL[:4]]
    proc = statebed("run", *base, "--batches", "5", "--no-verify")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert statebed("rewind", str(run_dir), "--to-batch", "1").returncode == 0
    proc = statebed("run", *base, "--batches", "5", "--resume", "--no-verify")
    assert proc.returncode == 0, proc.stderr[-3000:]
    before = dump(ckpt, 4)

    digest = tree_hash(ckpt)
    dry = ok_json("cleanup", str(run_dir), "--dry-run")
    assert tree_hash(ckpt) == digest and dry["layout"] == "spark"
    orphans = [d for st in dry["stores"] for d in st["deleted"] if d["reason"].startswith("orphan of attempt")]
    assert orphans and dry["bytes"] >= sum(d["bytes"] for d in orphans) > 0
    refused = statebed("cleanup", str(run_dir))
    assert refused.returncode == 2 and "--delete-orphans" in refused.stderr
    done = ok_json("cleanup", str(run_dir), "--delete-orphans")
    assert done["files"] == dry["files"] and not any(Path(d["path"]).exists() for st in done["stores"] for d in st["deleted"])
    assert dump(ckpt, 4) == before

    proc = statebed("run", *base, "--batches", "7", "--resume", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = summary(proc)
    assert s["verdicts"]["state"]["valid"] is True and s["verdicts"]["lineage"]["valid"] is True


def test_cleanup_race_fires_and_v2_stays_valid(tmp_path: Path) -> None:
    exp = parse_experiment(
        {
            "name": "cleanup-race",
            "workload": "count",
            "format": "v2",
            "cluster": "local",
            "partitions": 2,
            "batches": 6,
            "rows_per_batch": 2000,
            "keyspace": 200,
            "snapshot_interval": 2,
            "seed": 11,
            "faults": [
                {"kind": "cleanup-race", "at": {"batch": 1}, "params": {"retain": 2}},
                {"kind": "slow-attempt", "at": {"batch": 4}, "params": {"partition": 0, "ms": 3000, "when": "before"}},
                {"kind": "slow-attempt", "at": {"batch": 5}, "params": {"partition": 1, "ms": 3000, "when": "before"}},
            ],
        }
    )
    res = run_experiment(exp, out_dir=tmp_path / "out", progress=False)
    race = res.faults[0]
    assert race["fired"] is True, race
    assert race["proof"][0]["pass"]["files_deleted"] > 0
    assert (res.valid, res.exit_code) == (True, 0), (res.reasons, res.anomalies)
    runs = [p.parent for p in (tmp_path / "out").rglob("run.json")]
    faulted = [r for r in runs if (r / "faults").is_dir()]
    assert len(faulted) == 1
    doc = rebuildability(open_storage(faulted[0] / "checkpoint"))
    low = doc["rebuildable"][0][0]
    assert doc["rebuildable"] == [[low, 5]] and 0 < low <= 4  # the retained range (batches 4, 5) and no more history


@pytest.mark.e2e
def test_cleanup_race_on_sparks_store_fires_and_native_v2_stays_valid(tmp_path: Path) -> None:
    exp = load_experiment(Path(__file__).parents[2] / "examples" / "experiments" / "cleanup-race-count-native-v2.yaml")
    res = run_experiment(exp, out_dir=tmp_path / "out", progress=False)
    race, *holds = res.faults
    assert all(h["fired"] is True for h in holds), holds
    assert race["fired"] is True, race
    delete = race["proof"][0]["delete"]
    assert delete["failpoint"] == "native.cleanup.delete" and "/spark-checkpoint/state/" in delete["file"], delete
    assert (res.valid, res.exit_code) == (True, 0), (res.reasons, res.anomalies)
    faulted = tmp_path / "out" / "faulted"
    entries = sorted(int(p.name) for p in (faulted / "spark-checkpoint" / "commits").iterdir() if p.name.isdigit())
    assert entries[-1] == 5 and 0 < entries[0] <= 3, entries  # Spark purged its log below its window (asynchronously)
    state = ok_json("verify", "state", str(faulted))
    purged = f"batches 0..{entries[0] - 1}: committed, their entries purged"
    assert state["checked"]["batches"] == 6 and any(n.startswith(purged) for n in state["notes"]), state  # still judged
    (low, high), *rest = ok_json("ls", str(faulted / "spark-checkpoint"), "--rebuildable")["rebuildable"]
    assert not rest and high == 5 and 0 < low <= 4  # minBatchesToRetain = 2: the retained range loads, the oldest history is gone
