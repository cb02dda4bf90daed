"""Hostile-input follow-ups (issue 12): strict JSON everywhere a file is parsed, create-only retries on S3."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
from checkpoint_helpers import STORE, load_state, write_versions
from conftest import s3_storage
from minio.error import S3Error
from net_helpers import Forwarder
from s3server import ACCESS_KEY, SECRET_KEY, S3Server

from statebed_base.errors import AlreadyExistsError, CorruptFileError, InjectedFault, LineageError, UsageError
from statebed_chaos.targets.local import LocalTargets
from statebed_job.cluster import StandaloneCluster
from statebed_model.rundir import RunDir
from statebed_model.sources import IngestSource
from statebed_store import (
    HeaderCache,
    S3Settings,
    S3Storage,
    SnapshotUploader,
    Storage,
    StoreFiles,
    StoreOptions,
    cleanup_store,
    failpoints,
    open_storage,
)
from statebed_store.failpoints import Control
from statebed_store.plan import loadable_plan
from statebed_store.snapshot import parse_metadata
from statebed_store.storage.s3 import _attempt

HOSTILE_JSON = ["{not json", '{"version":1e400,"points":{}}', '{"version":NaN,"points":{}}', "[" * 100_000 + "]" * 100_000]


# -- strict JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize("garbage", HOSTILE_JSON)
def test_a_hostile_control_file_keeps_the_arming(garbage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failpoints, "CONTROL_POLL_S", 0.0)
    control = Control(tmp_path / "control.json")
    previous = failpoints.use_control(control.path)
    try:
        control.arm("commitlog.write.before=error(armed)")
        with pytest.raises(InjectedFault, match="armed"):
            failpoints.hit("commitlog.write.before")
        control.path.write_text(garbage)
        with pytest.raises(InjectedFault, match="armed"):  # read, refused, the arming kept
            failpoints.hit("commitlog.write.before")
        with pytest.raises(UsageError, match=f"{control.path}: not a failpoint control file"):
            control.read()
    finally:
        failpoints.use_control(previous)


@pytest.mark.parametrize("garbage", HOSTILE_JSON)
def test_hostile_json_outside_checkpoints_is_named(garbage: str, tmp_path: Path) -> None:
    """run.json, timing records, acks, the cluster state and the targets file: one error naming the file."""
    run = RunDir(tmp_path / "run")
    run.storage.write("run.json", garbage.encode())
    with pytest.raises(UsageError, match=f"{run.storage.display('run.json')}: contents is not valid JSON|nested too deeply"):
        run.read_info()
    run.storage.write("timings/000001-1.json", garbage.encode())
    with pytest.raises(CorruptFileError) as e:
        run.timings()
    assert e.value.file == run.storage.display("timings/000001-1.json")
    source = IngestSource(open_storage(tmp_path / "landing"))
    source.landing.write("acks/000000000000.json", garbage.encode())
    with pytest.raises(CorruptFileError) as e:
        source.acks()
    assert e.value.file == source.landing.display("acks/000000000000.json")
    cluster = StandaloneCluster(tmp_path / "cluster")
    cluster.state_path.parent.mkdir()
    cluster.state_path.write_text(garbage)
    with pytest.raises(UsageError, match=f"{cluster.state_path}: not a usable cluster state file"):
        cluster.read_state()
    targets = LocalTargets(registry=tmp_path / "targets.json")
    (tmp_path / "targets.json").write_text(garbage)
    with pytest.raises(UsageError, match=f"{tmp_path / 'targets.json'}: not a usable targets file"):
        targets._registered()


def test_hostile_snapshot_metadata_is_a_corrupt_file() -> None:
    file = "/ckpt/state/0/0/3_c.zip"
    with pytest.raises(CorruptFileError, match="snapshot metadata is nested too deeply") as e:
        parse_metadata(b"v1\n" + b"[" * 100_000 + b"]" * 100_000, file=file)
    assert e.value.file == file
    deep = b'{"lineage":[' + b"[" * 900 + b"]" * 900 + b"]}"  # parses, but is no lineage: said briefly
    with pytest.raises(LineageError, match=r"item 0 is not an object: \[\[\[") as le:
        parse_metadata(b"v1\n" + deep, file=file)
    assert le.value.file == file and len(str(le.value)) < 200


def test_hostile_firing_lines_are_skipped(tmp_path: Path) -> None:
    control = Control(tmp_path / "control.json")
    good = {"time": 1.0, "failpoint": "commitlog.write.before", "action": "drop"}
    lines = [*HOSTILE_JSON, "[1]", '{"time":"late"}', json.dumps(good)]
    (tmp_path / "fired-1.jsonl").write_text("\n".join(lines) + "\n")
    assert control.firings() == [good]


# -- S3: a create-only retry that meets its own first write --------------------------------------


@pytest.mark.s3
def test_a_create_only_retry_that_finds_its_own_bytes_succeeds(s3_server: S3Server) -> None:
    """The first PUT landed but its answer was lost; the retry's 412 is our own write, not a conflict."""
    st = s3_storage(s3_server)
    path = "state/0/0/1_a.changelog"
    key, shown = st._key(path), st.display(path)
    st.write(path, b"ours", create_only=True)  # what the lost first attempt did
    st._settle_create_conflict(key, b"ours", shown, attempt=1)
    for other, attempt in ((b"them", 1), (b"longer bytes", 1), (b"ours", 0)):  # same size, other size, first send
        with pytest.raises(AlreadyExistsError) as e:
            st._settle_create_conflict(key, other, shown, attempt=attempt)
        assert e.value.file == shown
    assert st.read(path) == b"ours"


