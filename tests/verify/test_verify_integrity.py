"""The lineage verifier never vouches for a corrupt checkpoint: positive controls for store integrity.

Every test damages a real checkpoint (statebed's, or Spark's own fixtures) the way a disk, a
bad copy or a losing attempt would, and checks the verifier reports it as its kind, while
`statebed plan` and `statebed dump` agree with what a load does.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from checkpoint_helpers import STORE, Written, commit, ref_of, run_cli, write_versions

from statebed_store import (
    CheckpointRef,
    CommitLog,
    HeaderCache,
    SnapshotUploader,
    StateStoreProvider,
    Storage,
    StoreId,
    StoreOptions,
    open_storage,
)
from statebed_store.changelog import parse_changelog
from statebed_store.checksum import make_sidecar
from statebed_store.inspection import committed_ref, discover_stores
from statebed_store.lz4block import compress
from statebed_store.snapshot import read_zip
from statebed_verify import KINDS, verify_lineage

Capsys = pytest.CaptureFixture[str]


@pytest.fixture
def ckpt(local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader) -> Written:
    """Versions 1-5 of one store, a snapshot of version 3, all committed."""
    return write_versions(local_storage, options, uploader, 5, snapshot_at=(3,), commit_log=True)


def local(storage: Storage, rel: str) -> Path:
    return Path(storage.url) / rel


def flip(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 3 if offset is None else offset] ^= 0xFF
    path.write_bytes(bytes(data))


def found(report, kind: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Files named by anomalies of `kind`."""
    return [f for a in report.anomalies if a.kind == kind for f in a.files]


def plan_args(w: Written, v: int) -> list[str]:
    return ["--operator", "0", "--partition", "0", "--version", str(v), "--id", w.ref(v).id or ""]


def dumped(w: Written, v: int) -> list[str]:
    return [json.dumps({"key": k.decode(), "value": val.decode()}) for k, val in sorted(w.states[v].items())]


# -- item 1: a warmed or caller-supplied cache ---------------------------------------------------


@pytest.mark.parametrize("target", ["changelog body", "snapshot zip", "sidecar"])
def test_a_warmed_cache_does_not_hide_damage(ckpt: Written, options: StoreOptions, tmp_path: Path, target: str) -> None:
    cache = HeaderCache()
    with StateStoreProvider(ckpt.storage, STORE, options.with_(local_dir=tmp_path / "reader"), cache=cache) as p:
        with p.load(5, ckpt.ref(5).id) as txn:  # a load warms the cache
            assert dict(txn.items()) == ckpt.states[5]
    assert verify_lineage(ckpt.storage, cache=cache).valid is True  # and so does a first verification
    assert len(cache) > 0
    path = {"changelog body": ckpt.path(5), "snapshot zip": ckpt.path(3, "zip"), "sidecar": ckpt.path(4) + ".crc"}[target]
    if target == "sidecar":
        doc = json.loads(ckpt.storage.read(path))
        doc["value"] += 1
        ckpt.storage.write(path, json.dumps(doc).encode())
    else:
        flip(local(ckpt.storage, path), -3 if target == "changelog body" else None)
    report = verify_lineage(ckpt.storage, cache=cache)
    assert report.valid is False
    shown = ckpt.storage.display(path.removesuffix(".crc"))
    assert shown in found(report, "unreadable-file"), report.to_json()


def test_an_empty_cache_passed_in_is_used(ckpt: Written) -> None:
    cache = HeaderCache()
    assert verify_lineage(ckpt.storage, cache=cache).valid is True
    assert len(cache) > 0


# -- item 2: SST contents ----------------------------------------------------------------------------


def test_a_flipped_byte_in_an_sst_is_reported_and_planned_around(ckpt: Written, capsys: Capsys) -> None:
    meta, _ = read_zip(ckpt.storage.read(ckpt.path(3, "zip")), file="zip")
    (f,) = meta.sst_files
    sst = STORE.path(f"SSTs/{f.dfs}")
    flip(local(ckpt.storage, sst))
    report = verify_lineage(ckpt.storage)
    assert report.valid is False and found(report, "unreadable-file") == [ckpt.storage.display(sst)]
    assert "unplannable" not in {a.kind for a in report.anomalies}  # the changelogs still load version 5
    code, out, err = run_cli(capsys, "plan", ckpt.storage.url, *plan_args(ckpt, 5), "--json")
    assert code == 0 and json.loads(out)["snapshot"] is None and ckpt.storage.display(sst) in err
    code, out, err = run_cli(capsys, "dump", ckpt.storage.url, "--operator", "0", "--partition", "0")
    assert code == 0 and out.splitlines() == dumped(ckpt, 5)


