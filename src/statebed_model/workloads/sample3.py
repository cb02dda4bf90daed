"""`sample3`: keep a uniform random sample of 3 record ids per key (reservoir sampling),
the seed appendix's transformWithState example.

Nondeterministic, judged by invariants. State is one RocksDB entry per sampled element,
like a transformWithState list/map state: `key . 0x00 . id -> ""`, plus `key . 0x01 ->
seen` (records seen for the key). Dropping an element is a delete, so replaying a
changelog on a state it was not computed from can leave 4 elements: the appendix's
anomaly. Output per batch: each touched key with its sample and `seen`.

Invariants: at most 3 elements; min(3, seen) elements; every element a record committed
for that key; `seen` equals the key's committed records; last outputs agree with the state.
The reservoir runs per key in Python: a correctness workload, not a throughput one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from statebed_store import StateStore

from .base import Finding, TaskContext, Workload

__all__ = ["K", "Sample3"]

K = 3
SHOW = 5
_ELEM, _SEEN = b"\x00", b"\x01"


class Sample3(Workload):
    name = "sample3"
    description = "keep-3 reservoir sample of record ids per key (transformWithState example; invariants)"
    output_schema = pa.schema([("key", pa.int64()), ("sample", pa.list_(pa.int64())), ("seen", pa.int64())])

    def apply(self, txn: StateStore, records: pa.Table, ctx: TaskContext) -> pa.Table:
        if records.num_rows == 0:
            return self.empty_output()
        keys, ids = records["key"].to_numpy(), records["id"].to_numpy()
        order = np.lexsort((ids, keys))
        keys, ids = keys[order], ids[order]
        uniq, starts = np.unique(keys, return_index=True)
        ends = np.append(starts[1:], len(keys))
        puts: dict[bytes, bytes] = {}
        deletes: list[bytes] = []
        out_keys, out_samples, out_seen = [], [], []
        for k, s, e in zip(uniq.tolist(), starts.tolist(), ends.tolist()):
            kb = k.to_bytes(8, "big")
            seen_raw = txn.get(kb + _SEEN)
            seen = int.from_bytes(seen_raw, "big") if seen_raw else 0
            sample = [int.from_bytes(key[9:], "big") for key, _ in txn.items(prefix=kb + _ELEM)]
            before = set(sample)
            for rid in ids[s:e].tolist():
                seen += 1
                if len(sample) < K:
                    sample.append(rid)
                elif ctx.rng.integers(seen) < K:
                    sample[int(ctx.rng.integers(K))] = rid
            for gone in before - set(sample):
                deletes.append(kb + _ELEM + gone.to_bytes(8, "big"))
            for new in set(sample) - before:
                puts[kb + _ELEM + new.to_bytes(8, "big")] = b""
            puts[kb + _SEEN] = seen.to_bytes(8, "big")
            out_keys.append(k)
            out_samples.append(sorted(sample))
            out_seen.append(seen)
        if deletes:
            txn.delete_many(deletes)
        txn.put_many(list(puts), list(puts.values()))
        return pa.table({"key": out_keys, "sample": out_samples, "seen": out_seen}, schema=self.output_schema)

    def check(self, inputs: pa.Table, outputs: pa.Table, state: Iterable[tuple[bytes, bytes]]) -> list[Finding]:
        findings: list[Finding] = []
        samples: dict[int, list[int]] = defaultdict(list)
        seen: dict[int, int] = {}
        for key, value in state:
            k = int.from_bytes(key[:8], "big")
            if key[8:9] == _ELEM:
                samples[k].append(int.from_bytes(key[9:], "big"))
            elif key[8:9] == _SEEN:
                seen[k] = int.from_bytes(value, "big")
        arrived: dict[int, set[int]] = defaultdict(set)
        batch_of: dict[int, int] = {}
        for k, rid, b in zip(inputs["key"].to_pylist(), inputs["id"].to_pylist(), inputs["batch"].to_pylist()):
            arrived[k].add(rid)
            batch_of[rid] = b
        over = sorted(k for k, s in samples.items() if len(s) > K)
        if over:
            findings.append(
                Finding(
                    "sample-oversize",
                    f"{len(over)} key(s) hold more than {K} elements, e.g. "
                    + "; ".join(f"key {k}: {sorted(samples[k])}" for k in over[:SHOW]),
                    keys=over[:SHOW],
                )
            )
        foreign = sorted(k for k, s in samples.items() if not set(s) <= arrived.get(k, set()))
        if foreign:
            ex = [(k, sorted(set(samples[k]) - arrived.get(k, set()))) for k in foreign[:SHOW]]
            findings.append(
                Finding(
                    "sample-foreign-element",
                    f"{len(foreign)} key(s) hold ids that were never committed for them, e.g. "
                    + "; ".join(f"key {k}: {ids}" for k, ids in ex),
                    keys=foreign[:SHOW],
                    records=[i for _, ids in ex for i in ids][:SHOW],
                )
            )
        counts = {k: len(v) for k, v in arrived.items()}
        wrong_seen = sorted(k for k in counts.keys() | seen.keys() if counts.get(k, 0) != seen.get(k, 0))
        if wrong_seen:
            findings.append(
                Finding(
                    "seen-mismatch",
                    f"{len(wrong_seen)} key(s) count a different number of records than were committed, e.g. "
                    + "; ".join(f"key {k}: seen {seen.get(k, 0)}, committed {counts.get(k, 0)}" for k in wrong_seen[:SHOW]),
                    keys=wrong_seen[:SHOW],
                )
            )
        short = sorted(k for k, n in counts.items() if len(samples.get(k, ())) < min(K, n) and k not in over)
        if short:
            findings.append(
                Finding(
                    "sample-undersize",
                    f"{len(short)} key(s) hold fewer than min({K}, seen) elements, e.g. "
                    + "; ".join(f"key {k}: {sorted(samples.get(k, []))} of {counts[k]} seen" for k in short[:SHOW]),
                    keys=short[:SHOW],
                )
            )
        last: dict[int, tuple[list[int], int, int]] = {}
        for k, s, n, b in zip(*(outputs[c].to_pylist() for c in ("key", "sample", "seen", "batch"))):
            if k not in last or b >= last[k][2]:
                last[k] = (sorted(s), n, b)
        bad = sorted(k for k, (s, n, _) in last.items() if s != sorted(samples.get(k, [])) or n != seen.get(k, 0))
        if bad:
            findings.append(
                Finding(
                    "output-mismatch",
                    f"{len(bad)} key(s) whose last committed output disagrees with the state, e.g. "
                    + "; ".join(
                        f"key {k}: output {last[k][0]} (seen {last[k][1]}, batch {last[k][2]}), state {sorted(samples.get(k, []))} (seen {seen.get(k, 0)})"
                        for k in bad[:SHOW]
                    ),
                    keys=bad[:SHOW],
                    batches=sorted({last[k][2] for k in bad[:SHOW]}),
                )
            )
        return findings

    def baseline_view(self, state: Iterable[tuple[bytes, bytes]]) -> dict[Any, Any]:
        """Key -> records seen. Which ids are sampled depends on the attempt number, so not compared."""
        return {int.from_bytes(k[:8], "big"): int.from_bytes(v, "big") for k, v in state if k[8:9] == _SEEN}
