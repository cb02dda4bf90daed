"""The types a report needs in the records it reads (run.json, verdict.json, load/verdict.json).

A record is JSON someone may have edited or damaged: a field of the wrong type (a `checks` that
is a string, a `params` that is a list) is unusable input, a UsageError naming the file and the
dotted field, never a crash of the renderer (exit 70). Only the fields the report reads are
checked, and only when present (an absent one has the renderer's default).

A schema is a tuple of types (`isinstance`), a one-item list (a list whose items match it), or
a dict of field -> schema (an object; its key "*" gives the schema of every value).
"""

from __future__ import annotations

from typing import Any, NoReturn

from statebed_base.errors import UsageError

__all__ = ["LOAD_VERDICT_FIELDS", "MATRIX_FIELDS", "RUN_FIELDS", "VERDICT_FIELDS", "check_types"]

_NONE = type(None)
_TEXT = (str, _NONE)
_NUMBER = (int, float, _NONE)
_VALID = (bool, str, _NONE)  # true, false, "unknown" (null: not judged)
_ANY = (object,)

_CHECK: dict[str, Any] = {
    "valid": _VALID,
    "anomalies": (int, list, _NONE),  # a count (`summarise`) or the anomalies
    "verdicts": {"*": {"valid": _VALID}},
    "run_dir": _TEXT,
    "error": _TEXT,
}

VERDICT_FIELDS: dict[str, Any] = {
    "name": _TEXT,
    "seed": (int, _NONE),
    "valid": _VALID,
    "anomalies": [{"check": _TEXT, "kind": _TEXT, "detail": _TEXT}],
    "faults": [{"id": _ANY, "proof": [_ANY], "detail": _ANY}],
    "checks": {"*": _CHECK},
    "reasons": [_ANY],
    "reproduce": _TEXT,
    "baseline_equal": (bool, _NONE),
    "run_dir": _TEXT,
    "seconds": _NUMBER,
    "exit_code": (int, _NONE),
}

# a load run's checks also hold its experiment's fault evidence, a list (`checks.faults`)
LOAD_VERDICT_FIELDS: dict[str, Any] = {"valid": _VALID, "checks": {"faults": [{"proof": [_ANY]}], "*": _CHECK}, "reasons": [_ANY]}

MATRIX_FIELDS: dict[str, Any] = {
    "runs": [{"valid": _VALID, "anomalies": [_ANY], "observed": (dict, _NONE), "run_dir": _TEXT}],
    "summary": {
        "v1_caught": (bool, _NONE),
        "skipped": [(dict,)],
        "failing": [(dict,)],
        "notes": [_ANY],
    },
}

RUN_FIELDS: dict[str, Any] = {
    "workload": (str,),
    "mode": (str,),
    "partitions": (int,),
    "checkpoint": (str,),
    "created": (str,),
    "source": (dict,),
    "params": {"extra_conf": (dict, _NONE), "checkpoint": _TEXT, "landing": _TEXT, "slow_task": _TEXT, "source": _TEXT},
}


def check_types(doc: Any, schema: Any, file: str, where: str = "") -> None:
    """UsageError `<file>: <field>: expected <types>, got <type>` at the first mismatch in `doc`."""
    if isinstance(schema, tuple):
        if not isinstance(doc, schema) or (isinstance(doc, bool) and bool not in schema and object not in schema):  # true is no int
            _fail(file, where, " or ".join("null" if t is _NONE else t.__name__ for t in schema), doc)
    elif isinstance(schema, list):
        if not isinstance(doc, list):
            _fail(file, where, "a list", doc)
        for i, item in enumerate(doc):
            check_types(item, schema[0], file, f"{where}[{i}]")
    else:
        if not isinstance(doc, dict):
            _fail(file, where, "an object", doc)
        for key, value in doc.items():
            sub = schema.get(key, schema.get("*"))
            if sub is not None:
                check_types(value, sub, file, f"{where}.{key}" if where else str(key))


def _fail(file: str, where: str, expected: str, got: Any) -> NoReturn:
    kind = "null" if got is None else type(got).__name__
    raise UsageError(f"{file}: {where or '(top level)'}: expected {expected}, got {kind}")
