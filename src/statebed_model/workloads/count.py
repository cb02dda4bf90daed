"""`count`: count and sum of `value` per key. Deterministic, judged against an oracle.

State: key (8-byte big-endian) -> count, sum (two big-endian int64). Output per batch: the
keys the batch touched with their new count and sum (update mode).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from statebed_store import StateStore

from .base import Finding, TaskContext, Workload, decode_i64, encode_i64, fixed_binary

__all__ = ["Count"]

SHOW = 5  # mismatching keys named per finding


class Count(Workload):
    name = "count"
    description = "count and sum of value per key (deterministic: oracle)"
    output_schema = pa.schema([("key", pa.int64()), ("count", pa.int64()), ("sum", pa.int64())])

    def apply(self, txn: StateStore, records: pa.Table, ctx: TaskContext) -> pa.Table:
        if records.num_rows == 0:
            return self.empty_output()
        g = records.group_by("key").aggregate([("value", "count"), ("value", "sum")])
        keys = g["key"].to_numpy()
        order = np.argsort(keys, kind="stable")  # sorted keys: RocksDB's fast path
        keys = keys[order]
        add = np.stack([g["value_count"].to_numpy()[order], g["value_sum"].to_numpy()[order]], axis=1)
        kb = encode_i64(keys)
        new = decode_i64(txn.get_many(kb), 2) + add
        txn.put_many(kb, fixed_binary(new.astype(">i8"), 16))
        return pa.table({"key": keys, "count": new[:, 0], "sum": new[:, 1]}, schema=self.output_schema)

    def check(self, inputs: pa.Table, outputs: pa.Table, state: Iterable[tuple[bytes, bytes]]) -> list[Finding]:
        findings: list[Finding] = []
        want = _oracle(inputs)
        got = {int.from_bytes(k, "big"): tuple(int(x) for x in np.frombuffer(v, dtype=">i8")) for k, v in state}
        batches_of = _batches_per_key(inputs)
        wrong = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
        if wrong:
            findings.append(
                Finding(
                    "state-mismatch",
                    f"{len(wrong)} key(s) differ from the oracle, e.g. "
                    + "; ".join(f"key {k}: state (count, sum) {got[k]}, expected {want[k]}" for k in wrong[:SHOW]),
                    keys=wrong[:SHOW],
                    batches=sorted({b for k in wrong[:SHOW] for b in batches_of.get(k, ())}),
                )
            )
        lost = sorted(want.keys() - got.keys())
        if lost:
            findings.append(
                Finding(
                    "lost-key",
                    f"{len(lost)} key(s) with committed input are missing from the state, e.g. {lost[:SHOW]}",
                    keys=lost[:SHOW],
                    batches=sorted({b for k in lost[:SHOW] for b in batches_of.get(k, ())}),
                )
            )
        extra = sorted(got.keys() - want.keys())
        if extra:
            findings.append(
                Finding(
                    "unexpected-key", f"{len(extra)} key(s) in the state never had committed input, e.g. {extra[:SHOW]}", keys=extra[:SHOW]
                )
            )
        findings += _check_outputs(inputs, outputs)
        return findings

    def baseline_view(self, state: Iterable[tuple[bytes, bytes]]) -> dict[Any, Any]:
        """Deterministic: every key with its (count, sum)."""
        return {int.from_bytes(k, "big"): tuple(int(x) for x in np.frombuffer(v, dtype=">i8")) for k, v in state}


def _oracle(inputs: pa.Table) -> dict[int, tuple[int, int]]:
    if inputs.num_rows == 0:
        return {}
    g = inputs.group_by("key").aggregate([("value", "count"), ("value", "sum")])
    return dict(zip(g["key"].to_pylist(), zip(g["value_count"].to_pylist(), g["value_sum"].to_pylist())))


def _batches_per_key(inputs: pa.Table) -> dict[int, list[int]]:
    if inputs.num_rows == 0:
        return {}
    g = inputs.group_by("key").aggregate([("batch", "distinct")])
    return dict(zip(g["key"].to_pylist(), g["batch_distinct"].to_pylist()))


def _check_outputs(inputs: pa.Table, outputs: pa.Table) -> list[Finding]:
    """Each committed batch outputs exactly the keys it touched, with the running count and sum.

    Vectorised: keys are mapped to dense indices once; running totals are numpy arrays.
    """
    findings: list[Finding] = []
    in_batch, in_key, in_val = (inputs[c].to_numpy() for c in ("batch", "key", "value"))
    out_batch, out_key = outputs["batch"].to_numpy(), outputs["key"].to_numpy()
    out_cs = np.stack([outputs["count"].to_numpy(), outputs["sum"].to_numpy()], axis=1) if outputs.num_rows else np.empty((0, 2), np.int64)
    universe, in_idx = np.unique(in_key, return_inverse=True)
    running = np.zeros((len(universe), 2), np.int64)
    for b in np.unique(np.concatenate([in_batch, out_batch])).tolist():
        sel = in_batch == b
        idx = in_idx[sel]
        np.add.at(running[:, 0], idx, 1)
        np.add.at(running[:, 1], idx, in_val[sel])
        touched = np.unique(idx)
        osel = out_batch == b
        okeys, ovals = out_key[osel], out_cs[osel]
        if len(np.unique(okeys)) != len(okeys):
            findings.append(Finding("duplicate-output-row", f"batch {b} outputs some key more than once", batches=[b]))
        pos = np.searchsorted(universe, okeys)
        known = (
            (pos < len(universe)) & (universe[np.minimum(pos, len(universe) - 1)] == okeys) if len(universe) else np.zeros(len(okeys), bool)
        )
        extra = sorted(okeys[~known].tolist())
        missing = sorted(universe[np.setdiff1d(touched, pos[known])].tolist())
        kpos, kvals = pos[known], ovals[known]
        bad = np.any(kvals != running[kpos], axis=1) | ~np.isin(kpos, touched)
        wrong = sorted(zip(okeys[known][bad].tolist(), kvals[bad].tolist(), running[kpos[bad]].tolist()))
        if missing or extra or wrong:
            parts = []
            if missing:
                parts.append(f"keys touched but not output {missing[:SHOW]}")
            if extra:
                parts.append(f"keys output but never input {extra[:SHOW]}")
            if wrong:
                parts.append("; ".join(f"key {k}: output (count, sum) {tuple(o)}, expected {tuple(e)}" for k, o, e in wrong[:SHOW]))
            keys = (missing + extra + [k for k, _, _ in wrong])[:SHOW]
            findings.append(Finding("output-mismatch", f"batch {b}: " + "; ".join(parts), keys=keys, batches=[b]))
    return findings
