"""Load: sustained acknowledged events/s through ingest → committed state, and the latency knee.

Every point is one real `statebed load run` (ingest service, continuous job on local[2],
Locust, every process stopped, verified): a fast wrong answer cannot count. Per format
(statebed V2, V1, Spark native V2; the formats alternate within each step, so a change in
the machine's load does not favour one) the offered load steps up (Locust users, 20 events per
request); each step reports acknowledged events/s (committed acknowledged records over
first ingest → last commit) and ingest→commit p50/p99. The knee is the first step whose
p99 exceeds 3× the lowest step's p99. Then V2 at the lowest step with a fault for the
whole run: `delay-snapshot-upload` (3 s per snapshot upload) and `storage-latency`
(200 ms on every S3 request through the proxy; S3 storage for that point and its own
fault-free S3 baseline).

    python benchmarks/load_knee.py [--quick] [--json] [--formats v2,v1,native] [--steps 2,4,8,16] [--duration S]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib

from statebed_chaos.experiment import parse_experiment
from statebed_load.load_run import LoadOptions, run_load

NAME = "load_knee"
KNEE_FACTOR = 3.0
FAULT_POINTS = {"delay-snapshot-upload": "local", "storage-latency": "s3"}  # fault -> the storage it needs
COLUMNS = ["users", "valid", "events/s", "p50 ms", "p99 ms", "acked", "lost"]


def point(env: benchlib.Env, label: str, users: int, duration: float, fmt: str, seed: int, experiment: Any = None) -> dict[str, Any]:
    out = env.dir(f"{label}-u{users}") / "run"
    r = run_load(LoadOptions(users=users, spawn_rate=users, duration_s=duration, format=fmt, seed=seed, experiment=experiment), out)
    lat = r.ingest_to_commit_ms
    row = {
        "users": users,
        "valid": r.valid,
        "events_per_s": r.events_per_s,
        "p50": lat["p50"],
        "p99": lat["p99"],
        "acknowledged": r.acknowledged,
        "lost": r.lost_acknowledged + r.duplicated,
    }
    print(f"point {label} {json.dumps(row)}", file=sys.stderr, flush=True)  # progress, and kept if a later point fails
    return row


def knee(rows: list[dict[str, Any]]) -> int | None:
    """Users at the first step whose p99 exceeds KNEE_FACTOR x the lowest step's (None: no knee in range)."""
    base = rows[0]["p99"] if rows and rows[0]["p99"] else None
    for row in rows[1:]:
        if base is not None and row["p99"] is not None and row["p99"] > KNEE_FACTOR * base:
            return int(row["users"])
    return None


def fault_experiment(kind: str, storage: str) -> Any:
    faults = [] if kind == "none" else [{"kind": kind, "at": {"batch": 0}, "for_s": 3600}]
    return parse_experiment({"name": f"load-{kind}", "storage": storage, "snapshot_interval": 2, "faults": faults})


def fault_points(env: benchlib.Env, kinds: list[str], users: int, duration: float, seed: int) -> dict[str, dict[str, Any]]:
    """V2 with each fault for the whole run, and a fault-free point on the same storage."""
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        storage = FAULT_POINTS[kind]
        for k in ("none", kind):
            if f"{k}-{storage}" not in out:
                out[f"{k}-{storage}"] = point(env, f"{k}-{storage}", users, duration, "v2", seed, fault_experiment(k, storage))
    return out


def ratios(rep: benchlib.Report, sweeps: dict[str, list[dict[str, Any]]], faults: dict[str, dict[str, Any]]) -> None:
    rows = [r for rs in sweeps.values() for r in rs] + list(faults.values())
    acked = sum(r["acknowledged"] for r in rows)
    kept = (acked - sum(r["lost"] for r in rows)) / acked if acked else float("nan")
    rep.ratio("acknowledged events committed exactly once", kept, ">=", 1.0, baseline="events the ingest service acknowledged")
    for f, rs in sweeps.items():
        if len(rs) > 1 and rs[0]["p99"] and rs[-1]["p99"]:
            name = f"{f} p99 at {rs[-1]['users']} users / at {rs[0]['users']}"
            rep.ratio(name, rs[-1]["p99"] / rs[0]["p99"], "<=", KNEE_FACTOR, baseline="the lowest step")
    if sweeps.get("v2") and sweeps.get("native"):
        v2, nat = max(r["events_per_s"] for r in sweeps["v2"]), max(r["events_per_s"] for r in sweeps["native"])
        if v2 > 0 and nat > 0:
            rep.ratio("v2 / native sustained events/s", v2 / nat, ">=", 0.5, baseline="Spark native RocksDB V2")
    for kind, storage in FAULT_POINTS.items():
        a, b = faults.get(f"{kind}-{storage}"), faults.get(f"none-{storage}")
        if a and b and a["p99"] and b["p99"]:
            rep.ratio(f"p99 with {kind} / without", a["p99"] / b["p99"], None, None, baseline=f"fault-free, {storage} storage")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = benchlib.parser(NAME, __doc__.split("\n\n")[0])
    p.add_argument("--formats", default="v2,v1,native", help="comma-separated: v2, v1, native")
    p.add_argument("--steps", default=None, help="Locust users per step, comma-separated (default 2,4,8,16; quick 2,6)")
    p.add_argument("--duration", type=float, default=None, help="seconds of load per point (default 60; quick 15)")
    p.add_argument("--faults", default=",".join(FAULT_POINTS), help=f"fault points: a subset of {','.join(FAULT_POINTS)}, or none")
    args = p.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    steps = [int(s) for s in (args.steps or ("2,6" if args.quick else "2,4,8,16")).split(",")]
    kinds = [k for k in args.faults.split(",") if k in FAULT_POINTS]
    duration = args.duration or (15.0 if args.quick else 60.0)
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, "acknowledged events/s and ingest->commit latency under load", args, env)
        rep.params.update(formats=formats, steps=steps, duration_s=duration, faults=kinds, knee=f"p99 > {KNEE_FACTOR:g}x the lowest step's")
        sweeps: dict[str, list[dict[str, Any]]] = {f: [] for f in formats}
        for i, u in enumerate(steps):  # the formats alternate within each step (step i starts with format i mod n)
            for k in range(len(formats)):
                f = formats[(i + k) % len(formats)]
                sweeps[f].append(point(env, f, u, duration, f, args.seed))
        for f, rows in sweeps.items():
            rep.table(f"{f}: offered load steps", COLUMNS, [list(r.values()) for r in rows])
        faults = fault_points(env, kinds, steps[0], duration, args.seed)
        rep.table("v2 under faults (lowest step)", ["point", *COLUMNS], [[k, *v.values()] for k, v in faults.items()])
        ratios(rep, sweeps, faults)
        best = {f: max(r["events_per_s"] for r in rows) for f, rows in sweeps.items()}
        knees = {f: knee(rows) for f, rows in sweeps.items()}
        every = [r for rs in sweeps.values() for r in rs] + list(faults.values())
        rep.metrics.update(
            sweeps=sweeps, faults=faults, best_events_per_s=best, knee_users=knees, valid=all(r["valid"] is True for r in every)
        )
        rep.headline = "; ".join(f"{f}: {best[f]:,.0f} ack ev/s, knee at {knees[f] or 'none'} users" for f in formats)
        return rep.finish()


if __name__ == "__main__":
    main()
