"""Small helpers to write and read checkpoints through the store's public API in tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from statebed_store import CheckpointRef, CommitResult, StateStoreProvider, StoreFiles
from statebed_store.naming import StoreId


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


def run_versions(provider: StateStoreProvider, n: int, base: CheckpointRef = CheckpointRef(0), tag: bytes = b"") -> tuple[CheckpointRef, dict[bytes, bytes]]:
    """Commit `n` versions on top of `base`, each writing one new key and updating `counter`."""
    state = state_at(provider, base) if base.version else {}
    ref = base
    for _ in range(n):
        v = ref.version + 1
        puts = {b"key-%04d" % v: b"v%d%s" % (v, tag), b"counter": b"%d" % v}
        ref = ref_of(commit(provider, ref, puts))
        state.update(puts)
    return ref, state


def names(storage_files: StoreFiles) -> set[str]:
    return {n.name for n in storage_files.files}


def listing(provider: StateStoreProvider) -> StoreFiles:
    return StoreFiles(provider.storage, provider.store)


__all__ = ["ref_of", "commit", "state_at", "run_versions", "names", "listing", "StoreId"]