def test_a_flipped_byte_in_a_spark_sst_is_reported(native: dict[str, Path], tmp_path: Path, capsys: Capsys) -> None:
    """Spark records no SST checksum: the verifier reads the snapshot's every entry."""
    root = tmp_path / "agg"
    shutil.copytree(native["4.1.4"] / "agg", root)
    storage = open_storage(root)
    store = next(s for s in discover_stores(storage) if s.partition == 2)
    ref = committed_ref(storage, store)
    args = ["--operator", "0", "--partition", "2"]
    code, before, _ = run_cli(capsys, "dump", str(root), *args)
    meta, _ = read_zip(storage.read(store.path(f"{ref.version}_{ref.id}.zip")), file="zip")
    sst = store.path(f"SSTs/{max(meta.sst_files, key=lambda f: f.size).dfs}")
    flip(local(storage, sst), 20)
    report = verify_lineage(storage)
    assert report.valid is False and found(report, "unreadable-file") == [storage.display(sst)], report.to_json()
    code, after, err = run_cli(capsys, "dump", str(root), *args)
    assert code == 0 and after == before and before  # rebuilt without the damaged snapshot


# -- item 3/4: files that are not what their name says ---------------------------------------------


@pytest.mark.parametrize("with_sidecar", [True, False])
def test_a_losing_attempts_snapshot_copied_over_the_committed_one(
    local_storage: Storage, options: StoreOptions, tmp_path: Path, capsys: Capsys, with_sidecar: bool
) -> None:
    up = SnapshotUploader()
    log = CommitLog(local_storage)
    win = StateStoreProvider(local_storage, STORE, options.with_(local_dir=tmp_path / "w"), uploader=up)
    lose = StateStoreProvider(local_storage, STORE, options.with_(local_dir=tmp_path / "l"), uploader=up)
    r1 = ref_of(commit(win, CheckpointRef(0), {b"k": b"1"}))
    log.write(0, {0: [[r1.id]]})
    loser = ref_of(commit(lose, r1, {b"k": b"loser"}, snapshot=True))
    r2 = ref_of(commit(win, r1, {b"k": b"2"}, snapshot=True))
    log.write(1, {0: [[r2.id]]})
    assert up.drain(30)
    win.close()
    lose.close()
    committed_zip, loser_zip = (STORE.path(f"2_{r.id}.zip") for r in (r2, loser))
    local_storage.write(committed_zip, local_storage.read(loser_zip))
    if with_sidecar:
        local_storage.write(committed_zip + ".crc", local_storage.read(loser_zip + ".crc"))
    else:
        local_storage.delete([committed_zip + ".crc"])
    report = verify_lineage(local_storage)
    assert report.valid is False and local_storage.display(committed_zip) in found(report, "foreign-file"), report.to_json()
    code, out, _ = run_cli(capsys, "dump", local_storage.url, "--operator", "0", "--partition", "0")
    assert code == 0 and out.splitlines() == ['{"key": "k", "value": "2"}']  # never the loser's state


def test_a_version_1_changelog_of_another_partition(local_storage: Storage, options: StoreOptions, tmp_path: Path) -> None:
    up = SnapshotUploader()
    parts = [write_versions(local_storage, options.with_(local_dir=tmp_path / f"p{p}"), up, 2, store=StoreId(0, p)) for p in (0, 1)]
    log = CommitLog(local_storage)
    for v in (1, 2):
        log.write(v - 1, {0: [[w.ref(v).id] for w in parts]})
    assert verify_lineage(local_storage).valid is True
    for suffix in ("", ".crc"):  # its lineage is empty, as every version 1's: only the sidecar tells
        local_storage.write(parts[0].path(1) + suffix, local_storage.read(parts[1].path(1) + suffix))
    report = verify_lineage(local_storage)
    assert found(report, "foreign-file") == [parts[0].display(1)], report.to_json()


