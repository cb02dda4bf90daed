"""corrupt-row on Spark's own store (issue 40): one value changed inside the changelog the next
load replays, the file re-encoded so that only row checksums can notice.

Without Spark: every file-level check still passes after the change (LZ4 blocks, Spark's `.crc`
sidecar, Hadoop's hidden `.crc`), the params and formats are checked. On real Spark 4.3 (slow,
local[2]): the example experiments, with row checksums off (the positive control: Spark serves
the changed value and statebed's state check finds it) and on (Spark's replay refuses the row,
the query fails, and statebed's lineage check names the file and the same key)."""

from __future__ import annotations

import shutil
import zlib
from pathlib import Path
from typing import Any

import pytest
from damage_runs import damage_proof, run_example

from statebed_base.errors import UsageError
from statebed_chaos.faults import FaultSpec, NotApplicable, Trigger, fault_class
from statebed_store import StoreFiles, open_storage
from statebed_store.checksum import check_sidecar
from statebed_store.formats import FORMATS, get_format
from statebed_store.naming import CHANGELOG, StoreId, hadoop_crc_name, sidecar_name


def fault(**params: Any) -> Any:
    return fault_class("corrupt-row")(FaultSpec("c", "corrupt-row", Trigger(3, 0.0, True), None, params))


def _hadoop_crc_holds(file: Path) -> bool:
    crc = (file.parent / hadoop_crc_name(file.name)).read_bytes()
    data = file.read_bytes()
    want = b"".join(zlib.crc32(data[i : i + 512]).to_bytes(4, "big") for i in range(0, len(data), 512))
    return crc[:8] == b"crc\x00\x00\x00\x02\x00" and crc[8:] == want


def test_the_changed_changelog_passes_every_file_level_check(native: dict[str, Path], tmp_path: Path) -> None:
    ckpt = shutil.copytree(native["4.3.0"] / "agg", tmp_path / "agg")
    for f in (ckpt / "state" / "0" / "0").glob("*zip*"):  # no snapshot: the load replays the changelogs
        f.unlink()
    storage = open_storage(ckpt)
    f = fault()
    path = f.target(storage)
    before = storage.read(path)
    after, facts = f.damage_file(storage, path, before)
    storage.write(path, after)
    assert after != before and facts["row_checksums"] is False
    main = ckpt / path
    check_sidecar(main.read_bytes(), (main.parent / sidecar_name(main.name)).read_bytes(), file=str(main))
    assert _hadoop_crc_holds(main) and _hadoop_crc_holds(main.parent / sidecar_name(main.name))
    files = StoreFiles(storage, StoreId(0, 0))
    (ref,) = [r for r in files.refs(CHANGELOG) if files.path(r, CHANGELOG) == path]
    files.verified_changelog_header(ref)  # LZ4 blocks, sidecar and every record's framing


def test_params_and_formats_are_checked() -> None:
    with pytest.raises(UsageError, match="has no damage param"):
        fault(damage="flip")
    assert fault().restarts_driver is True and fault(restart=False).restarts_driver is False
    for name in FORMATS:
        if name.startswith("native-"):
            fault().check(get_format(name), "local", "s3")
        else:
            with pytest.raises(NotApplicable, match="corrupt-row does not apply"):
                fault().check(get_format(name), "local", "local")


@pytest.mark.slow
def test_without_row_checksums_spark_serves_the_changed_value_and_the_state_check_finds_it(tmp_path: Path) -> None:
    res = run_example(tmp_path, "corrupt-row-count-native-v2")
    proof = damage_proof(res)
    assert proof["damaged"]["row_checksums"] is False
    assert proof["spark"]["outcome"] == "no-failure-logged", proof["spark"]
    assert res.valid is False
    key = int.from_bytes(bytes.fromhex(proof["damaged"]["key"])[9:17], "little")  # the UnsafeRow's one long
    assert [a["kind"] for a in res.anomalies if a["check"] == "lineage"] == []  # no file-level check saw it
    assert any(a["kind"] == "state-mismatch" and key in a["keys"] for a in res.anomalies), res.anomalies


@pytest.mark.slow
def test_with_row_checksums_spark_refuses_the_row_and_the_lineage_check_names_file_and_key(tmp_path: Path) -> None:
    res = run_example(tmp_path, "corrupt-row-count-native-v2-checksums")
    proof = damage_proof(res)
    assert proof["damaged"]["row_checksums"] is True
    assert proof["spark"]["outcome"] == "query-failed", proof["spark"]
    assert any("Row checksum verification failed" in line for line in proof["spark"]["log"]), proof["spark"]
    assert res.valid is False
    shown, key = proof["damaged"]["shown"], proof["damaged"]["key"]
    assert any(
        a["kind"] == "unreadable-file" and shown in a["files"] and f"row checksum mismatch for key 0x{key}" in a["detail"]
        for a in res.anomalies
    ), res.anomalies
