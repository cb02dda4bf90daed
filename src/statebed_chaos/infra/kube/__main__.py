"""`python -m statebed_chaos.infra.kube up [--stage S] [--dir D] | down [--dir D]` (make kube-up / kube-down)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from statebed_base.entry import guarded

from .cluster import STAGES, down, up

DEFAULT_DIR = Path("runs") / "kube"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m statebed_chaos.infra.kube", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="bring a cluster up to a stage (any failure or Ctrl-C tears it down)")
    u.add_argument("--stage", choices=STAGES, default=STAGES[-1])
    d = sub.add_parser("down", help="stop a cluster's recorded processes, unmount under its directory, remove its namespace")
    for s in (u, d):
        s.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"the cluster directory (default: {DEFAULT_DIR})")
    return p


def _run(args: argparse.Namespace) -> int:
    if args.cmd == "up":
        cd = up(args.dir, args.stage)
        print(f"cluster up ({args.stage}): kubeconfig {cd.kubeconfig('admin')}; make kube-down stops it")
    else:
        gone = down(args.dir)
        print(f"cluster down: {len(gone.stopped)} processes stopped, {len(gone.unmounted)} mounts, namespace removed: {gone.netns_removed}")
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return guarded("statebed kube", lambda: _run(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
