"""`bucket-collect`: the seed appendix's query. Each record goes to a random bucket
(`rand() * 1024`); each bucket collects its records' ids (`collect_list`).

Nondeterministic, judged by invariants. A task draws buckets among the ones its
partition owns (`bucket % partitions == partition`), seeded by (run seed, batch,
partition, attempt), so two attempts of one task really put records in different
buckets and a run replays. State: bucket (8-byte big-endian) -> the ids it collected
(big-endian int64s, appended). Output per batch: the buckets it touched with their size
and the sum of their ids.

Invariant: every committed input record is in exactly one bucket, exactly once (nothing
lost, nothing doubled, nothing from an uncommitted batch), and the last output of each
bucket agrees with its state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from statebed_store import StateStore

from .base import Finding, TaskContext, Workload, encode_i64

__all__ = ["BUCKETS", "BucketCollect"]

BUCKETS = 1024
SHOW = 5
_MASK = (1 << 63) - 1


class BucketCollect(Workload):
    name = "bucket-collect"
    description = "random bucket (rand()*1024) + collect_list of record ids (seed appendix; invariants)"
    output_schema = pa.schema([("bucket", pa.int64()), ("size", pa.int64()), ("id_sum", pa.int64())])

    def apply(self, txn: StateStore, records: pa.Table, ctx: TaskContext) -> pa.Table:
        if records.num_rows == 0:
            return self.empty_output()
        owned = np.arange(ctx.partition, BUCKETS, ctx.partitions, dtype=np.int64)
        ids = records["id"].to_numpy()
        buckets = owned[ctx.rng.integers(0, len(owned), size=len(ids))]
        order = np.argsort(buckets, kind="stable")
        buckets, ids = buckets[order], ids[order]
        uniq, starts = np.unique(buckets, return_index=True)
        ends = np.append(starts[1:], len(buckets))
        kb = encode_i64(uniq)
        old = txn.get_many(kb)
        blobs = ids.astype(">i8").tobytes()
        values = [(o or b"") + blobs[s * 8 : e * 8] for o, s, e in zip(old, starts.tolist(), ends.tolist())]
        txn.put_many(kb, values)
        sizes = [len(v) // 8 for v in values]
        sums = [int(np.frombuffer(v, dtype=">i8").sum()) & _MASK for v in values]
        return pa.table({"bucket": uniq, "size": sizes, "id_sum": sums}, schema=self.output_schema)

    def check(self, inputs: pa.Table, outputs: pa.Table, state: Iterable[tuple[bytes, bytes]]) -> list[Finding]:
        findings: list[Finding] = []
        buckets: dict[int, np.ndarray] = {int.from_bytes(k, "big"): np.frombuffer(v, dtype=">i8").astype(np.int64) for k, v in state}
        held = np.concatenate(list(buckets.values())) if buckets else np.empty(0, np.int64)
        in_ids, in_batch = inputs["id"].to_numpy(), inputs["batch"].to_numpy()
        batch_of = dict(zip(in_ids.tolist(), in_batch.tolist())) if len(in_ids) < 5_000_000 else {}
        uniq, counts = np.unique(held, return_counts=True)
        lost = np.setdiff1d(in_ids, uniq)
        doubled = uniq[counts > 1]
        foreign = np.setdiff1d(uniq, in_ids)
        if len(lost):
            ex = lost[:SHOW].tolist()
            findings.append(
                Finding(
                    "lost-record",
                    f"{len(lost)} committed record(s) are in no bucket, e.g. ids {ex}" + _from(ex, batch_of),
                    records=ex,
                    batches=sorted({batch_of[i] for i in ex if i in batch_of}),
                )
            )
        if len(doubled):
            ex = doubled[:SHOW].tolist()
            where = {i: [b for b, ids in buckets.items() if (ids == i).any()] for i in ex}
            findings.append(
                Finding(
                    "duplicated-record",
                    f"{len(doubled)} record(s) are held more than once, e.g. " + "; ".join(f"id {i} in buckets {where[i]}" for i in ex),
                    records=ex,
                    keys=sorted({b for bs in where.values() for b in bs})[:SHOW],
                )
            )
        if len(foreign):
            ex = foreign[:SHOW].tolist()
            findings.append(
                Finding(
                    "unexpected-record",
                    f"{len(foreign)} id(s) in the state are no committed input (an uncommitted batch?), e.g. {ex}",
                    records=ex,
                )
            )
        last = _last_outputs(outputs)
        wrong = []
        for b, (size, id_sum, batch) in sorted(last.items()):
            ids = buckets.get(b, np.empty(0, np.int64))
            if size != len(ids) or id_sum != int(ids.sum()) & _MASK:
                wrong.append((b, batch, size, len(ids)))
        if wrong:
            findings.append(
                Finding(
                    "output-mismatch",
                    f"{len(wrong)} bucket(s) whose last committed output disagrees with the state, e.g. "
                    + "; ".join(f"bucket {b} (output of batch {batch}): size {s} output, {n} held" for b, batch, s, n in wrong[:SHOW]),
                    keys=[w[0] for w in wrong[:SHOW]],
                    batches=sorted({w[1] for w in wrong[:SHOW]}),
                )
            )
        return findings

    def baseline_view(self, state: Iterable[tuple[bytes, bytes]]) -> dict[Any, Any]:
        """Record id -> how many times it is held. Which bucket holds it depends on the attempt
        number (a retry draws other buckets), so buckets are not compared; the multiset of ids is."""
        held = [np.frombuffer(v, dtype=">i8") for _, v in state]
        ids, counts = np.unique(np.concatenate(held), return_counts=True) if held else (np.empty(0, np.int64), np.empty(0, np.int64))
        return dict(zip(ids.astype(np.int64).tolist(), counts.tolist()))


def _from(ids: list[int], batch_of: dict[int, int]) -> str:
    known = [f"{i} (batch {batch_of[i]})" for i in ids if i in batch_of]
    return f"; input of: {', '.join(known)}" if known else ""


def _last_outputs(outputs: pa.Table) -> dict[int, tuple[int, int, int]]:
    """bucket -> (size, id_sum, batch) of its latest output."""
    out: dict[int, tuple[int, int, int]] = {}
    for b, size, s, batch in zip(*(outputs[c].to_pylist() for c in ("bucket", "size", "id_sum", "batch"))):
        if b not in out or batch >= out[b][2]:
            out[b] = (size, s, batch)
    return out
