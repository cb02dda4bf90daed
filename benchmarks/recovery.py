"""Recovery time from a snapshot + changelogs, V2 vs V1.

Build, per format, one checkpoint: version 1 = N keys (put in batches), committed with
`snapshot=True`; then L versions of U random updates each, committed with
`snapshot=False`; wait for the upload (`uploader.drain()`). So version L+1 loads as the
snapshot at version 1 + L changelogs in both formats (V2 plans through the lineage in
the last changelog's header, V1 by listing names).

Timed: a fresh provider (new local_dir: no open instance, no SST cache, new header
cache) doing `load(L+1, id)`: plan, fetch + unpack the snapshot, fetch + verify + replay
the changelogs. Runs alternate V1, V2, V1, V2, ...; medians reported. The OS page cache
is warm for the checkpoint files in both formats alike (a local checkpoint dir is read
from memory after the first run). After each load a sample of keys is checked against
the expected final values (outside the window). Goal: V2/V1 ≤ 1.1.

    python benchmarks/recovery.py [--quick] [--json] [--profile [cprofile|pyinstrument]]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib
import numpy as np

from statebed_store import CommitResult, SnapshotUploader, StateStoreProvider, Storage, StoreId, StoreOptions

NAME = "recovery"
GOAL = 1.1
FORMATS = ("v1", "v2")


def build(
    env: benchlib.Env, fmt: str, keys: list[bytes], values: list[bytes], batch: int, updates: list[tuple[list[int], bytes]]
) -> tuple[Storage, CommitResult, dict[str, Any]]:
    storage = env.storage(f"ckpt-{fmt}")
    up = SnapshotUploader()
    local = env.dir(f"build-{fmt}")
    p = StateStoreProvider(storage, StoreId(0, 0), StoreOptions(format=fmt, local_dir=local), uploader=up)
    t0 = time.perf_counter()
    txn = p.load(0)
    for i in range(0, len(keys), batch):
        txn.put_many(keys[i : i + batch], values[i : i + batch])
    r = txn.commit(snapshot=True)
    for idx, val in updates:
        txn = p.load(r.version, r.checkpoint_id)
        txn.put_many([keys[j] for j in idx], [val] * len(idx))
        r = txn.commit(snapshot=False)
    commit_s = time.perf_counter() - t0
    drained = up.drain(600)
    build_s = time.perf_counter() - t0
    p.close()
    env.remove(local)
    files = storage.list(StoreId(0, 0).dir)
    sst = storage.list(f"{StoreId(0, 0).dir}/SSTs")
    info = {
        "build_s": build_s,
        "commit_s": commit_s,
        "uploaded": up.uploaded,
        "upload_failed": up.failed,
        "drained": drained,
        "changelog_bytes": sum(f.size for f in files if f.name.endswith(".changelog")),
        "snapshot_zip_bytes": sum(f.size for f in files if f.name.endswith(".zip")),
        "sst_bytes": sum(f.size for f in sst),
        "sst_files": len(sst),
    }
    return storage, r, info


def recover(
    env: benchlib.Env,
    fmt: str,
    storage: Storage,
    target: CommitResult,
    check: tuple[list[bytes], list[bytes]],
    window: Any = benchlib.no_window,
) -> dict[str, Any]:
    local = env.dir(f"recover-{fmt}")  # fresh: nothing cached locally
    p = StateStoreProvider(storage, StoreId(0, 0), StoreOptions(format=fmt, local_dir=local), uploader=SnapshotUploader())
    with window():
        t0 = time.perf_counter()
        txn = p.load(target.version, target.checkpoint_id)
        elapsed = time.perf_counter() - t0
    keys, want = check
    ok = txn.get_many(keys) == want
    txn.abort()
    m = p.metrics
    p.close()
    env.remove(local)
    return {
        "s": elapsed,
        "verified": ok,
        "snapshot_loads": m.snapshot_loads,
        "changelogs_replayed": m.changelogs_replayed,
        "records_replayed": m.records_replayed,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = benchlib.parser(NAME, __doc__.split("\n\n")[0], profile=True).parse_args(argv)
    n, batch, n_logs, per_log, repeats = (20_000, 5_000, 3, 1_000, 2) if args.quick else (1_000_000, 100_000, 10, 50_000, 7)
    repeats = args.repeats or repeats
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, "recovery from snapshot + changelogs, V2 vs V1", args, env)
        rng = np.random.default_rng(args.seed)
        keys = benchlib.make_keys(n, rng)
        values = benchlib.make_values(n, rng)
        updates = [(rng.integers(0, n, per_log).tolist(), b"upd:%012d" % i) for i in range(n_logs)]
        final = list(values)
        for idx, val in updates:
            for j in idx:
                final[j] = val
        sample = sorted(set(rng.integers(0, n, 500).tolist()) | set(updates[-1][0][:100]))
        check = ([keys[i] for i in sample], [final[i] for i in sample])
        rep.params.update(
            keys=n, snapshot_version=1, changelogs=n_logs, updates_per_changelog=per_log, target_version=n_logs + 1, repeats=repeats
        )
        built = {f: build(env, f, keys, values, batch, updates) for f in FORMATS}
        runs: dict[str, list[dict[str, Any]]] = {f: [] for f in FORMATS}
        for i in range(repeats):
            for f in FORMATS if i % 2 == 0 else FORMATS[::-1]:  # V1, V2, V2, V1, V1, V2, ...
                storage, target, _ = built[f]
                runs[f].append(recover(env, f, storage, target, check))
        med = {f: benchlib.median([r["s"] for r in runs[f]]) for f in FORMATS}
        rows = []
        for f in FORMATS:
            secs = [r["s"] for r in runs[f]]
            r0 = runs[f][0]
            rows.append(
                [
                    f.upper(),
                    med[f],
                    min(secs),
                    max(secs),
                    r0["snapshot_loads"],
                    r0["changelogs_replayed"],
                    r0["records_replayed"],
                    n / med[f],
                ]
            )
        rep.table(
            "load(last version) on a fresh provider, seconds",
            ["format", "median", "min", "max", "snapshots", "changelogs", "records replayed", "keys/s"],
            rows,
        )
        rep.table(
            "checkpoint built",
            ["format", "build s", "uploads", "changelog bytes", "zip bytes", "SST bytes", "SSTs"],
            [
                [f.upper(), b["build_s"], b["uploaded"], b["changelog_bytes"], b["snapshot_zip_bytes"], b["sst_bytes"], b["sst_files"]]
                for f, (_, _, b) in built.items()
            ],
        )
        rep.ratio("recovery V2/V1 (median)", med["v2"] / med["v1"], "<=", GOAL, baseline="V1 median")
        rep.ratio(
            "recovery V2/V1 (min)",
            min(r["s"] for r in runs["v2"]) / min(r["s"] for r in runs["v1"]),
            None,
            None,
            baseline="V1 min",
        )
        rep.headline = f"{n:,} keys + {n_logs}x{per_log:,} updates: V1 {med['v1']:.3f} s, V2 {med['v2']:.3f} s (median of {repeats})"
        rep.metrics.update(
            median_s=med,
            runs_s={f: [round(r["s"], 4) for r in runs[f]] for f in FORMATS},
            verified=all(r["verified"] for f in FORMATS for r in runs[f]),
            build={f: b for f, (_, _, b) in built.items()},
            replay={f: {k: runs[f][0][k] for k in ("snapshot_loads", "changelogs_replayed", "records_replayed")} for f in FORMATS},
        )
        rep.notes.append("checkpoint files are in the OS page cache after the build (both formats alike); not dropped")
        if getattr(args, "profile", None):
            prof = benchlib.Profile(args.profile, "one V2 recovery load")
            storage, target, _ = built["v2"]
            recover(env, "v2", storage, target, check, window=prof.window)
            rep.profile = prof.summary(
                groups={
                    "plan_load": ("plan.py:", "(plan_load)"),
                    "StoreFiles (LIST)": ("store_files.py:", "(__init__)"),
                    "_unpack_snapshot": "_unpack_snapshot",
                    "parse_changelog (LZ4 + header)": "parse_changelog",
                    "read_verified (read + CRC32C)": "read_verified",
                    "RocksEngine.apply": ("engine.py:", "(apply)"),
                    "Changelog.records": ("changelog.py:", "(records)"),
                    "Rdict.write": "'write' of 'builtins.Rdict'",
                }
            )
        return rep.finish()


if __name__ == "__main__":
    main()
