"""`statebed load run`: the ingest service, a continuous job and Locust users together (and a
chaos experiment's faults), everything stopped by PID at the end, then the verdict.

Exit codes: 0 valid and no acknowledged record lost or doubled; 1 an acknowledged record lost
or doubled (or a client answered 200 for a record the ack log lacks), or a verifier found
anomalies; 2 bad arguments or experiment file; 3 unknown (a verifier could not decide, the job
did not finish, a fault did not provably fire); 4 a process did not start; 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from statebed_chaos.experiment import load_experiment
from statebed_chaos.limits import MAX_DURATION_S, MAX_SIZES
from statebed_load.load_run import KEYS, SHAPES, LoadOptions, run_load
from statebed_load.prometheus import PROMETHEUS_HELP, prometheus_for_run
from statebed_store.formats import FORMATS, V2, get_format

from ..common import bounded_int, duration_arg, non_negative_int, positive_int
from .run import positive_float


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("load", help="load tests: ingest service + continuous job + Locust, then the verdict", description=__doc__)
    load_sub = p.add_subparsers(dest="load_command", metavar="SUBCOMMAND", required=True)
    d = LoadOptions()
    r = load_sub.add_parser("run", help="one load run", description=__doc__)
    r.add_argument("--users", type=bounded_int(MAX_SIZES["users"]), default=d.users, help=f"peak Locust users (default: {d.users})")
    r.add_argument("--spawn-rate", type=positive_float, default=d.spawn_rate, help=f"users started per second (default: {d.spawn_rate:g})")
    r.add_argument(
        "--duration",
        type=duration_arg(MAX_DURATION_S),
        default=d.duration_s,
        help=f"how long the load runs: 30, 30s, 2m, 1h30m (default: {d.duration_s:g} s)",
    )
    r.add_argument("--shape", choices=SHAPES, default=d.shape, help="users over time (default: steady)")
    r.add_argument("--keys", choices=KEYS, default=d.keys, help="key distribution (default: uniform)")
    r.add_argument("--keyspace", type=bounded_int(MAX_SIZES["keyspace"]), default=d.keyspace, help=f"distinct keys (default: {d.keyspace})")
    r.add_argument("--batch-size", type=positive_int, default=d.batch_size, help=f"events per request (default: {d.batch_size})")
    r.add_argument(
        "--format",
        choices=tuple(FORMATS),
        default=None,
        help="the job's store (default: the experiment's, else v2; native = native-v2)",
    )
    r.add_argument(
        "--partitions", type=bounded_int(MAX_SIZES["partitions"]), default=d.partitions, help=f"state partitions (default: {d.partitions})"
    )
    r.add_argument("--trigger-ms", type=positive_int, default=d.trigger_ms, help=f"a micro-batch every MS (default: {d.trigger_ms})")
    r.add_argument("--experiment", default=None, help="a chaos experiment file: its workload, cluster, storage and faults")
    r.add_argument(
        "--kill-ingest-at",
        type=duration_arg(MAX_DURATION_S),
        default=None,
        metavar="S",
        help="SIGKILL the ingest service S (30, 30s, 2m) into the load, restart it",
    )
    r.add_argument("--prometheus", action="store_true", help=PROMETHEUS_HELP)
    r.add_argument("--seed", type=non_negative_int, default=None, help="seed of the users' draws and the faults (default: drawn)")
    r.add_argument("--out", type=Path, default=None, help="the run directory (default: runs/load/<time>-<format>)")
    r.add_argument("--json", action="store_true", help="print the summary as JSON (progress stays on stderr)")
    r.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    exp = None if args.experiment is None else load_experiment(args.experiment)
    opts = LoadOptions(
        users=args.users,
        spawn_rate=args.spawn_rate,
        duration_s=args.duration,
        shape=args.shape,
        keys=args.keys,
        keyspace=args.keyspace,
        batch_size=args.batch_size,
        format=get_format(args.format, field="--format") if args.format else (exp.format if exp is not None else V2),
        partitions=args.partitions,
        trigger_ms=args.trigger_ms,
        seed=args.seed,
        experiment=exp,
        kill_ingest_at_s=args.kill_ingest_at,
    )
    out = args.out or Path("runs") / "load" / f"{time.strftime('%Y%m%d-%H%M%S')}-{opts.format}"
    t0 = time.monotonic()
    with prometheus_for_run(out) if args.prometheus else contextlib.nullcontext():
        result = run_load(opts, out, say=lambda m: print(f"[load +{time.monotonic() - t0:.0f}s] {m}", file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        lat = result.ingest_to_commit_ms
        print(f"load run {result.run_dir}: {'valid' if result.valid is True else 'INVALID' if result.valid is False else 'unknown'}")
        print(
            f"  acknowledged {result.acknowledged:,}, committed {result.committed:,}, lost {result.lost_acknowledged}, doubled {result.duplicated}"
        )
        print(f"  requests {result.requests:,}, failures {result.failures:,}, {result.events_per_s:,.1f} events/s")
        print(f"  ingest->commit ms p50 {lat['p50']}, p95 {lat['p95']}, p99 {lat['p99']}")
        for why in result.reasons:
            print(f"  {why}")
    return result.exit_code
