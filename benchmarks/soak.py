"""The soak: does a long `statebed run` keep its checkpoint bounded? (issue 27, measured part)

One `statebed run` of `count` in its own process (small batches, so hundreds of batches take
minutes), `--retain 20`, maintenance after every committed batch (`--maintenance-interval 0`)
or, with `--maintenance off`, never (interval 86400 s: the "grows linearly" curve). A watcher
thread in this process lists the whole checkpoint after every batch the commit log records
(the local directory, or the bucket prefix with an S3 LIST: MinIO is started when no
`--s3-endpoint` is given) and records objects and bytes, all and `state/` only (the commit
log is one object per batch; the job's maintenance keeps the retained window of it). A sample is taken while the next batch
may already be writing; the maintenance records (`<run>/maintenance.jsonl`: files and bytes
each store keeps after its pass, and the requests the pass cost) are the exact post-pass view.

Ratios against the value at `--ref-batch` (100): the raw maximum after it, and cycle-aligned:
the largest per-cycle maximum (a cycle is `--snapshot-interval` batches: the retained set's
file count rises and falls with the snapshot cycle) over the maximum of the cycle holding the
reference batch. Goal <= 1.1. Requests per maintenance pass are reported per 100-batch bucket.

    python benchmarks/soak.py [--quick] [--json] [--workdir DIR --keep] [--storage local|s3] [--s3-endpoint URL]
                              [--batches 600] [--retain 20] [--maintenance on|off] [--interval 0] [--ref-batch 100]
                              [--sst-grace S]   (the run's; default its own, 600 s)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib

from statebed_base.processes import run_to_end
from statebed_model.rundir import RunDir
from statebed_store.naming import COMMITS_DIR, SST_DIR

NAME = "soak"
GOAL = 1.1
OFF_INTERVAL_S = 86_400.0  # the largest --maintenance-interval: no pass within the run
BUCKET = "statebed-soak"

Listing = Callable[[], list[tuple[str, int]]]  # (checkpoint-relative path, bytes) of every object


def local_listing(root: Path) -> Listing:
    def listing() -> list[tuple[str, int]]:
        out = []
        for d, _, names in os.walk(root):
            for n in names:
                p = Path(d) / n
                with contextlib.suppress(FileNotFoundError):  # deleted by maintenance while we walk
                    out.append((str(p.relative_to(root)), p.stat().st_size))
        return out

    return listing


def s3_listing(endpoint: str, access: str, secret: str, prefix: str) -> Listing:
    from minio import Minio

    client = Minio(endpoint.split("://", 1)[-1], access, secret, secure=endpoint.startswith("https"), region="us-east-1")

    def listing() -> list[tuple[str, int]]:
        objs = client.list_objects(BUCKET, prefix=prefix + "/", recursive=True)
        return [(o.object_name.removeprefix(prefix + "/"), int(o.size or 0)) for o in objs if o.object_name]

    return listing


def latest_commit(paths: list[tuple[str, int]]) -> int | None:
    ids = [int(p.split("/", 1)[1]) for p, _ in paths if p.startswith("commits/") and p.split("/", 1)[1].isdigit()]
    return max(ids) if ids else None


def sample(paths: list[tuple[str, int]]) -> dict[str, Any]:
    state = [(p, s) for p, s in paths if p.startswith("state/")]
    ssts = [(p, s) for p, s in state if f"/{SST_DIR}/" in p]
    return {
        "batch": latest_commit(paths),
        "objects": len(paths),
        "bytes": sum(s for _, s in paths),
        "state_objects": len(state),
        "state_bytes": sum(s for _, s in state),
        "sst_objects": len(ssts),  # kept while a snapshot names them, or younger than the grace period
        "sst_bytes": sum(s for _, s in ssts),
        "at": time.time(),
    }


class Watcher(threading.Thread):
    """Lists the checkpoint whenever the commit log has a new batch; one sample per batch seen."""

    def __init__(self, listing: Listing, poll_s: float) -> None:
        super().__init__(name="soak-watcher", daemon=True)
        self.listing, self.poll_s = listing, poll_s
        self.samples: list[dict[str, Any]] = []
        self.final: dict[str, Any] | None = None  # the listing after the run ended
        self.errors = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.poll_s):
            self.poll()
        self.final = self.poll()

    def poll(self) -> dict[str, Any] | None:
        try:
            s = sample(self.listing())
        except Exception:  # the bucket or directory may not exist yet; counted, never fatal
            self.errors += 1
            return None
        if s["batch"] is not None and (not self.samples or s["batch"] > self.samples[-1]["batch"]):
            self.samples.append(s)
        return s


@contextlib.contextmanager
def s3_endpoint(args: argparse.Namespace, env: benchlib.Env) -> Iterator[tuple[str, str, str]]:
    """The given endpoint (credentials from the environment), or a MinIO started for the soak."""
    if args.s3_endpoint:
        yield args.s3_endpoint, os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("AWS_SECRET_ACCESS_KEY", "")
        return
    from statebed_chaos.infra.minio_server import ACCESS_KEY, SECRET_KEY, start_s3_server

    server = start_s3_server(env.dir("s3"))
    try:
        yield server.endpoint, ACCESS_KEY, SECRET_KEY
    finally:
        server.stop()


def run_soak(args: argparse.Namespace, env: benchlib.Env, sizes: dict[str, Any]) -> dict[str, Any]:
    """One `statebed run` with the watcher; its summary, samples and maintenance records."""
    work = env.dir(f"{env.storage_kind}-{args.maintenance}")
    run_dir = work / "run"
    interval = args.interval if args.maintenance == "on" else OFF_INTERVAL_S
    sized = [f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()]
    cmd = [sys.executable, "-m", "statebed_cli.main", "run", "--run-dir", str(run_dir), "--workload", "count", *sized]
    cmd += [f"--maintenance-interval={interval:g}", "--json"]
    with contextlib.ExitStack() as stack:
        if env.storage_kind == "s3":
            endpoint, access, secret = stack.enter_context(s3_endpoint(args, env))
            prefix = f"soak-{env.run_id}-{args.maintenance}"
            ckpt, s3_args = f"s3://{BUCKET}/{prefix}", ["--s3-endpoint", endpoint, "--s3-access-key", access, "--s3-secret-key", secret]
            cmd += ["--checkpoint", ckpt, *s3_args]
            listing = s3_listing(endpoint, access, secret, prefix)
        else:
            ckpt, s3_args = str(run_dir / "checkpoint"), []
            listing = local_listing(run_dir / "checkpoint")
        watcher = Watcher(listing, args.poll)
        environ = {k: v for k, v in os.environ.items() if k not in ("STATEBED_FAILPOINTS", "STATEBED_FAILPOINTS_CONTROL")}
        t0 = time.perf_counter()
        watcher.start()
        try:
            proc = run_to_end(cmd, env=environ, timeout=7200)
        finally:
            watcher.done.set()
            watcher.join()
        held = grace_held(ckpt, s3_args, args.retain) if proc.returncode == 0 else {}
    if proc.returncode != 0:
        raise RuntimeError(f"soak run exited {proc.returncode}: {proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout[proc.stdout.rfind("\n{") + 1 :])
    out = {
        "run_dir": str(run_dir),
        "wall_s": round(time.perf_counter() - t0, 1),
        "valid": all(v["valid"] is True for v in summary["verdicts"].values()),
        "batches": summary["batches"],
        "samples": watcher.samples,
        "watch_errors": watcher.errors,
        "final": watcher.final,
        "passes": RunDir(run_dir).maintenance(),
        "grace_held": held,
    }
    (work / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in watcher.samples))
    if not args.keep:
        env.remove(work)
    return out


def grace_held(ckpt: str, s3_args: list[str], retain: int) -> dict[str, Any]:
    """What only the SST grace period keeps at the end: a dry-run cleanup with grace 0 (nothing is deleted)."""
    cmd = [
        sys.executable,
        "-m",
        "statebed_cli.main",
        "cleanup",
        ckpt,
        "--dry-run",
        f"--retain={retain}",
        "--sst-grace=0",
        "--json",
        *s3_args,
    ]
    proc = run_to_end(cmd, timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-300:]}
    doc = json.loads(proc.stdout)
    reasons = [d.get("reason", "") for st in doc["stores"] for d in st["deleted"]]
    return {"files": doc["files"], "bytes": doc["bytes"], "unreferenced_ssts": sum("unreferenced SST" in r for r in reasons)}


# -- analysis ---------------------------------------------------------------------------------
def at_or_after(series: dict[int, int], batch: int) -> int | None:
    later = [b for b in series if b >= batch]
    return min(later) if later else None


def growth(series: dict[int, int], ref: int, cycle: int) -> dict[str, Any]:
    """Raw and cycle-aligned ratios of `series` (batch -> value) after `ref` to its value at `ref`."""
    b0 = at_or_after(series, ref)
    if b0 is None:
        return {"ref_batch": None}
    after = {b: v for b, v in series.items() if b >= b0}
    cycles: dict[int, int] = {}
    for b, v in after.items():
        cycles[(b - b0) // cycle] = max(cycles.get((b - b0) // cycle, 0), v)
    peak = max(after, key=lambda b: after[b])
    return {
        "ref_batch": b0,
        "ref_value": series[b0],
        "max_value": after[peak],
        "max_at": peak,
        "raw_ratio": round(after[peak] / max(series[b0], 1), 4),
        "ref_cycle_max": cycles[0],
        "cycle_ratio": round(max(cycles.values()) / max(cycles[0], 1), 4),
        "last": series[max(series)],
    }


def kept_series(passes: list[dict[str, Any]], key: str) -> dict[int, int]:
    """Per latest batch: the sum over state stores of what each kept after its pass (the last pass
    at that batch); the commit log's trim rows are not a state store's."""
    per: dict[int, dict[str, int]] = {}
    for r in passes:
        if r.get("error") is None and key in r and r.get("store") != COMMITS_DIR:
            per.setdefault(r["latest_batch"], {})[r["store"]] = r[key]
    return {b: sum(v.values()) for b, v in sorted(per.items())}


def request_buckets(passes: list[dict[str, Any]], width: int) -> list[list[Any]]:
    """Requests per store cleanup, percentiles per `width`-batch bucket of latest_batch."""
    by: dict[int, list[int]] = {}
    for r in passes:
        if r.get("error") is None:
            by.setdefault(r["latest_batch"] // width, []).append(r["requests"])
    rows = []
    for k, xs in sorted(by.items()):
        rows.append(
            [f"{k * width}-{k * width + width - 1}", len(xs), benchlib.pct(xs, 50), benchlib.pct(xs, 90), benchlib.pct(xs, 99), max(xs)]
        )
    return rows


def marks(last: int, every: int) -> list[int]:
    """Batches every `every` up to the last one (600 batches: 100, 200, ..., 500, 599)."""
    return sorted({min(b, last) for b in range(every, last + every, every)})


def value_at(series: dict[int, int], batch: int) -> int | None:
    b = at_or_after(series, batch)
    return None if b is None else series[b]


def report(rep: benchlib.Report, res: dict[str, Any], args: argparse.Namespace, cycle: int) -> None:
    curves: dict[str, dict[int, int]] = {
        k: {s["batch"]: s[k] for s in res["samples"]}
        for k in ("objects", "bytes", "state_objects", "state_bytes", "sst_objects", "sst_bytes")
    }
    curves["state_objects_no_sst"] = {b: v - curves["sst_objects"][b] for b, v in curves["state_objects"].items()}
    curves["state_bytes_no_sst"] = {b: v - curves["sst_bytes"][b] for b, v in curves["state_bytes"].items()}
    if args.maintenance == "on":
        curves["files_kept"] = kept_series(res["passes"], "files_kept")
        curves["bytes_kept"] = kept_series(res["passes"], "bytes_kept")
    every = max(1, args.ref_batch)
    at = marks(res["batches"] - 1, every)
    rep.table(
        "checkpoint after batch n (watcher samples; files/bytes_kept: the stores' maintenance records summed)",
        ["series", *map(str, at)],
        [[k, *(value_at(v, b) for b in at)] for k, v in curves.items()],
    )
    stats = {k: growth(v, args.ref_batch, cycle) for k, v in curves.items()}
    rows = [
        [k, s.get("ref_batch"), s.get("ref_value"), s.get("max_value"), s.get("max_at"), s.get("raw_ratio"), s.get("cycle_ratio")]
        for k, s in stats.items()
    ]
    rep.table(
        f"growth after batch {args.ref_batch} (cycle: {cycle} batches)",
        ["series", "ref batch", "ref", "max", "max at", "raw", "cycle-aligned"],
        rows,
    )
    for k in ("objects", "bytes", "state_objects", "state_bytes"):
        s = stats[k]
        if s.get("ref_batch") is not None:
            op = "<=" if args.maintenance == "on" else None
            rep.ratio(
                f"{k} max/at batch {s['ref_batch']}, cycle-aligned",
                s["cycle_ratio"],
                op,
                GOAL if op else None,
                baseline=f"cycle holding batch {s['ref_batch']}",
            )
            rep.ratio(f"{k} max/at batch {s['ref_batch']}, raw", s["raw_ratio"], None, None, baseline=f"value at batch {s['ref_batch']}")
    if res["passes"]:
        rep.table(
            "requests per store cleanup, by latest batch",
            ["batches", "cleanups", "p50", "p90", "p99", "max"],
            request_buckets(res["passes"], every),
        )
    rep.metrics.update(curves={k: {str(b): v for b, v in c.items()} for k, c in curves.items()}, growth=stats)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = benchlib.parser(NAME, __doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=None, help="micro-batches (default 600; quick 14)")
    p.add_argument("--retain", type=int, default=None, help="--retain of the run (default 20; quick 3)")
    p.add_argument("--ref-batch", type=int, default=None, help="the batch growth is measured from (default 100; quick 6)")
    p.add_argument("--maintenance", choices=("on", "off"), default="on")
    p.add_argument("--interval", type=float, default=0.0, help="--maintenance-interval when on (default 0: after every batch)")
    p.add_argument("--rows-per-batch", type=int, default=20)
    p.add_argument("--keyspace", type=int, default=200)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--snapshot-interval", type=int, default=None, help="default 10; quick 3")
    p.add_argument("--sst-grace", type=float, default=None, help="the run's --sst-grace (default: the run's own, 600 s)")
    p.add_argument("--poll", type=float, default=0.1, help="seconds between the watcher's looks at the commit log")
    args = p.parse_args(argv)
    q = args.quick
    args.batches = args.batches or (14 if q else 600)
    args.retain = args.retain or (3 if q else 20)
    args.ref_batch = args.ref_batch or (6 if q else 100)
    snap = args.snapshot_interval or (3 if q else 10)
    sizes = {
        "batches": args.batches,
        "retain": args.retain,
        "rows_per_batch": args.rows_per_batch,
        "keyspace": args.keyspace,
        "partitions": args.partitions,
        "snapshot_interval": snap,
        **({"sst_grace": args.sst_grace} if args.sst_grace is not None else {}),
    }
    with benchlib.environment(args, NAME) as env:
        rep = benchlib.Report(NAME, f"checkpoint size over a long run, maintenance {args.maintenance}", args, env)
        rep.params.update(
            **sizes, maintenance=args.maintenance, maintenance_interval_s=args.interval if args.maintenance == "on" else OFF_INTERVAL_S
        )
        res = run_soak(args, env, sizes)
        report(rep, res, args, snap)
        rep.metrics.update(valid=res["valid"], wall_s=res["wall_s"], samples=len(res["samples"]), watch_errors=res["watch_errors"])
        rep.metrics.update(final_state_objects=(res["final"] or {}).get("state_objects"))
        rep.metrics.update(run_dir=res["run_dir"] if args.keep else None, maintenance_rows=len(res["passes"]), grace_held=res["grace_held"])
        rep.notes.append(
            f"at the end, a cleanup with --sst-grace 0 would also delete: {res['grace_held']} "
            f"(what the {600 if args.sst_grace is None else args.sst_grace:g} s SST grace keeps)"
        )
        g = rep.metrics["growth"]
        rep.headline = (
            f"{res['batches']} batches, retain {args.retain}, maintenance {args.maintenance}, {env.storage_kind}: objects "
            f"{g['objects'].get('ref_value')} at {g['objects'].get('ref_batch')} -> max {g['objects'].get('max_value')} "
            f"(raw {g['objects'].get('raw_ratio')}x, cycle {g['objects'].get('cycle_ratio')}x), state objects cycle "
            f"{g['state_objects'].get('cycle_ratio')}x, bytes cycle {g['bytes'].get('cycle_ratio')}x; valid {res['valid']}"
        )
        return rep.finish()


if __name__ == "__main__":
    main()