def test_a_spark_changelog_of_another_partition(native: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "agg"
    shutil.copytree(native["4.3.0"] / "agg", root)
    storage = open_storage(root)
    stores = {s.partition: s for s in discover_stores(storage)}
    names = {}
    for p in (0, 1):
        ref = committed_ref(storage, stores[p], batch=0)
        names[p] = stores[p].path(f"{ref.version}_{ref.id}.changelog")
    for suffix in ("", ".crc"):
        storage.write(names[0] + suffix, storage.read(names[1] + suffix))
    report = verify_lineage(storage)
    assert found(report, "foreign-file") == [storage.display(names[0])], report.to_json()
    assert "foreign-file" in KINDS


# -- item 5: records -----------------------------------------------------------------------------


@pytest.mark.parametrize("cut", ["mid-record", "no-end-marker", "negative-length"])
def test_a_changelog_with_broken_records_is_unreadable(ckpt: Written, capsys: Capsys, cut: str) -> None:
    cl = parse_changelog(ckpt.storage.read(ckpt.path(4)), file="x")
    p, o = cl.payload, cl.header.records_offset
    broken = {"mid-record": p[: o + 6], "no-end-marker": p[:-4], "negative-length": p[:o] + b"\xff\xff\xff\xfb" + p[o + 4 :]}[cut]
    data = compress(broken)
    ckpt.storage.write(ckpt.path(4), data)
    ckpt.storage.write(ckpt.path(4) + ".crc", make_sidecar(data))  # container and sidecar intact
    report = verify_lineage(ckpt.storage)
    assert report.valid is False and ckpt.display(4) in found(report, "unreadable-file")
    code, out, err = run_cli(capsys, "plan", ckpt.storage.url, *plan_args(ckpt, 5))
    assert code == 2 and out == "" and ckpt.display(4) in err


# -- item 6: memory ------------------------------------------------------------------------------

_PEAK = """
import json, resource, sys
from statebed_verify import verify_lineage
from statebed_store import CheckpointRef, StoreId, open_storage
from statebed_store.inspection import dump_state

storage = open_storage(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = verify_lineage(storage)
rows = list(dump_state(storage, StoreId(0, 0), CheckpointRef(int(sys.argv[2]), sys.argv[3])))
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"grown_kib": grown, "kinds": sorted({a.kind for a in report.anomalies}), "rows": len(rows)}))
"""


def test_a_zip_bomb_costs_no_memory(ckpt: Written) -> None:
    """A 200 MiB member in a ~200 KiB zip: refused from its declared size, never inflated in memory."""
    zip_path = ckpt.path(3, "zip")
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(ckpt.storage.read(zip_path))) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        with dst.open("OPTIONS-999999", "w", force_zip64=True) as w:
            for _ in range(200):
                w.write(bytes(1 << 20))
    data = buf.getvalue()
    assert len(data) < 1 << 20
    ckpt.storage.write(zip_path, data)
    ckpt.storage.write(zip_path + ".crc", make_sidecar(data))
    ref = ckpt.ref(5)
    env = {**os.environ, "STATEBED_LOG_LEVEL": "ERROR"}
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, ckpt.storage.url, str(ref.version), ref.id or ""],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["kinds"] == ["unreadable-file"] and got["rows"] == len(ckpt.states[5])
    assert got["grown_kib"] < 50 * 1024, got  # the member is 200 MiB


# -- item 7: plan agrees with the load ------------------------------------------------------------


def test_plan_and_verifier_plan_around_a_damaged_snapshot_like_the_load(ckpt: Written, capsys: Capsys) -> None:
    flip(local(ckpt.storage, ckpt.path(3, "zip")))
    code, out, err = run_cli(capsys, "plan", ckpt.storage.url, *plan_args(ckpt, 5), "--json")
    assert code == 0, err
    assert json.loads(out) == {
        "snapshot": None,
        "changelogs": [{"version": v, "id": ckpt.ref(v).id, "file": ckpt.path(v)} for v in range(1, 6)],
    }
    report = verify_lineage(ckpt.storage, all_versions=True)
    assert {a.kind for a in report.anomalies} == {"unreadable-file"} and found(report, "unreadable-file") == [ckpt.display(3, "zip")]
    code, out, _ = run_cli(capsys, "dump", ckpt.storage.url, "--operator", "0", "--partition", "0")
    assert code == 0 and out.splitlines() == dumped(ckpt, 5)
