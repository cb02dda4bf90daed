"""Spark's state schema files, parsed whole: the layouts Spark 4.1-4.3 write, and the type grammar.

`state/<op>/0/[<store>/]_metadata/schema` is Java `DataOutputStream` output: `writeUTF(version)`,
then, in `v1`, the key and value schemas' JSON as two `writeUTF`s; in `v2` each as a chunked
string (`writeInt(chunks)`, a `writeUTF` per chunk). transformWithState's
`state/<op>/_stateSchema/<store>/<batch>_<uuid>` is `v3`: `writeInt(families)`, then per column
family its name, a short key schema id, the chunked key schema, a short value schema id, the
chunked value schema, the chunked key encoder spec and the chunked user key encoder schema. A
file with bytes left over, a JSON that is not a schema, or a type Spark has no name for is
damaged: Spark refuses to restart on it (measured by `benchmarks/restart_oracle.py`).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

from statebed_base.errors import CorruptFileError
from statebed_base.jsonsafe import loads_strict

__all__ = ["DEFAULT_FAMILY", "SchemaFile", "parse_schema_file", "type_problem"]

_V1, _V2, _V3 = "v1", "v2", "v3"
DEFAULT_FAMILY = "default"  # the one column family of a v1/v2 schema file

# DataType.nameToType in Spark 4.3, and the parameterised names its parser accepts
_NAMES = frozenset(
    [
        "null",
        "void",
        "boolean",
        "byte",
        "short",
        "integer",
        "long",
        "float",
        "double",
        "string",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "variant",
        "calendarinterval",
        "interval",
        "decimal",
    ]
)
_PARAMETERISED = re.compile(
    r"\A(?:decimal\(\s*\d+\s*,\s*-?\d+\s*\)|char\(\d+\)|varchar\(\d+\)|time\(\d\)"
    r"|interval (?:year|month|day|hour|minute|second)(?: to (?:year|month|day|hour|minute|second))?"
    r"|string collate [A-Za-z0-9_.\-]+)\Z"
)


@dataclass(frozen=True)
class SchemaFile:
    version: str  # "v1", "v2" or "v3"
    families: dict[str, tuple[Any, Any]]  # column family -> (key schema, value schema) as JSON documents


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"cut short at byte {len(self.data)} (a field needs {self.pos + n})")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def utf(self) -> str:
        raw = self.take(int.from_bytes(self.take(2), "big"))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"a string ending at byte {self.pos} is not UTF-8") from None

    def int32(self) -> int:
        (n,) = struct.unpack(">i", self.take(4))
        return int(n)

    def chunked(self, what: str) -> Any:
        chunks = self.int32()
        if not 0 < chunks <= 1 << 16:
            raise ValueError(f"{what}: {chunks} chunks")
        return _json("".join(self.utf() for _ in range(chunks)), what)


def _json(text: str, what: str) -> Any:
    try:
        return loads_strict(text, file="", what=what)
    except CorruptFileError as e:
        raise ValueError(e.detail) from None


def parse_schema_file(data: bytes) -> SchemaFile:
    """The file's schemas; ValueError saying what is wrong when it is not one Spark wrote whole."""
    r = _Reader(data)
    version = r.utf()
    families: dict[str, tuple[Any, Any]] = {}
    if version == _V1:
        key, value = r.utf(), r.utf()
        families[DEFAULT_FAMILY] = (_json(key, "key schema"), _json(value, "value schema"))
    elif version == _V2:
        families[DEFAULT_FAMILY] = (r.chunked("key schema"), r.chunked("value schema"))
    elif version == _V3:
        count = r.int32()
        if not 0 < count <= 1 << 16:
            raise ValueError(f"{count} column families")
        for _ in range(count):
            name = r.utf()
            r.take(2)
            key = r.chunked(f"column family {name!r} key schema")
            r.take(2)
            value = r.chunked(f"column family {name!r} value schema")
            r.chunked(f"column family {name!r} key encoder spec")
            r.chunked(f"column family {name!r} user key encoder schema")
            families[name] = (key, value)
    else:
        raise ValueError(f"schema file version {version[:20]!r} is not one Spark 4.1-4.3 writes")
    if r.pos != len(data):
        raise ValueError(f"{len(data) - r.pos} bytes after the last schema")
    for name, (key, value) in families.items():
        for what, doc in (("key", key), ("value", value)):
            problem = type_problem(doc, struct_only=True)
            if problem:
                raise ValueError(f"column family {name!r} {what} schema: {problem}")
    return SchemaFile(version, families)


def type_problem(doc: Any, *, struct_only: bool = False) -> str | None:
    """Why `doc` is no Spark DataType JSON (None when it is one)."""
    if isinstance(doc, str):
        if struct_only:
            return f"{doc[:40]!r} where a struct is expected"
        return None if doc in _NAMES or _PARAMETERISED.match(doc) else f"unknown type {doc[:40]!r}"
    if not isinstance(doc, dict):
        return f"{type(doc).__name__} where a type is expected"
    kind = doc.get("type")
    if struct_only and kind != "struct":
        return f"type {str(kind)[:40]!r} where a struct is expected"
    if kind == "struct":
        fields = doc.get("fields")
        if not isinstance(fields, list):
            return "a struct without a list of fields"
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not isinstance(f.get("nullable"), bool):
                return f"field {str(f)[:60]} lacks a name or a boolean nullable"
            if "metadata" in f and not isinstance(f["metadata"], dict):
                return f"field {f['name'][:40]!r} has metadata that is no object"
            problem = type_problem(f.get("type"))
            if problem:
                return f"field {f['name'][:40]!r}: {problem}"
        return None
    if kind == "array":
        return type_problem(doc.get("elementType")) or (None if isinstance(doc.get("containsNull"), bool) else "array without containsNull")
    if kind == "map":
        return (
            type_problem(doc.get("keyType"))
            or type_problem(doc.get("valueType"))
            or (None if isinstance(doc.get("valueContainsNull"), bool) else "map without valueContainsNull")
        )
    if kind == "udt":
        return type_problem(doc.get("sqlType"))
    return f"unknown type {str(kind)[:40]!r}"
