"""`python -m statebed_job RUN_DIR`: run the job a run directory describes (how chaos and load start it).

The harness writes the run description (`runner.describe_run`: `run.json`, not started) and
starts this, never the `statebed` command above it: no command line carries the options.
`--resume` continues the saved run after a driver died; `--master` submits to a running cluster
(also on resume); `--metrics-port` (or STATEBED_METRICS_PORT) serves the driver's /metrics;
`--json` prints the run summary. Exit codes are `statebed_base.entry`'s: 0 the run finished,
2 unusable input, 4 the run failed, 70 a bug, 130 interrupted. Judging is not the job's business.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from statebed_base.entry import escaped_output, guarded
from statebed_base.log import setup_logging
from statebed_base.netaddr import check_port
from statebed_store import failpoints

from .runner import metrics_port_from_env, run_job


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m statebed_job", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory holding its run.json (runner.describe_run)")
    p.add_argument("--resume", action="store_true", help="continue the saved run (e.g. after the driver died)")
    p.add_argument("--master", default=None, help="submit to a running cluster (spark://..., k8s://...)")
    p.add_argument("--metrics-port", type=int, default=None, metavar="P", help="serve /metrics on 127.0.0.1:P (0: any)")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    return p


def _run(args: argparse.Namespace) -> int:
    failpoints.check_known()  # every failpoint is registered by now (the job's at import): a typo is exit 2
    port = metrics_port_from_env(None if args.metrics_port is None else check_port(args.metrics_port, "--metrics-port"))
    run = run_job(args.run_dir, None, resume=args.resume, master=args.master, progress=False, metrics_port=port)
    if args.json:
        print(json.dumps(run.to_json(), indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    with escaped_output():
        setup_logging()
        args = _parser().parse_args(argv)
        return guarded("python -m statebed_job", lambda: _run(args))


if __name__ == "__main__":
    sys.exit(main())
