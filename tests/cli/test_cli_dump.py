"""`statebed dump`: one JSON object per key, in key order."""

from __future__ import annotations

import base64
import json

import pytest
from checkpoint_helpers import STORE, run_cli, write_versions

from statebed_store import CommitLog, SnapshotUploader, StateStoreProvider, Storage, StoreOptions


def dump(capsys: pytest.CaptureFixture[str], root: str, *args: str) -> list[dict[str, str]]:
    code, out, err = run_cli(capsys, "dump", root, "--operator", "0", "--partition", "0", *args)
    assert code == 0, err
    assert out == "" or out.endswith("\n")
    return [json.loads(line) for line in out.splitlines()]


def test_dump_latest_committed_and_a_given_version(
    capsys: pytest.CaptureFixture[str], local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    w = write_versions(local_storage, options, uploader, 4, snapshot_at=(3,), commit_log=True)
    assert dump(capsys, local_storage.url) == [
        {"key": "count", "value": "4"},
        {"key": "k3", "value": "value-3"},
        {"key": "k4", "value": "value-4"},
        {"key": "shared", "value": "shared-4"},
    ]
    for v in (1, 2, 3):
        lines = dump(capsys, local_storage.url, "--version", str(v), "--id", w.results[v].checkpoint_id or "")
        assert lines == [{"key": k.decode(), "value": val.decode()} for k, val in sorted(w.states[v].items())]
    assert dump(capsys, local_storage.url, "--version", "0") == []


def test_dump_renders_binary_as_base64(
    capsys: pytest.CaptureFixture[str], local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    pairs = {b"\x00\xff": b"\x01", b"bell\x07": b"text", b"caf\xc3\xa9": b"\xe9t\xe9", b"tab\tkey": b""}
    with StateStoreProvider(local_storage, STORE, options, uploader=uploader) as p, p.load(0) as txn:
        txn.put_many(list(pairs), list(pairs.values()))
        r = txn.commit()
    CommitLog(local_storage).write(0, {0: [[r.checkpoint_id]]})
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    assert dump(capsys, local_storage.url, "--json") == [
        {"key_b64": "AP8=", "value_b64": "AQ=="},
        {"key_b64": b64(b"bell\x07"), "value": "text"},
        {"key": "café", "value_b64": b64(b"\xe9t\xe9")},
        {"key": "tab\tkey", "value": ""},
    ]
