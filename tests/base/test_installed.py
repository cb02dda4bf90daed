"""Where the real stack's parts are (statebed_base.installed): asked of install/install.sh,
or named in the environment; a part that is not there is one line saying how to install it."""

from __future__ import annotations

from pathlib import Path

import pytest

from statebed_base.errors import UsageError
from statebed_base.installed import COMPONENTS, KUBE_TOOLS, installed

find = installed.__wrapped__  # uncached: each test sets its own environment


@pytest.mark.parametrize("component", sorted(set(COMPONENTS) - KUBE_TOOLS))
def test_this_machine_has_each_part_where_the_installer_put_it(component: str) -> None:
    """The storage stack `make test` installs first (`make stack`); kube-tools' parts are checked
    by `make kube-e2e` (tests/kube/test_tools.py), the only target that needs them."""
    path = find(component)
    assert path.exists(), path


def test_a_part_not_installed_is_one_line_naming_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATEBED_CACHE", str(tmp_path / "empty"))
    with pytest.raises(UsageError) as e:
        find("toxiproxy")
    assert "\n" not in str(e.value) and "run install/install.sh toxiproxy" in str(e.value), str(e.value)


def test_the_environment_names_a_part_and_a_wrong_name_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "minio"
    binary.write_bytes(b"")
    monkeypatch.setenv("STATEBED_MINIO", str(binary))
    assert find("minio") == binary
    monkeypatch.setenv("STATEBED_MINIO", str(tmp_path / "nope"))
    with pytest.raises(UsageError, match=r"STATEBED_MINIO=.*nope: no such file"):
        find("minio")
