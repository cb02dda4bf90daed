"""`statebed cluster up|down|status`: a Spark standalone cluster on loopback addresses.

`up` starts a master and one worker per address (127.0.0.2, 127.0.0.3, ...) in the
background and returns once every worker registered (with `--foreground` it stays and
stops the cluster on exit or Ctrl-C). It refuses to start twice from the same directory.
`status --json` lists master, worker and executor PIDs: what chaos controllers target.
`down` signals a recorded PID only while its start time and command line still match what
`up` recorded. A PID the state file does not pin (either field null, missing or different:
a stale or forged file) is not signalled: `down` stops what it can prove is the cluster's,
keeps the state file, and exits 2 with one line naming the field.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from statebed_base.errors import UsageError
from statebed_job.cluster import StandaloneCluster

from ..common import EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("cluster", help="start, stop or inspect a local standalone Spark cluster", description=__doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, helptext in (("up", "start master and workers"), ("down", "stop every process of the cluster"), ("status", "show PIDs")):
        a = actions.add_parser(name, help=helptext)
        a.add_argument("--dir", default="runs/cluster", help="cluster state and work dirs (default: %(default)s)")
        if name == "up":
            a.add_argument("--workers", type=int, default=2, help="workers, one per loopback address (default: %(default)s)")
            a.add_argument("--foreground", action="store_true", help="stay attached; stop the cluster on exit or Ctrl-C")
        a.add_argument("--json", action="store_true", help="machine-readable output")
        a.set_defaults(run=run)


def _up(cluster: StandaloneCluster, args: argparse.Namespace) -> int:
    """Start the cluster; with --foreground, stay until it stops or we are interrupted (SIGTERM too),
    then bring it down. The first line printed (flushed) says it is up: a caller can wait on it."""
    st = None
    try:
        st = cluster.up()
        doc = cluster.status()
        line = f"cluster up: {st.master_url}, {len(st.workers)} workers, state in {cluster.state_path}"
        print(json.dumps(doc, indent=2) if args.json else line, flush=True)
        while args.foreground and cluster.running() is not None:
            time.sleep(1)  # nothing to wait on but the master's exit or a signal
    except KeyboardInterrupt:
        if st is None or not args.foreground:
            raise
    finally:
        if args.foreground:
            for why in cluster.down().refused:
                print(f"statebed cluster up: not signalled: {why}", file=sys.stderr)
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    cluster = StandaloneCluster(args.dir, workers=getattr(args, "workers", 2))
    if args.action == "up":
        return _up(cluster, args)
    if args.action == "down":
        done = cluster.down()
        if args.json:
            print(json.dumps({"stopped": done.pids, "refused": done.refused}))
        elif done.pids or not done.refused:
            print(f"stopped {len(done.pids)} processes" if done.pids else "no cluster running")
        if done.refused:  # a stale or forged state file: PIDs it does not pin belong to someone else
            many = f"{len(done.refused)} recorded processes not signalled: " if len(done.refused) > 1 else ""
            raise UsageError(many + "; ".join(done.refused))
        return EXIT_OK
    doc = cluster.status()
    if args.json:
        print(json.dumps(doc, indent=2))
    elif not doc["running"]:
        print(f"no cluster running from {doc['dir']}")
    else:
        print(f"master {doc['master']['url']} pid {doc['master']['pid']}")
        for w in doc["workers"]:
            print(f"  worker {w['host']} pid {w['pid']} {'alive' if w['alive'] else 'DEAD'}")
        for e in doc["executors"]:
            print(f"  executor on {e['host']} pid {e['pid']}")
    return EXIT_OK
