"""The one list of checkpoint formats a run, an experiment or a matrix cell names, and what each
implies. Every other module asks a `Format` for a property instead of comparing names
(`tests/test_format_literals.py` holds that).

- `v1`, `v2`: statebed's own store, writing checkpoint format V1 (files named by version: the
  positive control) or V2 (files named by version and unique id, SPARK-49374).
- `native-v1`, `native-v2`: Spark's own RocksDB store with `checkpointFormatVersion` 1 or 2,
  its sessions loading the JVM failpoint plug-in so faults reach Spark's checkpoint I/O.
- `native`: the name native V2 runs had before `native-v1` existed, without the plug-in. Old
  `run.json` files and scripts still say it; it stays what it was.

The code holds a `Format`, and calls it `format`, everywhere: a name is parsed with `get_format`
once, where it comes in (run.json, an experiment's YAML, argv, a preset's table). A `Format` is
the string of its name (a `str` subclass, like a `StrEnum` member), so it is written to JSON as
that name with no conversion and compares equal to a name read back. JSON keys stay as they are
(`run.json`, a run's `--json` summary and `verify state` say `mode`; the matrix and `demo.json` say
`format`); `to_run_json`/`from_run_json` map the one key to the other.
"""

from __future__ import annotations

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


class Format(str):
    """A checkpoint format: its name (a `Format` is the string it is called, so it is written as
    such to JSON, compared with a name read from a file, and hashed like one) and what it implies.
    Only the instances in `FORMATS` exist: parse a name with `get_format`, at the edge."""

    __slots__ = ("ids", "legacy", "native", "plugin")
    native: bool  # Spark's own RocksDB store, not statebed's
    ids: bool  # checkpoint files carry unique ids (format V2): what V2 verifies and V1 cannot
    plugin: bool  # a native session loads the JVM failpoint plug-in
    legacy: bool  # accepted where stored, never offered

    def __new__(cls, name: str, *, native: bool, ids: bool, plugin: bool = False, legacy: bool = False) -> Format:
        self = super().__new__(cls, name)
        for attr, value in (("native", native), ("ids", ids), ("plugin", plugin), ("legacy", legacy)):
            object.__setattr__(self, attr, value)
        return self

    def __setattr__(self, attr: str, value: object) -> None:
        raise AttributeError(f"Format {self.name!r} is immutable")

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (get_format, (self.name,))  # unpickled (an executor's options) as the one instance

    def __copy__(self) -> Format:
        return self

    def __deepcopy__(self, _memo: dict[int, Any]) -> Format:
        return self

    def __repr__(self) -> str:
        return f"Format({self.name!r})"

    @property
    def name(self) -> str:
        return str.__str__(self)

    @property
    def version(self) -> int:
        """The checkpoint format version: 2 with ids, else 1 (Spark's checkpointFormatVersion)."""
        return 2 if self.ids else 1

    @property
    def store_format(self) -> StoreFormat:
        """What statebed's store writes in this format (native runs: statebed's reader of Spark's V1/V2)."""
        return "v2" if self.ids else "v1"


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
RUN_FORMATS = tuple(f for f in FORMATS.values() if not f.legacy)  # what `--format` offers, in order
STATEBED_FORMATS = frozenset(f for f in FORMATS.values() if not f.native)  # statebed's own store
NATIVE_FORMATS = frozenset(f for f in FORMATS.values() if f.native)  # Spark's store, `native` included
PLUGIN_FORMATS = frozenset(f for f in FORMATS.values() if f.plugin)  # Spark's store with the JVM plug-in
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
