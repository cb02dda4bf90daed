"""Cleanup storage requests vs length of history (10, 100, 1000 versions; retain the last 10).

Per history length H: a V2 store commits H versions (small batches; the default policy
queues a snapshot every 10 versions; every upload is drained so the history really has a
snapshot every 10 versions). Requests of `cleanup_store` are counted with a
CountingStorage (a batched delete of up to 1000 paths counts as one request, as an S3
DeleteObjects call), plus what it does not show: entries returned by LISTs (an S3 LIST
page holds 1000), paths deleted, bytes read.

(b) first cleanup: the first ever cleanup over the whole history (fresh header cache).
    Allowed to grow with what it deletes; deletes are reported apart.
(a) steady state: after (b), S times: commit one more version, then cleanup again with
    the header cache kept (a long-lived cleanup owner). The per-cleanup cost in normal
    operation; S spans snapshot boundaries. Goal: flat in H — max requests per steady
    cleanup at the longest history / at the shortest ≤ 1.0.
Also one steady cleanup with a cold header cache (a fresh process, e.g. a CLI cron).

SSTs: cleanup keeps unreferenced SSTs younger than `sst_orphan_grace_s`; the benchmark
passes `now` = wall clock + grace + 1 s (after draining every upload) so the history is
treated as old and its unreferenced SSTs are deleted too. After the cleanups, the oldest
and newest retained versions are loaded from a fresh provider (sanity check).

    python benchmarks/cleanup_requests.py [--quick] [--json]
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

from statebed_store import (
    HeaderCache,
    SnapshotUploader,
    StateStoreProvider,
    StoreId,
    StoreOptions,
    cleanup_store,
)
from statebed_store.lineage import CheckpointRef

NAME = "cleanup_requests"
RETAIN = 10
SNAPSHOT_INTERVAL = 10
STORE = StoreId(0, 0)


class History:
    """One store committing versions on `inner` storage (uncounted)."""

    def __init__(self, env: benchlib.Env, name: str, rng: np.random.Generator, per_version: int) -> None:
        self.env = env
        self.storage = env.storage(name)
        self.counting = benchlib.DetailedCountingStorage(self.storage)
        self.up = SnapshotUploader()
        self.opts = StoreOptions(format="v2", local_dir=env.dir(f"local-{name}"), snapshot_interval=SNAPSHOT_INTERVAL)
        self.p = StateStoreProvider(self.storage, STORE, self.opts, uploader=self.up)
        self.rng = rng
        self.per_version = per_version
        self.refs: list[CheckpointRef] = []
        self.at: tuple[int, str | None] = (0, None)

    def commit(self) -> None:
        txn = self.p.load(*self.at)
        idx = self.rng.integers(0, 10_000, self.per_version).tolist()
        v = self.at[0] + 1
        txn.put_many([b"key:%012d" % i for i in idx], [b"val:%012d" % v] * len(idx))
        r = txn.commit()
        self.up.drain(120)  # the history has its snapshot every 10 versions, deterministically
        self.at = (r.version, r.checkpoint_id)
        self.refs.append(CheckpointRef(r.version, r.checkpoint_id))

    def cleanup(self, cache: HeaderCache) -> dict[str, Any]:
        self.counting.reset()
        now = time.time() + self.opts.sst_orphan_grace_s + 1
        t0 = time.perf_counter()
        rep = cleanup_store(
            self.counting, STORE, self.refs[-RETAIN:], sst_orphan_grace_s=self.opts.sst_orphan_grace_s, cache=cache, now=now
        )
        out = self.counting.snapshot()
        out.update(
            seconds=time.perf_counter() - t0,
            state_files_deleted=len(rep.deleted),
            ssts_deleted=len(rep.ssts_deleted),
            orphans=len(rep.orphans),
        )
        return out

    def loadable(self) -> bool:
        ok = True
        for ref in (self.refs[-RETAIN], self.refs[-1]):
            p = StateStoreProvider(self.storage, STORE, self.opts.with_(local_dir=self.env.dir("verify")), uploader=SnapshotUploader())
            try:
                p.load(ref.version, ref.id).abort()
            except Exception:
                ok = False
            finally:
                p.close()
        return ok

    def close(self) -> None:
        self.p.close()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = benchlib.parser(NAME, __doc__.split("\n\n")[0]).parse_args(argv)
    lengths, steady_n, per_version = ((10, 30), 3, 20) if args.quick else ((10, 100, 1000), 20, 100)
    steady_n = args.repeats or steady_n
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, "cleanup storage requests vs history length", args, env)
        rep.params.update(
            histories=list(lengths),
            retain=RETAIN,
            snapshot_every=SNAPSHOT_INTERVAL,
            records_per_version=per_version,
            steady_cleanups=steady_n,
            delete_batch=1000,
        )
        rng = np.random.default_rng(args.seed)
        per_h: dict[int, dict[str, Any]] = {}
        for h in lengths:
            hist = History(env, f"h{h}", rng, per_version)
            t0 = time.perf_counter()
            for _ in range(h):
                hist.commit()
            build_s = time.perf_counter() - t0
            listed_before = len(hist.storage.list(STORE.dir))
            cache = HeaderCache()
            first = hist.cleanup(cache)
            steady = []
            for _ in range(steady_n):
                hist.commit()
                steady.append(hist.cleanup(cache))
            hist.commit()
            cold = hist.cleanup(HeaderCache())
            per_h[h] = {
                "build_s": build_s,
                "files_before_first": listed_before,
                "first": first,
                "steady": steady,
                "steady_cold_cache": cold,
                "loadable_after": hist.loadable(),
            }
            hist.close()

        # (a) steady state
        rows_a = []
        steady_stats = {}
        for h, d in per_h.items():
            tot = [s["total"] for s in d["steady"]]
            st = steady_stats[h] = {
                "mean_total": float(np.mean(tot)),
                "max_total": max(tot),
                "max_non_delete": max(s["non_delete"] for s in d["steady"]),
                "by_kind_max": {
                    k: max(s["requests"].get(k, 0) for s in d["steady"]) for k in ("list", "read", "exists", "write", "delete")
                },
                "listed_entries_max": max(s["listed_entries"] for s in d["steady"]),
                "paths_deleted_total": sum(s["paths_deleted"] for s in d["steady"]),
                "cold_cache_total": d["steady_cold_cache"]["total"],
                "cold_cache_requests": d["steady_cold_cache"]["requests"],
                "mean_ms": float(np.mean([s["seconds"] for s in d["steady"]]) * 1000),
            }
            bk = st["by_kind_max"]
            rows_a.append(
                [
                    h,
                    len(d["steady"]),
                    st["mean_total"],
                    st["max_total"],
                    bk["list"],
                    bk["read"],
                    bk["exists"],
                    bk["write"],
                    bk["delete"],
                    st["listed_entries_max"],
                    st["paths_deleted_total"],
                    benchlib.by_kind(st["cold_cache_requests"]),
                    st["mean_ms"],
                ]
            )
        rep.table(
            "(a) steady state: requests per cleanup (commit 1 version, cleanup; header cache kept)",
            [
                "history",
                "cleanups",
                "mean req",
                "max req",
                "list",
                "read",
                "exists",
                "write",
                "delete",
                "max listed",
                "paths deleted (all)",
                "cold-cache cleanup",
                "mean ms",
            ],
            rows_a,
        )
        # (b) first cleanup
        rows_b = []
        for h, d in per_h.items():
            f = d["first"]
            rows_b.append(
                [
                    h,
                    d["files_before_first"],
                    benchlib.by_kind({k: v for k, v in f["requests"].items() if k != "delete"}),
                    f["non_delete"],
                    f["delete_requests"],
                    f["paths_deleted"],
                    f["ssts_deleted"],
                    f["listed_entries"],
                    f["s3_list_pages"],
                    f["seconds"] * 1000,
                ]
            )
        rep.table(
            "(b) first cleanup after the whole history (fresh header cache)",
            [
                "history",
                "files listed",
                "non-delete requests by kind",
                "non-delete",
                "delete req",
                "paths deleted",
                "of which SSTs",
                "listed",
                "S3 LIST pages",
                "ms",
            ],
            rows_b,
        )
        lo, hi = min(lengths), max(lengths)
        rep.ratio(
            f"(a) steady max req, H={hi} / H={lo}",
            steady_stats[hi]["max_total"] / steady_stats[lo]["max_total"],
            "<=",
            1.0,
            baseline=f"H={lo} steady max",
        )
        rep.ratio(
            f"(a) steady mean req, H={hi} / H={lo}",
            steady_stats[hi]["mean_total"] / steady_stats[lo]["mean_total"],
            "<=",
            1.0,
            baseline=f"H={lo} steady mean",
        )
        rep.ratio(
            f"(a) cold-cache req, H={hi} / H={lo}",
            per_h[hi]["steady_cold_cache"]["total"] / per_h[lo]["steady_cold_cache"]["total"],
            None,
            None,
            baseline=f"H={lo} cold cache",
        )
        rep.ratio(
            f"(b) first non-delete req, H={hi} / H={lo}",
            per_h[hi]["first"]["non_delete"] / per_h[lo]["first"]["non_delete"],
            None,
            None,
            baseline=f"H={lo} first",
            note="deletes excluded",
        )
        rep.headline = (
            f"steady max {steady_stats[lo]['max_total']} req/cleanup at H={lo}, {steady_stats[hi]['max_total']} at H={hi}; "
            f"first cleanup at H={hi}: {per_h[hi]['first']['non_delete']} non-delete + {per_h[hi]['first']['delete_requests']} delete req "
            f"({per_h[hi]['first']['paths_deleted']} paths)"
        )
        rep.metrics.update(
            steady=steady_stats,
            first={h: d["first"] for h, d in per_h.items()},
            steady_runs={h: [s["requests"] for s in d["steady"]] for h, d in per_h.items()},
            build_s={h: d["build_s"] for h, d in per_h.items()},
            loadable_after=all(d["loadable_after"] for d in per_h.values()),
        )
        rep.notes.append(
            "request counts are per Storage call (CountingStorage); a LIST of more than 1000 entries is several S3 requests, "
            "shown as 'S3 LIST pages'; 'paths deleted' includes .crc sidecars and SSTs"
        )
        return rep.finish()


if __name__ == "__main__":
    main()
