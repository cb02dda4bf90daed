"""Failpoints: grammar, actions, seeded probabilities, arming from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkpoint_helpers import commit, state_at

from statebed_base.errors import InjectedFault, UsageError
from statebed_store import (
    CheckpointRef,
    SnapshotUploader,
    StateStoreProvider,
    Storage,
    StoreFiles,
    StoreId,
    StoreOptions,
    failpoints,
)
from statebed_store.naming import CHANGELOG


def fire_pattern(spec: str, n: int, seed: int = 0) -> list[str]:
    failpoints.configure(f"changelog.upload.after={spec}", seed)
    out = []
    for _ in range(n):
        try:
            out.append("drop" if failpoints.hit("changelog.upload.after") else "-")
        except InjectedFault:
            out.append("error")
    return out


def test_off_by_default_and_unarmed_points_do_nothing() -> None:
    assert failpoints.stats() == {}
    assert failpoints.hit("snapshot.upload.before") is False


def test_count_and_chain() -> None:
    assert fire_pattern("2*drop->error", 4) == ["drop", "drop", "error", "error"]
    assert fire_pattern("1*error->off", 3) == ["error", "-", "-"]


def test_probability_is_seeded_and_reproducible() -> None:
    a = fire_pattern("30%drop", 200, seed=7)
    b = fire_pattern("30%drop", 200, seed=7)
    c = fire_pattern("30%drop", 200, seed=8)
    assert a == b and a != c
    assert 30 <= a.count("drop") <= 90  # ~60 expected


def test_delay_sleeps_then_continues() -> None:
    failpoints.arm("snapshot.upload.before", "delay(120)")
    t0 = time.monotonic()
    assert failpoints.hit("snapshot.upload.before") is False
    assert time.monotonic() - t0 >= 0.1
    assert failpoints.stats()["snapshot.upload.before"]["fired"] == {"delay": 1}


def test_error_message_names_the_point() -> None:
    with failpoints.armed("commitlog.write.before", "error(boom)"), pytest.raises(InjectedFault, match="commitlog.write.before.*boom"):
        failpoints.hit("commitlog.write.before")
    assert failpoints.hit("commitlog.write.before") is False


@pytest.mark.parametrize(
    "spec,match",
    [
        ("snapshot.upload.typo=drop", "unknown failpoint"),
        ("snapshot.upload=explode", "cannot parse term"),
        ("snapshot.upload=delay", "delay needs milliseconds"),
        ("snapshot.upload=150%drop", "out of range"),
        ("snapshot.upload", "name=action"),
    ],
)
def test_bad_specs_are_rejected_with_the_reason(spec: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        failpoints.configure(spec)


def test_alias_snapshot_upload_means_before() -> None:
    failpoints.configure("snapshot.upload=30%delay(2000);changelog.upload.after=drop", seed=1)
    assert set(failpoints.stats()) == {"snapshot.upload.before", "changelog.upload.after"}


def test_armed_by_environment_variable(tmp_path: Path) -> None:
    code = (
        "from statebed_base.errors import InjectedFault\nfrom statebed_store import failpoints\n"
        "print(sorted(failpoints.stats()))\n"
        "try:\n    failpoints.hit('changelog.upload.before')\nexcept InjectedFault as e:\n    print('fired', e)\n"
    )
    env = dict(os.environ, STATEBED_FAILPOINTS="changelog.upload.before=1*error(from env)", STATEBED_FAILPOINTS_SEED="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "['changelog.upload.before']" in out and "fired failpoint changelog.upload.before fired: from env" in out
    bad = dict(os.environ, STATEBED_FAILPOINTS="nope=drop")
    proc = subprocess.run(
        [sys.executable, "-c", "from statebed_store import failpoints; failpoints.check_known()"], env=bad, capture_output=True, text=True
    )
    assert proc.returncode != 0 and "unknown failpoint 'nope'" in proc.stderr


def test_job_points_are_registered_by_the_job_and_armed_from_env_on_registration() -> None:
    """The store's table knows no job point; the job's driver module registers its own at import."""
    code = (
        "from statebed_store import failpoints\n"
        "print('before', 'driver.sink.before' in failpoints.KNOWN_POINTS, sorted(failpoints.stats()))\n"
        "import statebed_job.driver\n"
        "print('after', sorted(failpoints.stats()), failpoints.hit('driver.sink.before'))\n"
        "failpoints.check_known()\n"
    )
    env = dict(os.environ, STATEBED_FAILPOINTS="driver.sink.before=drop;nope=drop")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "before False []" in proc.stdout and "after ['driver.sink.before'] True" in proc.stdout
    assert proc.returncode != 0 and "unknown failpoint 'nope'" in proc.stderr


def test_store_failpoints_hit_their_operations(storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path) -> None:
    store = StoreId(0, 0)
    p = StateStoreProvider(storage, store, options, uploader=uploader)
    r1 = commit(p, CheckpointRef(0), {b"a": b"1"})
    # An error after the changelog is durable fails the commit; nothing committed is lost.
    with failpoints.armed("changelog.upload.after", "1*error"), pytest.raises(InjectedFault):
        commit(p, CheckpointRef(1, r1.checkpoint_id), {b"a": b"2"})
    assert len([r for r in StoreFiles(storage, store).refs(CHANGELOG) if r.version == 2]) == 1
    assert state_at(p, CheckpointRef(1, r1.checkpoint_id)) == {b"a": b"1"}
    # `drop` before the upload skips the write: the commit "succeeds" without a file (a lost write).
    with failpoints.armed("changelog.upload.before", "drop"):
        lost = commit(p, CheckpointRef(1, r1.checkpoint_id), {b"a": b"3"})
    assert not StoreFiles(storage, store).has_changelog(CheckpointRef(2, lost.checkpoint_id))
    # `drop` on snapshot uploads: queued snapshots silently never appear.
    with failpoints.armed("snapshot.upload.before", "drop"):
        snap = commit(p, CheckpointRef(1, r1.checkpoint_id), {b"a": b"4"}, snapshot=True)
        assert uploader.drain(30)
    assert uploader.skipped == 1
    assert not StoreFiles(storage, store).has_snapshot(CheckpointRef(2, snap.checkpoint_id))
    p.close()
