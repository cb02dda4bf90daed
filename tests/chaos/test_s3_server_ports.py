"""The S3 server launcher chooses every port SeaweedFS listens on (issue 36: a derived gRPC port,
HTTP + 10000, landed on a port another starter had picked) and starts again on fresh ports when
one it chose was taken before the server bound it."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_helpers import listening_ports
from s3server import start_s3_server
from statebed_base.netaddr import free_ports

from statebed_chaos.infra import seaweedfs
from statebed_chaos.infra.seaweedfs import IN_USE, WeedPorts, weed_args

FLAG = re.compile(r"^-(?P<component>master|volume|filer|s3)\.port(?P<grpc>\.grpc)?=(?P<port>\d+)$")


def _port_flags(args: list[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for a in args:
        m = FLAG.match(a)
        if m:
            name = m["component"] + ("_grpc" if m["grpc"] else "")
            assert name not in found, f"{name} named twice: {args}"
            found[name] = int(m["port"])
    return found


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


def test_the_command_line_names_every_port_grpc_included_all_distinct(tmp_path: Path) -> None:
    ports = WeedPorts.choose()
    args = weed_args("weed", tmp_path / "data", tmp_path / "s3.json", ports)
    named = _port_flags(args)
    assert set(named) == {f"{c}{g}" for c in ("master", "volume", "filer", "s3") for g in ("", "_grpc")}, args
    assert sorted(named.values()) == sorted(ports.all()) and len(set(named.values())) == 8, named
    assert "-s3.port.iceberg=0" in args and "-s3.port.lance=0" in args  # the extra S3-side servers stay off


@pytest.mark.s3
@pytest.mark.slow
def test_seaweedfs_listens_on_exactly_the_ports_it_was_given(tmp_path: Path) -> None:
    server = start_s3_server(tmp_path / "s3")
    try:
        given = set(_port_flags(server.args).values())
        assert len(given) == 8 and listening_ports(server.pid) == given, (given, server.args)
        assert server.endpoint == f"http://127.0.0.1:{_port_flags(server.args)['s3']}"
    finally:
        server.stop()


@pytest.mark.s3
@pytest.mark.slow
def test_a_start_whose_grpc_port_was_taken_starts_again_on_fresh_ports(tmp_path: Path, held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first port set has the volume server's gRPC port taken (the CI failure): that start exits
    with "address already in use" in its log, and the launcher starts again on other ports."""
    chosen: list[WeedPorts] = []
    real = WeedPorts.choose

    def choose() -> WeedPorts:
        ports = real()
        if not chosen:
            ports = WeedPorts(**{**vars(ports), "volume_grpc": held})
        chosen.append(ports)
        return ports

    monkeypatch.setattr(seaweedfs.WeedPorts, "choose", staticmethod(choose))
    server = start_s3_server(tmp_path / "s3")
    try:
        assert len(chosen) == 2 and held in chosen[0].all() and held not in chosen[1].all()
        assert _port_flags(server.args)["volume_grpc"] == chosen[1].volume_grpc
        assert f"grpc port {held}" in server.log_path.read_text() and IN_USE in server.log_path.read_text().lower()
        server.client().list_buckets()  # the second start serves S3
    finally:
        server.stop()


@pytest.mark.s3
@pytest.mark.slow
def test_starts_are_bounded_when_a_port_stays_taken(tmp_path: Path, held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[WeedPorts] = []
    real = WeedPorts.choose

    def choose() -> WeedPorts:
        starts.append(WeedPorts(**{**vars(real()), "master_grpc": held}))
        return starts[-1]

    monkeypatch.setattr(seaweedfs.WeedPorts, "choose", staticmethod(choose))
    with pytest.raises(RuntimeError, match="2 starts in a row"):
        start_s3_server(tmp_path / "s3", attempts=2)
    assert len(starts) == 2
    assert (tmp_path / "s3" / "seaweedfs.log").read_text().lower().count(IN_USE) >= 2
