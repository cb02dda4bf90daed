"""The matrix's long-lived standalone cluster: reused while healthy, started afresh when one of
its daemons is gone or another worker count is asked for, and gone after `close`."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from process_helpers import processes_naming

from statebed_base.processes import send_signal
from statebed_chaos.shared_cluster import SharedCluster
from statebed_job.cluster import StandaloneCluster


@pytest.mark.slow
def test_the_shared_cluster_is_reused_restarted_when_a_worker_is_gone_and_stopped_at_the_end(tmp_path: Path) -> None:
    d = tmp_path / "cluster"
    with SharedCluster(d) as shared:
        first = shared.master(2)
        assert shared.master(2) == first and shared.starts == 1  # healthy: the same cluster
        st = StandaloneCluster(d).read_state()
        assert st is not None and len(st.workers) == 2
        worker = st.worker(st.workers[0])
        assert worker is not None
        send_signal(worker, signal.SIGKILL)  # a daemon we started, pinned by its recorded identity
        second = shared.master(2)
        assert shared.starts == 2 and second != first  # a new master on a new port, its workers registered
        after = StandaloneCluster(d).read_state()
        assert after is not None and len(after.workers) == 2 and after.master_pid != st.master_pid
        assert shared.master(1) != second and shared.starts == 3  # another worker count: started afresh
        live = processes_naming(d)
        assert live, "the cluster's daemons name their directory"
    assert StandaloneCluster(d).read_state() is None and processes_naming(d) == []
