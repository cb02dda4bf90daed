"""`statebed cluster up|down|status`: a Spark standalone cluster on loopback addresses.

`up` starts a master and one worker per address (127.0.0.2, 127.0.0.3, ...) in the
background and returns once every worker registered (with `--foreground` it stays and
stops the cluster on exit or Ctrl-C). It refuses to start twice from the same directory.
`status --json` lists master, worker and executor PIDs: what chaos controllers target.
`down` signals a recorded PID only while its start time and command line still match what
`up` recorded; a stale state file whose PIDs were reused gets a message, not a kill.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

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


def run(args: argparse.Namespace) -> int:
    cluster = StandaloneCluster(args.dir, workers=getattr(args, "workers", 2))
    if args.action == "up":
        st = cluster.up()
        doc = cluster.status()
        print(
            json.dumps(doc, indent=2)
            if args.json
            else f"cluster up: {st.master_url}, {len(st.workers)} workers, state in {cluster.state_path}"
        )
        if args.foreground:
            try:
                while cluster.running() is not None:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
            finally:
                cluster.down()
        return EXIT_OK
    if args.action == "down":
        done = cluster.down()
        for why in done.refused:  # a stale state file: its PIDs now belong to other processes
            print(f"statebed cluster down: refused: {why}", file=sys.stderr)
        if args.json:
            print(json.dumps({"stopped": done.pids, "refused": done.refused}))
        else:
            print(f"stopped {len(done.pids)} processes" if done.pids else "no cluster running")
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
