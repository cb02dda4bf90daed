"""One owner per concern: names in `naming`, local-disk I/O in `localfs` (one atomic writer
that fsyncs file and directory), bounded queues and caches."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from checkpoint_helpers import STORE, commit, ref_of, state_at
from net_helpers import wait_for
from test_layering import PACKAGES as LAYERS

import statebed_job.task as task_module
from statebed_base import localfs
from statebed_base.errors import AlreadyExistsError, StoreStateError, UsageError
from statebed_job.task import TaskSpec, cached_providers, close_providers, run_partition
from statebed_model.records import records_for
from statebed_model.rundir import RunDir
from statebed_store import (
    CheckpointRef,
    SnapshotUploader,
    StateStoreProvider,
    Storage,
    StoreId,
    StoreOptions,
    failpoints,
    local_dirs,
    naming,
)
from statebed_store.failpoints import Control
from statebed_store.naming import PENDING_DIR, SNAPSHOT
from statebed_store.store_files import StoreFiles

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = list(LAYERS.values())  # every package, as the layering test knows them


def sources() -> Iterator[tuple[Path, ast.Module]]:
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            yield f, ast.parse(f.read_text(), str(f))


# -- one atomic writer --------------------------------------------------------------------------------


def test_only_localfs_renames_links_or_fsyncs() -> None:
    """`os.replace`, `os.rename`, `os.link` and `os.fsync` appear in localfs only: there is one writer."""
    found = []
    for f, tree in sources():
        if f.name == "localfs.py":
            continue
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "os"):
                continue
            if n.attr in ("replace", "rename", "link", "fsync"):
                found.append(f"{f.relative_to(ROOT)}:{n.lineno}: os.{n.attr}")
    assert found == []


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(device, inode) of everything fsynced; the real fsync still runs."""
    seen: list[tuple[int, int]] = []
    real = os.fsync

    def recording(fd: int) -> None:
        st = os.fstat(fd)
        seen.append((st.st_dev, st.st_ino))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return seen


def ident(p: Path) -> tuple[int, int]:
    st = p.stat()
    return st.st_dev, st.st_ino


def test_the_sinks_create_only_write_fsyncs_file_and_directory(tmp_path: Path, fsynced: list[tuple[int, int]]) -> None:
    run = RunDir(tmp_path / "run")
    table = pa.table({"key": [1, 2]})
    assert run.write_output(3, table) is True
    out = tmp_path / "run" / run.output_name(3)
    assert ident(out) in fsynced and ident(out.parent) in fsynced
    before = out.read_bytes()
    fsynced.clear()
    assert run.write_output(3, pa.table({"key": [9]})) is False  # create-only: the first output stays
    assert out.read_bytes() == before and ident(out) not in fsynced
    assert sorted(p.name for p in out.parent.iterdir()) == ["3.parquet"]  # no temp file left behind


def test_atomic_write_create_only_and_overwrite(tmp_path: Path, fsynced: list[tuple[int, int]]) -> None:
    target = tmp_path / "d" / "f"
    localfs.atomic_write(target, b"one", create_only=True)
    with pytest.raises(AlreadyExistsError, match="already exists"):
        localfs.atomic_write(target, b"two", create_only=True)
    assert target.read_bytes() == b"one"
    localfs.atomic_write(target, b"three")
    assert target.read_bytes() == b"three" and ident(target) in fsynced and ident(target.parent) in fsynced
    assert os.listdir(target.parent) == ["f"]


def test_sst_cache_writes_go_through_the_writer(
    local_storage: Storage, options: StoreOptions, tmp_path: Path, fsynced: list[tuple[int, int]]
) -> None:
    uploader = SnapshotUploader()
    with StateStoreProvider(local_storage, STORE, options, uploader=uploader) as p:
        r = commit(p, CheckpointRef(0), {b"k": b"v"}, snapshot=True)
        assert uploader.drain(30) and uploader.uploaded == 1
    reader = options.with_(local_dir=tmp_path / "reader")
    fsynced.clear()
    with StateStoreProvider(local_storage, STORE, reader, uploader=uploader) as fresh:
        assert state_at(fresh, ref_of(r)) == {b"k": b"v"}
    cache = local_dirs.sst_cache_dir(local_dirs.local_root(reader.local_dir, local_storage.url), STORE)
    cached = [f for f in cache.iterdir()]
    assert cached and all(naming.is_sst(f.name) and ident(f) in fsynced for f in cached)


# -- names ----------------------------------------------------------------------------------------------

NAME_LITERALS = ("_metadata", "LOCK", "sst-cache", "SSTs", "commits", "pending", ".crc", ".tmp", ".changelog", ".zip", ".sst")


