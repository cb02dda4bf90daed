"""`Workload.baseline_view` keeps what every valid execution agrees on, and only that."""

from __future__ import annotations

import struct

from statebed_model.workloads import get_workload


def _ids(*ids: int) -> bytes:
    return b"".join(struct.pack(">q", i) for i in ids)


def test_count_keeps_count_and_sum_per_key() -> None:
    w = get_workload("count")
    state = [(struct.pack(">q", 7), struct.pack(">qq", 2, 30))]
    assert w.baseline_view(state) == {7: (2, 30)}
    assert w.baseline_view(state) != w.baseline_view([(struct.pack(">q", 7), struct.pack(">qq", 3, 30))])


def test_bucket_collect_ignores_which_bucket_holds_an_id_but_not_doubles() -> None:
    w = get_workload("bucket-collect")
    a = [(struct.pack(">q", 0), _ids(1, 2)), (struct.pack(">q", 2), _ids(3))]
    b = [(struct.pack(">q", 4), _ids(3, 1)), (struct.pack(">q", 6), _ids(2))]  # a retry drew other buckets
    assert w.baseline_view(a) == w.baseline_view(b) == {1: 1, 2: 1, 3: 1}
    assert w.baseline_view([*b, (struct.pack(">q", 8), _ids(2))]) != w.baseline_view(a)  # id 2 doubled


def test_sample3_keeps_records_seen_not_the_sample() -> None:
    w = get_workload("sample3")
    key = struct.pack(">q", 5)
    seen = (key + b"\x01", struct.pack(">q", 9))
    a = [(key + b"\x00" + struct.pack(">q", i), b"") for i in (1, 2, 3)] + [seen]
    b = [(key + b"\x00" + struct.pack(">q", i), b"") for i in (4, 5, 6)] + [seen]
    assert w.baseline_view(a) == w.baseline_view(b) == {5: 9}
    assert w.baseline_view([(key + b"\x01", struct.pack(">q", 8))]) != w.baseline_view(a)