class LosingProxy(Forwarder):
    """A loopback TCP proxy to the S3 server that loses the answer to the first conditional PUT:
    once the server's answer starts (the PUT is applied), the client's connection is closed."""

    def __init__(self, upstream: str) -> None:
        self.lost = threading.Event()
        super().__init__(upstream)

    def answers(self, client: socket.socket, up: socket.socket, seen: bytearray) -> None:
        while data := up.recv(65536):
            if not self.lost.is_set() and b"if-none-match" in bytes(seen).lower():
                self.lost.set()
                return
            client.sendall(data)


@pytest.mark.s3
def test_a_create_only_put_whose_answer_is_lost_succeeds_on_retry(s3_server: S3Server) -> None:
    """End to end: urllib3 retries the PUT after the lost answer, the server says 412, and the
    bytes read back are ours, so the write succeeded (before the fix: AlreadyExistsError)."""
    direct = s3_storage(s3_server)
    proxy = LosingProxy(s3_server.endpoint)
    try:
        via = S3Storage(direct.url, S3Settings(proxy.endpoint, ACCESS_KEY, SECRET_KEY, conditional_put="on"))
        via.write("commits/0", b"v1\n{}", create_only=True)
        assert proxy.lost.is_set()  # the first answer really was lost
    finally:
        proxy.close()
    assert direct.read("commits/0") == b"v1\n{}"
    with pytest.raises(AlreadyExistsError):  # a later writer, first send: a conflict as before
        direct.write("commits/0", b"v1\n{}", create_only=True)


@pytest.mark.s3
def test_a_first_send_412_counts_as_attempt_zero(s3_server: S3Server) -> None:
    """`_attempt` reads urllib3's retry history off a real 412: empty on a first send."""
    st = s3_storage(s3_server)
    st.write("x", b"1", create_only=True)
    with pytest.raises(S3Error) as e:
        st._put(st._key("x"), b"1", True)
    assert e.value.code == "PreconditionFailed" and _attempt(e.value) == 0
    with pytest.raises(AlreadyExistsError):  # identical bytes, but a first send: someone else wrote them
        st.write("x", b"1", create_only=True)


# -- cleanup plans around a base snapshot whose SST is corrupt ------------------------------------


def test_cleanup_keeps_what_a_load_needs_around_a_base_with_a_corrupt_sst(
    local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader, tmp_path: Path
) -> None:
    """Snapshot 10, the base of the oldest retained version (11), has an SST with its size
    intact but a flipped byte: a load falls back to snapshot 5, so cleanup must keep 5 and 6..10."""
    w = write_versions(local_storage, options, uploader, 13, snapshot_at=(5, 10))
    files = StoreFiles(local_storage, STORE)
    older = {f.dfs for f in files.snapshot_metadata(w.ref(5)).sst_files}
    own = [f for f in files.snapshot_metadata(w.ref(10)).sst_files if f.dfs not in older and f.crc32c is not None]
    assert own  # snapshot 10 has an SST of its own, with a recorded CRC32C
    sst = Path(local_storage.url) / STORE.dir / "SSTs" / own[0].dfs
    data = bytearray(sst.read_bytes())
    data[len(data) // 2] ^= 0xFF
    sst.write_bytes(bytes(data))
    retained = [w.ref(v) for v in (11, 12, 13)]
    cleanup_store(local_storage, STORE, retained, cache=HeaderCache(), sst_orphan_grace_s=0)
    after = StoreFiles(local_storage, STORE)
    assert after.has_snapshot(w.ref(5)) and all(after.has_changelog(w.ref(v)) for v in range(6, 14))
    assert not after.has_changelog(w.ref(4))  # below every plan: still deleted
    plan, skipped = loadable_plan(after, w.ref(11))
    assert plan.snapshot == w.ref(5) and [e.file for e in skipped] == [str(sst)]  # type: ignore[attr-defined]
    for v in (11, 12, 13):
        state, _ = load_state(local_storage, options, tmp_path, v, w.ref(v).id)
        assert state == w.states[v]
