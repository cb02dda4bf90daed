"""plan / ls / dump on checkpoints written by Spark 4.1.4 and 4.3.0 themselves (RocksDB, format V2).

Expectations are computed from the fixture files directly (commit log JSON, directory
listings, changelog records), not through statebed's own planning code.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from checkpoint_helpers import run_cli
from native_fixtures import (
    JOIN_STORES,
    QUERIES,
    SPARK_VERSIONS,
    decode_long,
    decode_string_key,
    expected,
)

from statebed_store.changelog import DELETE, parse_changelog
from statebed_store.snapshot import read_zip

Capsys = pytest.CaptureFixture[str]


@dataclass(frozen=True)
class Store:
    operator: int
    partition: int
    name: str  # "default" or a join store name

    @property
    def dir(self) -> str:
        base = f"state/{self.operator}/{self.partition}"
        return base if self.name == "default" else f"{base}/{self.name}"

    def args(self) -> list[str]:
        return ["--operator", str(self.operator), "--partition", str(self.partition), "--store", self.name]


def committed(root: Path, query: str) -> dict[Store, dict[int, str]]:
    """Per store: state version -> committed id, read from commits/<batch> JSON."""
    out: dict[Store, dict[int, str]] = {}
    for f in (root / query / "commits").iterdir():
        if not f.name.isdigit():
            continue
        first, body = f.read_text().split("\n", 1)
        assert first == "v2"
        for op, parts in json.loads(body)["stateUniqueIds"].items():
            for p, ids in enumerate(parts):
                names = JOIN_STORES if query == "join" else ("default",)
                assert len(ids) == len(names)
                for name, cid in zip(names, ids):
                    out.setdefault(Store(int(op), p, name), {})[int(f.name) + 1] = cid
    return out


def run_json(capsys: Capsys, *argv: str) -> Any:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


def dump_bytes(capsys: Capsys, root: Path, store: Store, *extra: str) -> dict[bytes, bytes]:
    code, out, err = run_cli(capsys, "dump", str(root), *store.args(), *extra)
    assert code == 0, err
    state = {}
    for line in out.splitlines():
        doc = json.loads(line)
        key = base64.b64decode(doc["key_b64"]) if "key_b64" in doc else doc["key"].encode()
        value = base64.b64decode(doc["value_b64"]) if "value_b64" in doc else doc["value"].encode()
        assert key not in state
        state[key] = value
    assert list(state) == sorted(state), "dump must be in key order"
    return state


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
@pytest.mark.parametrize("query", QUERIES)
def test_plan_every_committed_version(capsys: Capsys, native: dict[str, Path], spark: str, query: str) -> None:
    root = native[spark] / query
    stores = committed(native[spark], query)
    assert len(stores) == {"agg": 3, "dedup_agg": 6, "join": 12}[query]
    planned = 0
    for store, ids in sorted(stores.items(), key=lambda s: (s[0].operator, s[0].partition, s[0].name)):
        for version, cid in sorted(ids.items()):
            # expected: the newest committed snapshot at or below `version`, then the committed changelogs after it
            snap = max((u for u in ids if u <= version and (root / store.dir / f"{u}_{ids[u]}.zip").is_file()), default=None)
            entry = lambda u, kind, ids=ids, store=store: {"version": u, "id": ids[u], "file": f"{store.dir}/{u}_{ids[u]}.{kind}"}  # noqa: E731
            want = {
                "snapshot": entry(snap, "zip") if snap else None,
                "changelogs": [entry(u, "changelog") for u in range((snap or 0) + 1, version + 1)],
            }
            doc = run_json(capsys, "plan", str(root), *store.args(), "--version", str(version), "--id", cid, "--json")
            assert doc == want, (store, version)
            # every named file exists, and each changelog's own lineage says its base is the entry before it
            prev = (snap, ids[snap]) if snap else None
            for c in doc["changelogs"]:
                path = root / c["file"]
                lineage = parse_changelog(path.read_bytes(), file=str(path), version=c["version"]).lineage
                assert lineage is not None
                assert ((lineage[-1].version, lineage[-1].id) if lineage else None) == prev, c["file"]
                prev = (c["version"], c["id"])
            planned += 1
    assert planned == sum(len(ids) for ids in stores.values())


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
@pytest.mark.parametrize("query", QUERIES)
def test_ls_lists_every_store_and_committed_id(capsys: Capsys, native: dict[str, Path], spark: str, query: str) -> None:
    root = native[spark] / query
    stores = committed(native[spark], query)
    doc = run_json(capsys, "ls", str(root), "--json")
    batches = expected(native[spark], query)["batches"]
    assert (doc["checkpoint"], doc["format"], doc["commits"]) == (str(root), "v2", {"count": batches, "latestBatch": batches - 1})
    listed = {Store(s["operator"], s["partition"], s["store"]): s for s in doc["stores"]}
    assert set(listed) == set(stores)
    for store, s in listed.items():
        assert s["dir"] == store.dir
        ids = stores[store]
        assert [v["version"] for v in s["versions"]] == sorted(ids) == list(range(1, batches + 1))
        for v in s["versions"]:
            (e,) = v["ids"]  # Spark's hidden .X.crc files and visible X.crc sidecars are not versions
            u = v["version"]
            assert e["id"] == ids[u] and e["committed"] and e["changelog"] and e["changelogFormat"] == 3 and "error" not in e
            assert e["snapshot"] == (root / store.dir / f"{u}_{ids[u]}.zip").is_file()
            assert [(x["version"], x["id"]) for x in e["lineage"]][-1:] == ([(u - 1, ids[u - 1])] if u > 1 else [])


def replayed(root: Path, store: Store, ids: dict[int, str], version: int) -> dict[bytes, bytes]:
    """The state at `version` by replaying Spark's committed changelogs 1..version (the oracle)."""
    state: dict[bytes, bytes] = {}
    for u in range(1, version + 1):
        path = root / store.dir / f"{u}_{ids[u]}.changelog"
        for op, key, value in parse_changelog(path.read_bytes(), file=str(path), version=u).records():
            if op == DELETE:
                state.pop(key, None)
            else:
                assert value is not None
                state[key] = value
    return state


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_dump_every_agg_version_equals_changelog_replay(capsys: Capsys, native: dict[str, Path], spark: str) -> None:
    root = native[spark] / "agg"
    for store, ids in committed(native[spark], "agg").items():
        for version, cid in ids.items():
            assert dump_bytes(capsys, root, store, "--version", str(version), "--id", cid) == replayed(root, store, ids, version)


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_dump_agg_decodes_to_the_expected_counts(capsys: Capsys, native: dict[str, Path], spark: str) -> None:
    root = native[spark] / "agg"
    totals: Counter[str] = Counter()
    seen: set[str] = set()
    for store in sorted(committed(native[spark], "agg"), key=lambda s: s.partition):
        state = dump_bytes(capsys, root, store)  # latest committed version
        keys = {decode_string_key(k): decode_long(v) for k, v in state.items()}
        assert not seen & set(keys), "a key lives in one partition only"
        seen |= set(keys)
        totals.update(keys)
    assert dict(totals) == expected(native[spark], "agg")["counts"]


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_dump_dedup_agg_both_operators(capsys: Capsys, native: dict[str, Path], spark: str) -> None:
    root = native[spark] / "dedup_agg"
    want = expected(native[spark], "dedup_agg")
    counts: Counter[str] = Counter()
    ids: list[int] = []
    for store in committed(native[spark], "dedup_agg"):
        state = dump_bytes(capsys, root, store)
        if store.operator == 0:  # groupBy(key).count()
            counts.update({decode_string_key(k): decode_long(v) for k, v in state.items()})
        else:  # dropDuplicates(id): the key row holds the id
            ids.extend(decode_long(k) for k in state)
    assert dict(counts) == want["counts"]
    assert sorted(ids) == want["distinct_ids"]


