"""Every StoreOptions / JobOptions field is validated with a message naming it; lineages always fit writeUTF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import state_at

from statebed_base.errors import FieldError, UsageError
from statebed_job.config import JobOptions
from statebed_store import CheckpointRef, SnapshotUploader, StateStoreProvider, Storage, StoreId, StoreOptions
from statebed_store.changelog import parse_changelog
from statebed_store.config import MAX_SNAPSHOT_INTERVAL
from statebed_store.lineage import lineage_to_json
from statebed_store.naming import CHANGELOG, StateFileName

BAD_STORE_OPTIONS: list[tuple[str, Any, str]] = [
    ("format", "v3", "one of v1, v2"),
    ("snapshot_interval", 0, "1..546"),
    ("snapshot_interval", 5000, "1..546"),
    ("snapshot_interval", 2.5, "an integer"),
    ("snapshot_interval", True, "an integer"),
    ("retain_versions", 0, "1..1000000000"),
    ("retain_versions", "100", "an integer"),
    ("checksums", "yes", "True or False"),
    ("snapshot_upload_attempts", 0, "1..100"),
    ("snapshot_upload_backoff_s", -1, "0..60 seconds"),
    ("snapshot_upload_backoff_s", float("nan"), "a number of seconds"),
    ("sst_orphan_grace_s", "600", "a number of seconds"),
    ("lock_timeout_s", -0.5, "0..86400 seconds"),
    ("lz4_block_size", 10, "1024..33554432"),
    ("local_dir", "", "a directory path"),
    ("local_dir", 7, "a directory path"),
]


@pytest.mark.parametrize(("field", "value", "says"), BAD_STORE_OPTIONS)
def test_bad_store_option_is_named(field: str, value: Any, says: str) -> None:
    with pytest.raises(UsageError, match=rf"^StoreOptions\.{field} must be .*") as e:
        StoreOptions(**{field: value})
    assert says in str(e.value)


def test_defaults_and_bounds_are_accepted(tmp_path: Path) -> None:
    StoreOptions()
    StoreOptions(snapshot_interval=MAX_SNAPSHOT_INTERVAL, snapshot_upload_backoff_s=0, local_dir=str(tmp_path))


def test_max_snapshot_interval_fits_write_utf_at_the_longest_names() -> None:
    longest = CheckpointRef(int("9" * 19), "f" * 64)  # a 19-digit version and a 64-character id: the most naming allows
    assert len(lineage_to_json([longest] * MAX_SNAPSHOT_INTERVAL)) <= 65535
    assert len(lineage_to_json([longest] * (MAX_SNAPSHOT_INTERVAL + 1))) > 65535


def test_the_writer_caps_the_lineage_when_snapshots_never_happen(local_storage: Storage, tmp_path: Path) -> None:
    """Hostile-input item 13's failure mode: commits that never snapshot must not grow the lineage past the cap."""
    opts = StoreOptions(snapshot_interval=3, local_dir=tmp_path / "local")
    store = StoreId(0, 0)
    with StateStoreProvider(local_storage, store, opts, uploader=SnapshotUploader()) as p:
        ref = CheckpointRef(0)
        for v in range(1, 11):
            with p.load(ref.version, ref.id) as txn:
                txn.put(b"k%d" % v, b"%d" % v)
                res = txn.commit(snapshot=False)
            ref = CheckpointRef(res.version, res.checkpoint_id)
        assert len(p.lineage) == 3
    name = StateFileName(10, ref.id, CHANGELOG).name
    cl = parse_changelog(local_storage.read(store.path(name)), file=name, version=10)
    assert cl.lineage is not None and [r.version for r in cl.lineage] == [7, 8, 9]
    fresh = StateStoreProvider(local_storage, store, opts.with_(local_dir=tmp_path / "reader"), uploader=SnapshotUploader())
    with fresh:  # a loader traces past the capped lineage through the older changelogs
        assert state_at(fresh, ref) == {b"k%d" % v: b"%d" % v for v in range(1, 11)}


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"batches": 0}, "batches", "must be an integer >= 1"),
        ({"partitions": "3"}, "partitions", "must be an integer >= 1"),
        ({"snapshot_interval": 5000}, "snapshot_interval", "must be <= 546"),
        ({"workers": 21}, "workers", "must be 1..20"),
        ({"workload": ""}, "workload", "must be a non-empty string"),
        ({"extra_conf": {"k": 1}}, "extra_conf", "must be KEY=VALUE strings"),
        ({"slow_task": "1:2"}, "slow_task", "wants BATCH:PARTITION:MILLISECONDS"),
        ({"slow_task": "1:-2:5"}, "slow_task", "wants BATCH:PARTITION:MILLISECONDS"),
        ({"format": "v9"}, "format", "must be a format statebed knows \\(v1, v2, native, native-v1, native-v2\\)"),
    ],
)
def test_bad_job_option_is_named(changes: dict[str, Any], field: str, says: str) -> None:
    """Validation names the field as JobOptions spells it; the CLI maps it to its flag (see test_cli_names_a_bad_option_by_its_flag)."""
    with pytest.raises(FieldError, match=f"^{field} {says}") as e:
        JobOptions(**changes)
    assert e.value.field == field
