"""The cross-partition key check on a 1M-key state over 4 partitions.

Build (not timed): 1,000,000 distinct 8-byte big-endian keys (the `count` state's keys) in
random order, dealt to 4 partitions, held as the check consumes them: a list of bytes per
partition (a loaded state, as `verify state` hands it over) and an (n, 8) array per partition
(a changelog of equal-width puts, as `verify lineage` reads it). Timed, alternately, each a
fresh `CrossPartitionKeys` on freshly built key objects (so no run finds a hash its
predecessor cached in the bytes): hash every key, then compare the partitions: the clean state;
the same state with one key also put in a second partition (the hashes meet, so the
partitions holding the shared hash are read again to name the key); and the baseline, the
plain exact check: one Python set of every key of every partition, its size against the
keys' count. Goal: the check on the clean state costs at most 2x the set. Peak memory of one
more run of each, under `tracemalloc` (numpy's buffers included), is reported.

    python benchmarks/cross_partition.py [--quick] [--json] [--repeats N]
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib
import numpy as np

from statebed_store import CheckpointRef, StoreId
from statebed_store.partitioner import Keys
from statebed_verify.cross_partition import KIND, CrossPartitionKeys

NAME = "cross_partition"
GOAL_RATIO = 2.0  # check (clean state, lists) / one set of every key
VERSION = 7


def build(keys: int, partitions: int, seed: int) -> tuple[list[list[bytes]], list[np.ndarray]]:
    """`keys` distinct keys dealt round-robin to `partitions`, as lists of bytes and as (n, 8) arrays."""
    ids = np.random.default_rng(seed).permutation(keys).astype(">i8")
    blob = ids.tobytes()
    rows = np.frombuffer(blob, dtype=np.uint8).reshape(-1, 8)
    lists = [[blob[i : i + 8] for i in range(8 * p, len(blob), 8 * partitions)] for p in range(partitions)]
    arrays = [rows[p::partitions] for p in range(partitions)]
    return lists, arrays


def check(parts: Sequence[Keys]) -> int:
    """What `verify state` does with a final state: every partition's keys in, the anomalies out."""
    found = CrossPartitionKeys()
    for p, keys in enumerate(parts):
        found.add_keys(StoreId(0, p), CheckpointRef(VERSION, f"id-{p}"), f"state/0/{p}", keys)
    anomalies = found.anomalies()
    assert all(a.kind == KIND for a in anomalies)
    return len(anomalies)


def one_set(parts: Sequence[list[bytes]]) -> int:
    """The baseline: an exact check without hashes of our own (1 when some key is in two partitions)."""
    every: set[bytes] = set()
    for keys in parts:
        every.update(keys)
    return int(len(every) < sum(len(k) for k in parts))


def peak_bytes(fn: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = benchlib.parser(NAME, __doc__.split("\n\n")[0]).parse_args(argv)
    keys, partitions, repeats = (20_000, 4, 2) if args.quick else (1_000_000, 4, 7)
    repeats = args.repeats or repeats
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, "cross-partition key check on a 1M-key state over 4 partitions", args, env)
        rep.params.update(keys=keys, partitions=partitions, repeats=repeats, key_bytes=8)
        variants: dict[str, Callable[[list[list[bytes]], list[np.ndarray]], int]] = {
            "one set of every key (baseline)": lambda lists, arrays: one_set(lists),
            "check, lists (verify state)": lambda lists, arrays: check(lists),
            "check, arrays (verify lineage)": lambda lists, arrays: check(arrays),
            "check, one key in two partitions": lambda lists, arrays: check([[*lists[0], lists[1][0]], *lists[1:]]),
        }
        runs: dict[str, list[float]] = {k: [] for k in variants}
        found: dict[str, int] = {}
        build_s: list[float] = []
        for i in range(repeats):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))  # alternated: drift hits every side
            for name in order:
                t = time.perf_counter()
                lists, arrays = build(keys, partitions, args.seed)  # fresh bytes objects: no hash cached by the last run
                build_s.append(time.perf_counter() - t)
                t = time.perf_counter()
                found[name] = variants[name](lists, arrays)
                runs[name].append(time.perf_counter() - t)
        peaks = {}
        for name, fn in variants.items():
            lists, arrays = build(keys, partitions, args.seed)
            peaks[name] = peak_bytes(partial(fn, lists, arrays))
        med = {k: benchlib.median(v) for k, v in runs.items()}
        rep.table(
            "seconds, and peak memory of one more run under tracemalloc",
            ["variant", "median s", "min s", "max s", "peak MiB", "anomalies / collisions"],
            [[k, med[k], min(v), max(v), peaks[k] / 2**20, found[k]] for k, v in runs.items()],
        )
        base = med["one set of every key (baseline)"]
        clean = med["check, lists (verify state)"]
        rep.ratio("check / one set of every key", clean / base, "<=", GOAL_RATIO, baseline="one Python set of every key")
        rep.ratio(
            "check with a shared key / one set of every key",
            med["check, one key in two partitions"] / base,
            None,
            None,
            baseline="one Python set of every key",
        )
        rep.metrics.update(
            build_s=round(benchlib.median(build_s), 2),
            median_s={k: round(v, 6) for k, v in med.items()},
            min_s={k: round(min(v), 6) for k, v in runs.items()},
            max_s={k: round(max(v), 6) for k, v in runs.items()},
            peak_mib={k: round(v / 2**20, 1) for k, v in peaks.items()},
            found=found,
            verdicts_right=found["check, lists (verify state)"] == 0
            and found["check, arrays (verify lineage)"] == 0
            and found["check, one key in two partitions"] == 1
            and found["one set of every key (baseline)"] == 0,
        )
        rep.headline = (
            f"{keys:,} keys over {partitions} partitions: the check {clean:.2f} s "
            f"({min(runs['check, lists (verify state)']):.2f}-{max(runs['check, lists (verify state)']):.2f}), "
            f"{clean / base:.2f}x one set of every key ({base:.2f} s); with a shared key "
            f"{med['check, one key in two partitions']:.2f} s; peak {peaks['check, lists (verify state)'] / 2**20:.0f} MiB"
        )
        return rep.finish()


if __name__ == "__main__":
    main()
