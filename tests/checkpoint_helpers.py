"""Writing small real checkpoints with the store, and reading them back in fresh instances."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statebed_store import (
    CheckpointRef,
    CommitLog,
    CommitResult,
    SnapshotUploader,
    StateStoreProvider,
    Storage,
    StoreId,
    StoreOptions,
)
from statebed_store.changelog import parse_changelog
from statebed_store.checksum import make_sidecar
from statebed_store.lz4block import compress, decompress
from statebed_store.naming import StateFileName

STORE = StoreId(0, 0)


@dataclass
class Written:
    """What `write_versions` committed: per version its result and the exact state after it."""

    storage: Storage
    store: StoreId
    results: dict[int, CommitResult] = field(default_factory=dict)
    states: dict[int, dict[bytes, bytes]] = field(default_factory=dict)

    def ref(self, version: int) -> CheckpointRef:
        return CheckpointRef(version, self.results[version].checkpoint_id)

    def path(self, version: int, kind: str = "changelog") -> str:
        """Checkpoint-relative path of one of the written files."""
        return self.store.path(StateFileName(version, self.results[version].checkpoint_id, kind).name)  # type: ignore[arg-type]

    def display(self, version: int, kind: str = "changelog") -> str:
        return self.storage.display(self.path(version, kind))


def batch_ops(version: int, partition: int = 0) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """Puts and deletes of the batch that commits `version` (deterministic, with overwrites and deletes).
    Partitions other than 0 get their own keys (`p<n>/...`): a keyed operator never puts one key in two."""
    keys = [b"count", b"k%d" % version, b"shared"]
    if partition:
        keys = [b"p%d/%s" % (partition, k) for k in keys]
    values = [b"%d" % version, b"value-%d" % version, b"shared-%d" % version]
    deletes = [b"k%d" % (version - 2)] if version >= 3 else []
    if partition:
        deletes = [b"p%d/%s" % (partition, k) for k in deletes]
    return keys, values, deletes


def write_versions(
    storage: Storage,
    options: StoreOptions,
    uploader: SnapshotUploader,
    versions: int = 4,
    *,
    store: StoreId = STORE,
    snapshot_at: tuple[int, ...] = (),
    commit_log: bool = False,
) -> Written:
    """Commit versions 1..`versions` through one provider; snapshots only at `snapshot_at` (uploaded)."""
    out = Written(storage, store)
    state: dict[bytes, bytes] = {}
    log = CommitLog(storage)
    with StateStoreProvider(storage, store, options, uploader=uploader) as provider:
        base: str | None = None
        for v in range(1, versions + 1):
            keys, values, deletes = batch_ops(v, store.partition)
            with provider.load(v - 1, base) as txn:
                txn.put_many(keys, values)
                if deletes:
                    txn.delete_many(deletes)
                res = txn.commit(snapshot=v in snapshot_at)
            assert (res.version, res.base_id) == (v, base)
            state.update(zip(keys, values))
            for k in deletes:
                state.pop(k, None)
            out.results[v] = res
            out.states[v] = dict(state)
            base = res.checkpoint_id
            if commit_log:
                log.write(v - 1, {store.operator: [[res.checkpoint_id]]})
        assert uploader.drain(30), "snapshot uploads did not finish"
    assert uploader.failed == 0
    return out


def ref_of(result: CommitResult) -> CheckpointRef:
    return CheckpointRef(result.version, result.checkpoint_id)


def commit(
    provider: StateStoreProvider,
    base: CheckpointRef,
    puts: Mapping[bytes, bytes] | None = None,
    deletes: Iterable[bytes] = (),
    snapshot: bool | None = None,
    task: str = "",
) -> CommitResult:
    """Load `base`, apply puts then deletes, commit."""
    with provider.load(base.version, base.id, task_info=task) as txn:
        if puts:
            txn.put_many(list(puts), list(puts.values()))
        dels = list(deletes)
        if dels:
            txn.delete_many(dels)
        return txn.commit(snapshot=snapshot)


def state_at(provider: StateStoreProvider, ref: CheckpointRef) -> dict[bytes, bytes]:
    """Everything stored at `ref`, read through a load (the transaction is aborted)."""
    txn = provider.load(ref.version, ref.id)
    try:
        return dict(txn.items())
    finally:
        txn.abort()


def run_versions(
    provider: StateStoreProvider, n: int, base: CheckpointRef = CheckpointRef(0), tag: bytes = b""
) -> tuple[CheckpointRef, dict[bytes, bytes]]:
    """Commit `n` versions on top of `base`, each writing one new key and updating `counter`."""
    state = state_at(provider, base) if base.version else {}
    ref = base
    for _ in range(n):
        v = ref.version + 1
        puts = {b"key-%04d" % v: b"v%d%s" % (v, tag), b"counter": b"%d" % v}
        ref = ref_of(commit(provider, ref, puts))
        state.update(puts)
    return ref, state


def fresh_options(options: StoreOptions, tmp_path: Path) -> StoreOptions:
    """Options with a local directory nobody used: no cached instance, no cached SSTs."""
    return options.with_(local_dir=tmp_path / f"reader-{uuid.uuid4().hex[:8]}")


def load_state(
    storage: Storage, options: StoreOptions, tmp_path: Path, version: int, checkpoint_id: str | None, *, store: StoreId = STORE
) -> tuple[dict[bytes, bytes], StateStoreProvider]:
    """The state of `(version, id)` rebuilt from storage alone; returns it and the (closed) provider."""
    provider = StateStoreProvider(storage, store, fresh_options(options, tmp_path), uploader=SnapshotUploader())
    try:
        return state_at(provider, CheckpointRef(version, checkpoint_id)), provider
    finally:
        provider.close()


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    """Run `statebed ARGV` in-process: (exit code, stdout, stderr).

    argparse errors exit via SystemExit (code 2), StatebedErrors return 2: both are exit
    codes a shell sees. The `statebed` logger is restored afterwards (the CLI installs a
    stderr handler and stops propagation), so other tests' log capture is unaffected.
    """
    from statebed_cli.main import main

    logger = logging.getLogger("statebed")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    try:
        try:
            code = main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    finally:
        logger.handlers[:] = saved[0]
        logger.propagate, logger.level = saved[1], saved[2]
    out, err = capsys.readouterr()
    return code, out, err


def rewrite_changelog(storage: Storage, path: str, lineage_json: str) -> None:
    """Replace a changelog's lineage keeping its records, with a matching sidecar (so only the lineage is wrong)."""
    data = storage.read(path)
    payload, _ = decompress(data, file=path)
    offset = parse_changelog(data, file=path).header.records_offset
    raw = lineage_json.encode()
    new = compress(b"\x00\x02v3" + len(raw).to_bytes(2, "big") + raw + payload[offset:])
    storage.write(path, new)
    storage.write(path + ".crc", make_sidecar(new))


def tree_hash(root: Path) -> str:
    """Every file's path and bytes under `root` (hidden `.crc` files included): "nothing changed" as one value."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()
