"""corrupt-snapshot on Spark's own store (issue 40): damage the snapshot the next load reads.

Without Spark: the damage is one a zip reader notices (flip: the first entry's CRC; truncate: no
central directory), the target is the snapshot the latest committed version's plan reads, and
the params and formats are checked. On real Spark 4.3 (slow, local[2]): the example experiments,
with Spark's auto snapshot repair off (the positive control: the query fails on the damaged zip
and the lineage check names it) and on (Spark routes around it, the run is valid, and the note
and the proof name the repair)."""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from damage_runs import damage_proof, run_example

from statebed_base.errors import UsageError
from statebed_chaos.faults import FaultSpec, NotApplicable, Trigger, fault_class
from statebed_chaos.faults.corrupt_snapshot import damaged, target_snapshot
from statebed_model.experimentdir import ExperimentDir
from statebed_store import open_storage
from statebed_store.formats import FORMATS, get_format
from statebed_verify import verify_run


def fault(**params: Any) -> Any:
    return fault_class("corrupt-snapshot")(FaultSpec("c", "corrupt-snapshot", Trigger(3, 0.0, True), None, params))


def _zip(entries: dict[str, bytes], method: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=method) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_flip_breaks_the_first_entry_and_a_truncation_the_whole_zip(method: int) -> None:
    data = _zip({"metadata": b'{"sstFiles": []}' * 20, "CURRENT": b"MANIFEST-000005\n"}, method)
    flipped = damaged(data, "flip")
    assert len(flipped) == len(data) and sum(a != b for a, b in zip(data, flipped, strict=True)) == 1
    with zipfile.ZipFile(io.BytesIO(flipped)) as z:  # the directory still reads: only the entry's data is wrong
        with pytest.raises((zipfile.BadZipFile, Exception)):
            z.read("metadata")
        assert z.read("CURRENT") == b"MANIFEST-000005\n"
    with pytest.raises(zipfile.BadZipFile):
        zipfile.ZipFile(io.BytesIO(damaged(data, "truncate")))


def test_the_target_is_the_snapshot_the_latest_committed_version_loads(native: dict[str, Path], tmp_path: Path) -> None:
    ckpt = shutil.copytree(native["4.3.0"] / "agg", tmp_path / "agg")
    storage = open_storage(ckpt)
    path = target_snapshot(storage, 1)
    assert path.startswith("state/0/1/") and path.endswith(".zip")
    assert path.split("/")[-1].split("_")[0] == "10"  # the fixture's last commit names version 10, which has its zip


def test_params_and_formats_are_checked() -> None:
    with pytest.raises(UsageError, match="damage must be one of flip, truncate"):
        fault(damage="shred")
    with pytest.raises(UsageError, match="restart must be true or false"):
        fault(restart="yes")
    assert fault().restarts_driver is True and fault(restart=False).restarts_driver is False
    plugin = {n for n in FORMATS if n.startswith("native-")}
    for name in FORMATS:
        if name in plugin:
            fault().check(get_format(name), "local", "local")
            fault().check(get_format(name), "local", "s3")
        else:
            with pytest.raises(NotApplicable, match="corrupt-snapshot does not apply"):
                fault().check(get_format(name), "local", "local")


@pytest.mark.slow
def test_with_the_repair_off_the_query_fails_and_the_lineage_check_names_the_damaged_zip(tmp_path: Path) -> None:
    res = run_example(tmp_path, "corrupt-snapshot-count-native-v2")
    proof = damage_proof(res)
    assert proof["spark"]["outcome"] == "query-failed", proof["spark"]
    assert any("CANNOT_LOAD_STATE_STORE" in e for e in proof["spark"]["task_errors"])
    assert res.valid is False
    damaged_file = proof["damaged"]["shown"]
    assert any(a["kind"] == "unreadable-file" and damaged_file in a["files"] for a in res.anomalies), res.anomalies


@pytest.mark.slow
def test_with_the_repair_on_spark_routes_around_the_damaged_zip_and_the_run_is_valid(tmp_path: Path) -> None:
    res = run_example(tmp_path, "corrupt-snapshot-count-native-v2-repair")
    proof = damage_proof(res)
    assert proof["spark"]["outcome"] == "repaired", proof["spark"]
    assert "Failed to load snapshot version" in proof["spark"]["log"][0]
    assert res.valid is True, (res.reasons, res.anomalies)
    lineage = verify_run(ExperimentDir(Path(res.run_dir)).faulted).reports["lineage"]
    assert any(proof["damaged"]["shown"] in n and "auto snapshot repair" in n for n in lineage.notes), lineage.notes
