"""One standalone cluster that consecutive standalone cells of a matrix submit to.

A run on `cluster: standalone` otherwise starts its own master and workers and stops them at its
end: about 7 s of a 30–35 s run on this 2-core machine, paid by every baseline and every faulted
run. Cells run one after another, so an application never shares the cluster with another's
faults; each run's executors are its own (an application's executors start with it and end
with it), and the run's targets see only its own application's executors
(`LocalTargets(..., shared_cluster=True)` filters them by the run's event log). No fault kind stops
a master or worker today, but one that did would find the cluster restarted before the next
run: every run first checks that the master and each worker are the recorded, living
processes, and starts the cluster afresh otherwise (or when a cell asks for another worker
count). Stopped at the end, on error and on Ctrl-C (`with`).
"""

from __future__ import annotations

from pathlib import Path

from statebed_base.log import get_logger, kv
from statebed_job.cluster import ClusterState, StandaloneCluster

__all__ = ["SharedCluster"]

log = get_logger("chaos.shared_cluster")


class SharedCluster:
    """The matrix's long-lived standalone cluster in `directory` (started on first use)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.starts = 0  # how many times a cluster was started (1 when every run reused it)
        self._workers: int | None = (
            None  # None until this object started one: a cluster left by another invocation is restarted, not adopted
        )

    def master(self, workers: int) -> str:
        """The master URL of a healthy cluster of `workers` workers, (re)started if it is not one."""
        cluster = StandaloneCluster(self.dir, workers=workers)
        st = cluster.running()
        if st is None or self._workers != workers or not _healthy(st):
            if st is not None or cluster.read_state() is not None:
                log.info("shared cluster: restarting", extra=kv(dir=str(self.dir), workers=workers))
            cluster.down()  # identity-checked: stops only the daemons its state file pins
            st = cluster.up()
            self._workers, self.starts = workers, self.starts + 1
        return st.master_url

    def close(self) -> None:
        StandaloneCluster(self.dir).down()

    def __enter__(self) -> SharedCluster:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _healthy(st: ClusterState) -> bool:
    """The master and every recorded worker are the processes the state file pins, alive."""
    daemons = [st.master(), *(st.worker(w) for w in st.workers)]
    return all(d is not None and d.alive() for d in daemons)