def test_checkpoint_names_are_spelled_only_in_naming() -> None:
    """No module but naming spells a checkpoint or local name (dict keys of JSON documents aside); the
    atomic writer's temp suffix is the ground floor's (`statebed_base.localfs.TMP_SUFFIX`), naming reads it."""
    found = []
    for f, tree in sources():
        if f.name == "naming.py":
            continue
        owned = {".tmp"} if f.relative_to(ROOT).as_posix() == "src/statebed_base/localfs.py" else set()
        skip = set()
        for n in ast.walk(tree):
            body = getattr(n, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skip.add(id(body[0].value))  # docstrings
            if isinstance(n, ast.Dict):
                skip.update(id(k) for k in n.keys if k is not None)
            if isinstance(n, ast.Subscript):
                skip.add(id(n.slice))
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip:
                v = n.value
                if any(
                    v == lit or v.startswith(lit + "/") or (lit.startswith(".") and v.endswith(lit))
                    for lit in NAME_LITERALS
                    if lit not in owned
                ):
                    found.append(f"{f.relative_to(ROOT)}:{n.lineno}: {v!r}")
    assert found == []


def test_local_names_round_trip() -> None:
    name = naming.pending_name(4242, 7, "abc-1")
    assert naming.pending_pid(name) == 4242 and naming.pending_pid("junk") is None
    assert naming.parse_batch_id(naming.commit_path(12).split("/")[-1]) == 12
    assert naming.parse_batch_id(".12.crc") is None and naming.parse_index("3") == 3 and naming.parse_index("_metadata") is None
    sst = naming.new_sst_name("000017.sst")
    assert sst.startswith("000017-") and naming.is_sst(sst) and sst != naming.new_sst_name("000017.sst")
    assert localfs.temp_name("x").startswith(".x.") and naming.parse_state_file(localfs.temp_name("1_a.zip")) is None


# -- local instance directories -------------------------------------------------------------------------


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_instance_dir_lock_private_dir_and_dead_pending(tmp_path: Path) -> None:
    store = StoreId(1, 2, "other")
    first = local_dirs.claim_instance_dir(tmp_path, store)
    assert not first.private and first.path == tmp_path / "1" / "2" / "other"
    second = local_dirs.claim_instance_dir(tmp_path, store)  # lock held: a private directory
    assert second.private and second.path.parent == first.path.parent and second.path.is_dir()
    second.release()
    assert not second.path.exists()
    pending = first.path / PENDING_DIR
    mine = local_dirs.new_pending_dir(first.path, 3, "abc")
    mine.mkdir()
    dead = pending / naming.pending_name(dead_pid(), 4, "def")
    stray = pending / "not-a-pending-dir"
    dead.mkdir()
    stray.mkdir()
    first.release()
    third = local_dirs.claim_instance_dir(tmp_path, store)  # a new owner sweeps what dead processes left
    assert not third.private and sorted(p.name for p in pending.iterdir()) == [mine.name]
    third.release()


# -- bounded uploader queue -------------------------------------------------------------------------------


def test_a_full_upload_queue_drops_the_oldest_snapshot_of_the_store(
    local_storage: Storage, options: StoreOptions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first upload is held (not delayed: a busy machine's commits could outlast a delay) until
    all six commits are made: one in flight, the two newest queued, the other three dropped."""
    monkeypatch.setattr(failpoints, "CONTROL_POLL_S", 0.0)
    control = Control(tmp_path / "failpoints" / "control.json")
    previous = failpoints.use_control(control.path)
    uploader = SnapshotUploader(max_pending=2)
    try:
        with StateStoreProvider(local_storage, STORE, options, uploader=uploader) as p:
            with failpoints.armed("snapshot.upload.before", "1*hold(60000)"):
                ref, refs = CheckpointRef(0), []
                for v in range(1, 7):
                    ref = ref_of(commit(p, ref, {b"k": b"%d" % v}, snapshot=True))
                    refs.append(ref)
                    if v == 1:  # the first upload is in flight, held, before the next commit
                        wait_for(lambda: failpoints.stats()["snapshot.upload.before"]["hits"], timeout_s=60)
                    assert uploader.pending() <= 3  # two waiting, at most one in flight
                control.release("snapshot.upload.before")
                assert uploader.drain(60)
            pending_dirs = list((p._dir / PENDING_DIR).iterdir())
    finally:
        failpoints.use_control(previous)
    assert (uploader.dropped, uploader.uploaded) == (3, 3)
    assert pending_dirs == []  # dropped checkpoints were removed, not leaked
    snaps = set(StoreFiles(local_storage, STORE).refs(SNAPSHOT))
    assert snaps == {refs[0], refs[4], refs[5]}  # the held first, then the two newest: the oldest queued were dropped
    reader = options.with_(local_dir=tmp_path / "reader")
    with StateStoreProvider(local_storage, STORE, reader, uploader=SnapshotUploader()) as fresh:
        assert state_at(fresh, refs[-1]) == {b"k": b"6"}


def test_drain_reports_a_timeout_and_then_completion(local_storage: Storage, options: StoreOptions) -> None:
    uploader = SnapshotUploader()
    with StateStoreProvider(local_storage, STORE, options, uploader=uploader) as p:
        with failpoints.armed("snapshot.upload.before", "delay(1000)"):
            commit(p, CheckpointRef(0), {b"k": b"v"}, snapshot=True)
            assert uploader.drain(0.01) is False and uploader.pending() == 1
            assert uploader.drain(30) is True and uploader.pending() == 0
    with pytest.raises(UsageError, match="max_pending"):
        SnapshotUploader(max_pending=0)


# -- bounded provider cache ---------------------------------------------------------------------------------


def test_provider_cache_is_lru_and_closes_evicted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_module, "MAX_PROVIDERS", 2)
    close_providers()
    spec = TaskSpec(
        checkpoint=str(tmp_path / "ckpt"),
        s3=None,
        workload="count",
        partitions=3,
        batch_id=0,
        base_ids=(None, None, None),
        options=StoreOptions(),
        local_root=str(tmp_path / "local"),
    )
    records = records_for(0, 30, 5)
    try:
        run_partition(spec, 0, records)
        run_partition(spec, 1, records)
        p0 = task_module._provider(spec, 0)  # partition 0 is now the most recently used
        run_partition(spec, 2, records)  # evicts partition 1's provider
        assert cached_providers() == 2
        assert task_module._provider(spec, 0) is p0
        evicted = [p for p in task_module._PROVIDERS.values()]
        assert {p.store.partition for p in evicted} == {0, 2}
    finally:
        close_providers()
    with pytest.raises(StoreStateError, match="closed"):
        p0.load(0)
