"""Lineage verifier speed on a 3-partition x 1000-version checkpoint.

Build (not timed): a driver commits 1000 batches over 3 partitions (small updates, a
snapshot every 10 versions, a losing attempt every 50 versions so there are orphans) and
writes the commit log. Timed, alternately: `verify_lineage` (latest plan per store), with
`all_versions` (a plan per retained version), and the baseline: reading every file of
the checkpoint once (list + read), measured in the same run on the same storage, so
machine speed and load cancel out. The verifier reads fewer files than that (the latest
plans' files, the headers of the rest) but parses and cross-checks each one. Goal: the
default check costs at most 5x reading every file once; `--all-versions` is reported.

    python benchmarks/verify_lineage.py [--quick] [--json]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib

from statebed_store import CommitLog, SnapshotUploader, StateStoreProvider, Storage, StoreId, StoreOptions
from statebed_verify import verify_lineage

NAME = "verify_lineage"
GOAL_RATIO = 5.0  # verify / read every file once


def build(env: benchlib.Env, partitions: int, versions: int) -> Storage:
    storage = env.storage("ckpt")
    up = SnapshotUploader()
    opts = StoreOptions(snapshot_interval=10, local_dir=env.dir("exec"))
    execs = [StateStoreProvider(storage, StoreId(0, p), opts, uploader=up) for p in range(partitions)]
    spec = StateStoreProvider(storage, StoreId(0, 0), opts.with_(local_dir=env.dir("spec")), uploader=up)
    log = CommitLog(storage)
    bases: list[tuple[int, str | None]] = [(0, None)] * partitions
    for b in range(versions):
        ids = []
        for p in range(partitions):
            v, cid = bases[p]
            if p == 0 and b % 50 == 49:
                with spec.load(v, cid) as txn:
                    txn.put_many([b"p%d-k%d" % (p, b % 100)], [b"loser"])
                    txn.commit()
            with execs[p].load(v, cid) as txn:
                txn.put_many([b"p%d-k%d" % (p, b % 100), b"p%d-last" % p], [b"v%d" % b, b"%d" % b])  # a key in one partition
                r = txn.commit()
            bases[p] = (r.version, r.checkpoint_id)
            ids.append([r.checkpoint_id])
        log.write(b, {0: ids})
    up.drain(600)
    for e in [*execs, spec]:
        e.close()
    return storage


def read_everything(storage: Storage) -> int:
    """Baseline: list every directory and read every file once."""
    n = 0
    stack = [""]
    while stack:
        d = stack.pop()
        for f in storage.list(d):
            storage.read(f"{d}/{f.name}" if d else f.name)
            n += 1
        stack.extend(f"{d}/{s}" if d else s for s in storage.list_dirs(d))
    return n


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = benchlib.parser(NAME, __doc__.split("\n\n")[0]).parse_args(argv)
    partitions, versions, repeats = (3, 60, 2) if args.quick else (3, 1000, 3)
    repeats = args.repeats or repeats
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, "lineage verifier on a 3-partition x 1000-version checkpoint", args, env)
        rep.params.update(partitions=partitions, versions=versions, repeats=repeats, snapshot_interval=10)
        t0 = time.perf_counter()
        storage = build(env, partitions, versions)
        build_s = time.perf_counter() - t0
        runs: dict[str, list[float]] = {"read every file": [], "verify (latest plans)": [], "verify --all-versions": []}
        results: dict[str, Any] = {}
        for _ in range(repeats):
            t = time.perf_counter()
            files = read_everything(storage)
            runs["read every file"].append(time.perf_counter() - t)
            for name, every in (("verify (latest plans)", False), ("verify --all-versions", True)):
                t = time.perf_counter()
                report = verify_lineage(storage, all_versions=every)
                runs[name].append(time.perf_counter() - t)
                results[name] = report
        med = {k: benchlib.median(v) for k, v in runs.items()}
        rep.table(
            "seconds (median)",
            ["variant", "median s", "min s", "max s"],
            [[k, med[k], min(v), max(v)] for k, v in runs.items()],
        )
        default, every = results["verify (latest plans)"], results["verify --all-versions"]
        rep.table(
            "verdicts",
            ["variant", "valid", "versions checked", "anomalies", "orphans"],
            [[k, r.valid, r.checked["versions"], len(r.anomalies), len(r.orphans)] for k, r in results.items()],
        )
        base = med["read every file"]
        rep.ratio("verify / read every file", med["verify (latest plans)"] / base, "<=", GOAL_RATIO, baseline="read every file")
        rep.ratio("all-versions / read every file", med["verify --all-versions"] / base, None, None, baseline="read every file")
        rep.metrics.update(
            build_s=round(build_s, 2),
            files=files,
            median_s={k: round(v, 4) for k, v in med.items()},
            valid=default.valid is True and every.valid is True,
            orphans=len(default.orphans),
            versions_checked=default.checked["versions"],
        )
        rep.headline = (
            f"{partitions} partitions x {versions} versions ({files} files): verify {med['verify (latest plans)'] / base:.2f}x "
            f"reading every file once ({med['verify (latest plans)']:.2f} s vs {base:.2f} s), "
            f"--all-versions {med['verify --all-versions'] / base:.2f}x ({med['verify --all-versions']:.2f} s)"
        )
        return rep.finish()


if __name__ == "__main__":
    main()
