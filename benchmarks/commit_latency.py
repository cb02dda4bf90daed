"""Changelog commit latency, V2 vs V1, on the same workload.

Two providers (format "v1" and "v2"), each on its own checkpoint dir, run the same
sequence of small batches (R random updates over a K-key space per commit), interleaved
commit by commit with the order alternating, so disk and CPU drift hit both alike. Only
`commit()` is timed: changelog encode + LZ4 + CRC32C sidecar + fsync'd publish (V2:
create-only link, lineage in the header; V1: overwrite by rename).

Snapshots: the default policy (every `snapshot_interval` = 10 versions) runs in both
formats at the same versions, so state and lineage length (≤ 10 in V2) are as in normal
operation — `snapshot=False` forever would make the V2 lineage, and its header, grow
without bound. Commits that queue a snapshot (synchronous memtable flush + local
checkpoint) are EXCLUDED from the changelog percentiles and reported on their own line;
the background upload is drained after every commit, outside the timed window, so no
upload overlaps a measured commit. Goal: V2/V1 ≤ 1.05 (p50 and p99).

    python benchmarks/commit_latency.py [--quick] [--json]
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

from statebed_store import SnapshotUploader, StateStoreProvider, StoreId, StoreOptions
from statebed_store.changelog import PUT, Chunk, as_binary_array, encode_changelog
from statebed_store.lineage import CheckpointRef
from statebed_store.naming import new_checkpoint_id

NAME = "commit_latency"
GOAL = 1.05
FORMATS = ("v1", "v2")


def encode_cost(keys: list[bytes], values: list[bytes], lineage_len: int, iters: int) -> dict[str, float]:
    """CPU-only: µs to encode one changelog in each format (no I/O)."""
    chunks = [Chunk(PUT, as_binary_array(keys), as_binary_array(values))]
    lineage = tuple(CheckpointRef(v, new_checkpoint_id()) for v in range(1, lineage_len + 1))
    out = {}
    for fmt, fv, lin in (("v1", 1, None), ("v2", 3, lineage)):
        t0 = time.perf_counter()
        for _ in range(iters):
            encode_changelog(fv, lin, chunks)
        out[fmt] = (time.perf_counter() - t0) / iters * 1e6
    return out


def bootstrap_ratio_ci(num: list[float], den: list[float], q: float, seed: int, n: int = 1000) -> tuple[float, float]:
    """95% bootstrap interval of percentile_q(num) / percentile_q(den): is a difference noise?"""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(num), np.asarray(den)
    ra = np.percentile(a[rng.integers(0, len(a), (n, len(a)))], q, axis=1)
    rb = np.percentile(b[rng.integers(0, len(b), (n, len(b)))], q, axis=1)
    lo, hi = np.percentile(ra / rb, [2.5, 97.5])
    return float(lo), float(hi)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = benchlib.parser(NAME, __doc__.split("\n\n")[0]).parse_args(argv)
    space, per_commit, commits, warmup = (5_000, 100, 60, 5) if args.quick else (100_000, 1_000, 1_500, 20)
    commits = args.repeats or commits
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, "changelog commit latency V2 / V1", args, env)
        rng = np.random.default_rng(args.seed)
        keys = benchlib.make_keys(space, rng)
        rep.params.update(
            key_space=space,
            records_per_commit=per_commit,
            commits_per_format=commits,
            warmup_excluded=warmup,
            snapshot_interval=10,
            snapshot_commits="excluded (reported apart)",
        )
        prov: dict[str, StateStoreProvider] = {}
        up: dict[str, SnapshotUploader] = {}
        storages = {}
        at: dict[str, tuple[int, str | None]] = {}
        for f in FORMATS:
            up[f] = SnapshotUploader()
            storages[f] = env.storage(f)
            prov[f] = StateStoreProvider(
                storages[f], StoreId(0, 0), StoreOptions(format=f, local_dir=env.dir(f"local-{f}"), snapshot_interval=10), uploader=up[f]
            )
            at[f] = (0, None)
        lat: dict[str, list[float]] = {f: [] for f in FORMATS}
        snap_lat: dict[str, list[float]] = {f: [] for f in FORMATS}
        txn_lat: dict[str, list[float]] = {f: [] for f in FORMATS}
        for c in range(commits + warmup):
            idx = rng.integers(0, space, per_commit).tolist()
            ks = [keys[i] for i in idx]
            vs = [b"val:%012d" % (c * per_commit + j) for j in range(per_commit)]
            for f in FORMATS if c % 2 else FORMATS[::-1]:
                p = prov[f]
                queued = p.metrics.snapshots_queued
                t0 = time.perf_counter()
                txn = p.load(*at[f])
                txn.put_many(ks, vs)
                t1 = time.perf_counter()
                r = txn.commit()
                t2 = time.perf_counter()
                at[f] = (r.version, r.checkpoint_id)
                if c >= warmup:
                    (snap_lat if p.metrics.snapshots_queued > queued else lat)[f].append(t2 - t1)
                    txn_lat[f].append(t2 - t0)
                up[f].drain(120)
        ms = lambda xs, q: benchlib.pct(xs, q) * 1000  # noqa: E731
        rows = []
        stats: dict[str, dict[str, float]] = {}
        for f in FORMATS:
            st = stats[f] = {
                "n": len(lat[f]),
                "p50_ms": ms(lat[f], 50),
                "p90_ms": ms(lat[f], 90),
                "p99_ms": ms(lat[f], 99),
                "mean_ms": float(np.mean(lat[f]) * 1000),
                "max_ms": float(np.max(lat[f]) * 1000),
                "snapshot_commits": len(snap_lat[f]),
                "snapshot_commit_p50_ms": ms(snap_lat[f], 50) if snap_lat[f] else float("nan"),
                "txn_p50_ms": ms(txn_lat[f], 50),
            }
            rows.append(
                [
                    f.upper(),
                    st["n"],
                    st["p50_ms"],
                    st["p90_ms"],
                    st["p99_ms"],
                    st["mean_ms"],
                    st["max_ms"],
                    st["snapshot_commits"],
                    st["snapshot_commit_p50_ms"],
                ]
            )
        rep.table(
            "commit() latency, ms (changelog-only commits; snapshot commits apart)",
            ["format", "commits", "p50", "p90", "p99", "mean", "max", "snap commits", "snap p50"],
            rows,
        )
        # file sizes: what V2 adds to each changelog (lineage header)
        sizes = {}
        for f in FORMATS:
            infos = [i for i in storages[f].list(prov[f].store.dir) if i.name.endswith(".changelog")]
            sizes[f] = float(np.mean([i.size for i in infos])) if infos else float("nan")
        enc = encode_cost(ks, vs, 9, 50 if args.quick else 300)
        rep.table(
            "per changelog",
            ["format", "mean file bytes", "encode µs (CPU only)"],
            [[f.upper(), sizes[f], enc[f]] for f in FORMATS],
        )
        ci = {q: bootstrap_ratio_ci(lat["v2"], lat["v1"], q, args.seed) for q in (50, 99)}
        rep.ratio(
            "p50 V2/V1",
            stats["v2"]["p50_ms"] / stats["v1"]["p50_ms"],
            "<=",
            GOAL,
            baseline="V1 p50",
            note=f"95% bootstrap CI [{ci[50][0]:.3f}, {ci[50][1]:.3f}]",
        )
        rep.ratio(
            "p99 V2/V1",
            stats["v2"]["p99_ms"] / stats["v1"]["p99_ms"],
            "<=",
            GOAL,
            baseline="V1 p99",
            note=f"95% bootstrap CI [{ci[99][0]:.3f}, {ci[99][1]:.3f}] (tail = fsync noise)",
        )
        rep.ratio("mean V2/V1", stats["v2"]["mean_ms"] / stats["v1"]["mean_ms"], None, None, baseline="V1 mean")
        rep.ratio(
            "snapshot-commit p50 V2/V1",
            stats["v2"]["snapshot_commit_p50_ms"] / stats["v1"]["snapshot_commit_p50_ms"],
            None,
            None,
            baseline="V1 snapshot commits",
        )
        rep.headline = (
            f"{per_commit} records/commit: p50 V1 {stats['v1']['p50_ms']:.2f} ms, V2 {stats['v2']['p50_ms']:.2f} ms; "
            f"p99 V1 {stats['v1']['p99_ms']:.2f} ms, V2 {stats['v2']['p99_ms']:.2f} ms"
        )
        rep.metrics.update(ratio_ci95={f"p{q}": list(v) for q, v in ci.items()})
        rep.metrics.update(per_format=stats, changelog_bytes=sizes, encode_us=enc)
        rep.notes.append(
            "timed: commit() only (load + put_many excluded); snapshot commits excluded from p50/p99 and shown apart; "
            "uploads drained between commits outside the window"
        )
        for f in FORMATS:
            prov[f].close()
        return rep.finish()


if __name__ == "__main__":
    main()