@pytest.mark.parametrize("spark", SPARK_VERSIONS)
def test_dump_join_key_to_num_values(capsys: Capsys, native: dict[str, Path], spark: str) -> None:
    root = native[spark] / "join"
    want = expected(native[spark], "join")
    got: dict[str, Counter[str]] = {"left": Counter(), "right": Counter()}
    for store in committed(native[spark], "join"):
        if store.name.endswith("keyToNumValues"):
            state = dump_bytes(capsys, root, store)
            got[store.name.split("-")[0]].update({decode_string_key(k): decode_long(v) for k, v in state.items()})
    assert dict(got["left"]) == want["left_rows_per_key"]
    assert dict(got["right"]) == want["right_rows_per_key"]


def test_missing_sst_in_a_spark_checkpoint(capsys: Capsys, native: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "agg"
    shutil.copytree(native["4.3.0"] / "agg", root)
    store, ids = next((s, i) for s, i in committed(tmp_path, "agg").items() if s.partition == 0)
    zip_path = root / store.dir / f"10_{ids[10]}.zip"
    meta, _ = read_zip(zip_path.read_bytes(), file=str(zip_path))
    sst = root / store.dir / "SSTs" / meta.sst_files[0].dfs
    before = dump_bytes(capsys, root, store)
    sst.unlink()
    code, out, err = run_cli(capsys, "plan", str(root), *store.args(), "--version", "10", "--id", ids[10])
    assert code == 0 and f"snapshot {10:>8}" not in out and f"changelog {10:>8}" in out  # planned around, as loads do
    assert str(sst) in err and str(zip_path) in err
    # the changelogs still rebuild the exact state
    assert dump_bytes(capsys, root, store) == before == replayed(root, store, ids, 10)


def test_unsafe_row_layout_of_the_agg_values(native: dict[str, Path]) -> None:
    """Check the layout `decode_*` relies on: a version byte, then an UnsafeRow; the count at row offset 8."""
    path = next((native["4.1.4"] / "agg/state/0/1").glob("1_*.changelog"))
    records = list(parse_changelog(path.read_bytes(), file=str(path)).records())
    assert records
    for _, key, value in records:
        assert value is not None and len(key) == 25 and len(value) == 17
        assert key[0] == 0 and value[0] == 0  # RocksDB state encoder version byte
        assert decode_string_key(key) in {"k0", "k1", "k2", "k3", "k4", "k5"}
        assert value[1:9] == bytes(8) and int.from_bytes(value[9:17], "little") == decode_long(value) > 0
        # little-endian int64 at byte 8 of the *stored* bytes would be wrong: it straddles the version byte
        assert int.from_bytes(value[8:16], "little") != decode_long(value)
