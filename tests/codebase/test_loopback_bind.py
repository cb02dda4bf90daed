"""Servers bind loopback unless told otherwise, loudly: the ingest service, Toxiproxy as experiments
start it (its API and the proxy "s3") and the driver's /metrics.

A refusal is checked in this namespace with addresses no interface here has (TEST-NET-2), so
nothing binds beyond loopback even on code that fails to refuse. A bind that must reach a
non-loopback address runs in a private network namespace (`unshare -n`: only `lo`, given
10.123.0.1), never in the host's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from statebed_base.errors import UsageError
from statebed_job.driver_metrics import DriverMetrics

PY = sys.executable
STATEBED = str(Path(PY).parent / "statebed")
OFF_MACHINE = "198.51.100.7"  # TEST-NET-2: on no interface here, so a bind of it fails rather than opens a port
NETNS_ADDR = "10.123.0.1"
_NETNS_SETUP = f'ip link set lo up && ip addr add {NETNS_ADDR}/32 dev lo && exec "$0" "$@"'


def in_netns(script: str, *args: str) -> dict[str, object]:
    """Run a Python script in a private network namespace; the JSON document it prints last."""
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", _NETNS_SETUP, PY, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def one_line_exit_2(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert (done.returncode, len(done.stderr.splitlines()), done.stdout) == (2, 1, ""), (cmd, done.returncode, done.stderr)
    return done.stderr


@pytest.mark.parametrize("host", [OFF_MACHINE, "0.0.0.0", "::"])
def test_ingest_service_refuses_a_non_loopback_host_without_public(tmp_path: Path, host: str) -> None:
    if host != OFF_MACHINE:  # on code that does not refuse, only the private namespace would see the bind
        out = in_netns(
            """
            import subprocess, sys
            done = subprocess.run([sys.executable, "-m", "statebed_load.service", *sys.argv[1:]], capture_output=True, text=True, timeout=60)
            print(__import__("json").dumps({"rc": done.returncode, "err": done.stderr}))
            """,
            "--landing", str(tmp_path / "landing"), "--host", host, "--ready-file", str(tmp_path / "ready.json"),
        )  # fmt: skip
        assert out["rc"] == 2 and len(str(out["err"]).splitlines()) == 1 and "--public" in str(out["err"]), out
    else:
        err = one_line_exit_2([PY, "-m", "statebed_load.service", "--landing", str(tmp_path / "landing"), "--host", host])
        assert "--host" in err and "--public" in err
    assert not (tmp_path / "ready.json").exists()


def test_ingest_service_public_binds_beyond_loopback_with_one_warning(tmp_path: Path) -> None:
    """What the chart runs (`--host 0.0.0.0 --public`): one warning line, and the service answers on a
    non-loopback address of its (private) namespace."""
    out = in_netns(
        """
        import json, sys, urllib.request
        from pathlib import Path
        from statebed_load.managed import start_ingest
        work = Path(sys.argv[1])
        proc, url = start_ingest(str(work / "landing"), work, extra=["--host", "0.0.0.0", "--public"])
        try:
            port = url.rpartition(":")[2]
            req = urllib.request.Request(f"http://%s:{port}/event" % sys.argv[2], data=b'{"key": 1, "value": 2}',
                                         headers={"Content-Type": "application/json"}, method="POST")
            with urllib.request.urlopen(req, timeout=30) as r:
                status = r.status
        finally:
            rc = proc.stop()
        print(json.dumps({"url": url, "status": status, "rc": rc, "err": proc.stderr.read_text()}))
        """,
        str(tmp_path), NETNS_ADDR,
    )  # fmt: skip
    assert str(out["url"]).startswith("http://0.0.0.0:") and out["status"] == 200
    warning = [line for line in str(out["err"]).splitlines() if line.strip()]
    assert len(warning) == 1 and "warning" in warning[0] and "0.0.0.0" in warning[0], out["err"]


def test_driver_metrics_bind_loopback_and_refuse_another_host(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--public"):
        DriverMetrics(0, tmp_path / "control.json", host=OFF_MACHINE)
    metrics = DriverMetrics(0, tmp_path / "control.json")
    try:
        assert metrics.server.server_address[0] == "127.0.0.1"
    finally:
        metrics.close()


def test_toxiproxy_and_its_proxy_listen_on_loopback(tmp_path: Path) -> None:
    from statebed_chaos.infra import storage_services
    from statebed_chaos.infra.proxy import toxiproxy_args

    assert toxiproxy_args("toxiproxy", 8474, 1)[1:3] == ["-host", "127.0.0.1"]
    with storage_services(tmp_path / "infra") as svc:
        assert svc.api.startswith("http://127.0.0.1:") and svc.proxy.listen.startswith("127.0.0.1:")
