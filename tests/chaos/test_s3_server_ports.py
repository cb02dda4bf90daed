"""The S3 server launcher chooses every port MinIO listens on (issue 36: a port the server derived
itself landed on a port another starter had picked) and starts again on fresh ports when one it
chose was taken before the server bound it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_helpers import listening_ports
from s3server import start_s3_server

from statebed_base.netaddr import free_ports
from statebed_chaos.infra import minio_server
from statebed_chaos.infra.minio_server import IN_USE, MinioPorts, minio_args


def _named_ports(args: list[str]) -> dict[str, int]:
    """`--address HOST:P` and `--console-address HOST:P` of a `minio server` command line."""
    return {
        flag.removeprefix("--"): int(args[i + 1].rpartition(":")[2])
        for i, flag in enumerate(args)
        if flag in ("--address", "--console-address")
    }


@pytest.fixture
def held() -> Iterator[int]:
    """A loopback port someone else listens on (this test) for as long as the test runs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield int(s.getsockname()[1])


def test_free_ports_are_distinct() -> None:
    ports = free_ports(64)
    assert len(set(ports)) == 64 and all(0 < p < 65536 for p in ports)


def test_the_command_line_names_every_port_on_loopback(tmp_path: Path) -> None:
    ports = MinioPorts.choose()
    args = minio_args("minio", tmp_path / "data", ports)
    assert _named_ports(args) == {"address": ports.s3, "console-address": ports.console}, args
    assert all(args[i + 1].startswith("127.0.0.1:") for i, a in enumerate(args) if a.endswith("address"))


@pytest.mark.s3
@pytest.mark.slow
def test_minio_listens_only_on_ports_it_was_given(tmp_path: Path) -> None:
    server = start_s3_server(tmp_path / "s3")
    try:
        given = set(_named_ports(server.args).values())
        listening = listening_ports(server.pid)
        assert _named_ports(server.args)["address"] in listening and listening <= given, (listening, server.args)
        assert server.endpoint == f"http://127.0.0.1:{_named_ports(server.args)['address']}"
    finally:
        server.stop()


@pytest.mark.s3
@pytest.mark.slow
def test_a_start_whose_port_was_taken_starts_again_on_fresh_ports(tmp_path: Path, held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first port set has its S3 port taken by a listener that never answers: that start exits
    with "already in use" in its log, and the launcher starts again on other ports."""
    chosen: list[MinioPorts] = []
    real = MinioPorts.choose

    def choose() -> MinioPorts:
        ports = real()
        if not chosen:
            ports = MinioPorts(held, ports.console)
        chosen.append(ports)
        return ports

    monkeypatch.setattr(minio_server.MinioPorts, "choose", staticmethod(choose))
    server = start_s3_server(tmp_path / "s3")
    try:
        assert len(chosen) == 2 and held in chosen[0].all() and held not in chosen[1].all()
        assert _named_ports(server.args)["address"] == chosen[1].s3
        assert IN_USE in server.log_path.read_text().lower()
        server.client().list_buckets()  # the second start serves S3
    finally:
        server.stop()


@pytest.mark.s3
@pytest.mark.slow
def test_starts_are_bounded_when_a_port_stays_taken(tmp_path: Path, held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[MinioPorts] = []
    real = MinioPorts.choose

    def choose() -> MinioPorts:
        starts.append(MinioPorts(held, real().console))
        return starts[-1]

    monkeypatch.setattr(minio_server.MinioPorts, "choose", staticmethod(choose))
    with pytest.raises(RuntimeError, match="2 starts in a row"):
        start_s3_server(tmp_path / "s3", attempts=2)
    assert len(starts) == 2
    assert (tmp_path / "s3" / "minio.log").read_text().lower().count(IN_USE) >= 2
