"""`statebed plan`: the exact --json document and the human rendering."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from checkpoint_helpers import Written, run_cli, write_versions
from conftest import s3_settings
from s3server import S3Server

from statebed_store import S3Storage, SnapshotUploader, Storage, StoreId, StoreOptions


def entry(w: Written, version: int, kind: str = "changelog") -> dict[str, object]:
    return {"version": version, "id": w.results[version].checkpoint_id, "file": w.path(version, kind)}


def plan_json(capsys: pytest.CaptureFixture[str], root: str, *args: str) -> dict[str, object]:
    code, out, err = run_cli(capsys, "plan", root, "--operator", "0", "--partition", "0", *args, "--json")
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def test_plan_json_changelogs_only(
    capsys: pytest.CaptureFixture[str], local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    w = write_versions(local_storage, options, uploader, 4)
    doc = plan_json(capsys, local_storage.url, "--version", "4", "--id", w.results[4].checkpoint_id or "")
    assert doc == {"snapshot": None, "changelogs": [entry(w, v) for v in (1, 2, 3, 4)]}
    assert doc["changelogs"][0]["file"] == f"state/0/0/1_{w.results[1].checkpoint_id}.changelog"  # type: ignore[index]
    for c in doc["changelogs"]:  # type: ignore[attr-defined]
        assert (Path(local_storage.url) / c["file"]).is_file()


def test_plan_json_with_a_snapshot(
    capsys: pytest.CaptureFixture[str], local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    w = write_versions(local_storage, options, uploader, 5, snapshot_at=(3,))
    root = local_storage.url
    assert plan_json(capsys, root, "--version", "5", "--id", w.results[5].checkpoint_id or "") == {
        "snapshot": entry(w, 3, "zip"),
        "changelogs": [entry(w, 4), entry(w, 5)],
    }
    assert plan_json(capsys, root, "--version", "3", "--id", w.results[3].checkpoint_id or "") == {
        "snapshot": entry(w, 3, "zip"),
        "changelogs": [],
    }
    assert plan_json(capsys, root, "--version", "2", "--id", w.results[2].checkpoint_id or "") == {
        "snapshot": None,
        "changelogs": [entry(w, 1), entry(w, 2)],
    }
    assert plan_json(capsys, root, "--version", "0") == {
        "snapshot": None,
        "changelogs": [],
    }


def test_plan_of_a_named_store(
    capsys: pytest.CaptureFixture[str], local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    store = StoreId(2, 1, "left-keyToNumValues")
    w = write_versions(local_storage, options, uploader, 2, store=store)
    code, out, err = run_cli(
        capsys, "plan", local_storage.url, "--operator", "2", "--partition", "1", "--store", store.store_name,
        "--version", "2", "--id", w.results[2].checkpoint_id or "", "--json",
    )  # fmt: skip
    assert code == 0, err
    files = [c["file"] for c in json.loads(out)["changelogs"]]
    assert files == [f"state/2/1/left-keyToNumValues/{v}_{w.results[v].checkpoint_id}.changelog" for v in (1, 2)]


def test_plan_human_output(
    capsys: pytest.CaptureFixture[str], local_storage: Storage, options: StoreOptions, uploader: SnapshotUploader
) -> None:
    w = write_versions(local_storage, options, uploader, 3, snapshot_at=(2,))
    code, out, err = run_cli(
        capsys, "plan", local_storage.url, "--operator", "0", "--partition", "0", "--version", "3", "--id", w.results[3].checkpoint_id or ""
    )
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert w.results[3].checkpoint_id in lines[0] and local_storage.url in lines[0]
    assert lines[1].split() == ["snapshot", "2", w.results[2].checkpoint_id, w.path(2, "zip")]
    assert lines[2].split() == ["changelog", "3", w.results[3].checkpoint_id, w.path(3)]
    assert len(lines) == 3


@pytest.mark.s3
def test_plan_on_s3(capsys: pytest.CaptureFixture[str], s3_server: S3Server, options: StoreOptions, uploader: SnapshotUploader) -> None:
    settings = s3_settings(s3_server)
    st = S3Storage(f"s3://statebed-test/{uuid.uuid4().hex}", settings)
    w = write_versions(st, options, uploader, 3, snapshot_at=(2,))
    code, out, err = run_cli(
        capsys, "plan", st.url, "--s3-endpoint", settings.endpoint, "--s3-access-key", settings.access_key,
        "--s3-secret-key", settings.secret_key, "--operator", "0", "--partition", "0",
        "--version", "3", "--id", w.results[3].checkpoint_id or "", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out) == {"snapshot": entry(w, 2, "zip"), "changelogs": [entry(w, 3)]}
