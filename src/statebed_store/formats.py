"""The one list of checkpoint formats a run, an experiment or a matrix cell names, and what each
implies. Every other module asks a `Format` for a property instead of comparing names
(`tests/test_format_literals.py` holds that).

- `v1`, `v2`: statebed's own store, writing checkpoint format V1 (files named by version: the
  positive control) or V2 (files named by version and unique id, SPARK-49374).
- `native-v1`, `native-v2`: Spark's own RocksDB store with `checkpointFormatVersion` 1 or 2,
  its sessions loading the JVM failpoint plug-in so faults reach Spark's checkpoint I/O.
- `native`: the name native V2 runs had before `native-v1` existed, without the plug-in. Old
  `run.json` files and scripts still say it; it stays what it was.

The code calls a format's name `format` everywhere. JSON keys stay as they are (`run.json`,
a run's `--json` summary and `verify state` say `mode`; the matrix and `demo.json` say
`format`); `to_run_json`/`from_run_json` map the one name to the other, and both hold a
`Format.name`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from statebed_base.errors import UsageError

__all__ = [
    "FORMATS",
    "LEGACY_NATIVE",
    "NATIVE_FORMATS",
    "NATIVE_V1",
    "NATIVE_V2",
    "PLUGIN_FORMATS",
    "RUN_FORMATS",
    "STATEBED_FORMATS",
    "STORE_FORMATS",
    "V1",
    "V2",
    "Format",
    "StoreFormat",
    "from_run_json",
    "get_format",
    "to_run_json",
]

StoreFormat = Literal["v1", "v2"]  # what statebed's own store writes (StoreOptions.format)


@dataclass(frozen=True)
class Format:
    name: str
    native: bool  # Spark's own RocksDB store, not statebed's
    ids: bool  # checkpoint files carry unique ids (format V2): what V2 verifies and V1 cannot
    plugin: bool = False  # a native session loads the JVM failpoint plug-in
    legacy: bool = False  # accepted where stored, never offered

    @property
    def version(self) -> int:
        """The checkpoint format version: 2 with ids, else 1 (Spark's checkpointFormatVersion)."""
        return 2 if self.ids else 1

    @property
    def store_format(self) -> StoreFormat:
        """What statebed's store writes in this format (native runs: statebed's reader of Spark's V1/V2)."""
        return "v2" if self.ids else "v1"

    def __str__(self) -> str:
        return self.name


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("v1", native=False, ids=False),
        Format("v2", native=False, ids=True),
        Format("native", native=True, ids=True, legacy=True),
        Format("native-v1", native=True, ids=False, plugin=True),
        Format("native-v2", native=True, ids=True, plugin=True),
    )
}
RUN_FORMATS = tuple(name for name, f in FORMATS.items() if not f.legacy)  # what `--format` offers, in order
STATEBED_FORMATS = frozenset(name for name, f in FORMATS.items() if not f.native)  # statebed's own store
NATIVE_FORMATS = frozenset(name for name, f in FORMATS.items() if f.native)  # Spark's store, `native` included
PLUGIN_FORMATS = frozenset(name for name, f in FORMATS.items() if f.plugin)  # Spark's store with the JVM plug-in
V1, V2, NATIVE_V1, NATIVE_V2 = FORMATS["v1"], FORMATS["v2"], FORMATS["native-v1"], FORMATS["native-v2"]
LEGACY_NATIVE = FORMATS["native"]  # what `statebed run --native` still means
STORE_FORMATS: tuple[StoreFormat, ...] = (V1.store_format, V2.store_format)


def get_format(name: str | Format, *, field: str = "format") -> Format:
    """The format called `name`; a UsageError naming `field` and the known names otherwise."""
    if isinstance(name, Format):
        return name
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise UsageError(f"{field}: unknown format {name!r} (known: {', '.join(RUN_FORMATS)})") from None


RUN_JSON_KEY = "mode"  # what run.json, a run's --json summary and `verify state` call the `format` field


def to_run_json(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with its `format` field under the key run.json has always used."""
    return {(RUN_JSON_KEY if k == "format" else k): v for k, v in doc.items()}


def from_run_json(doc: dict[str, Any]) -> dict[str, Any]:
    """A run.json-keyed `doc` with the format under the code's name, `format`."""
    return {("format" if k == RUN_JSON_KEY else k): v for k, v in doc.items()}
