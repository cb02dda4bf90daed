"""`make kube-tools` put every part where `installed` finds it (make kube-e2e's prerequisite)."""

from __future__ import annotations

import pytest

from statebed_base.installed import KUBE_TOOLS, installed


@pytest.mark.parametrize("component", sorted(KUBE_TOOLS))
def test_each_kube_tools_part_is_where_the_installer_put_it(component: str) -> None:
    path = installed(component)
    assert path.is_dir() and any(path.iterdir()), path
