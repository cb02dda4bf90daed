"""A TCP proxy that speaks the subset of Toxiproxy's HTTP API the storage faults use.

No registry reachable here ships a Toxiproxy server; this one is driven by the real
`toxiproxy-python` client, so experiment files work against it and against real Toxiproxy.
"""

from __future__ import annotations

from .api import VERSION, ProxyServer
from .toxics import TYPES

__all__ = ["TYPES", "VERSION", "ProxyServer"]
