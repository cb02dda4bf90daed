"""Names from outside, handled safely: printed (`printable`: a hostile file name cannot move the
cursor, recolour or forge output lines) and made into one path segment (`path_segment`: a user-given
name cannot leave the directory it is joined to)."""

from __future__ import annotations

import unicodedata

from .errors import UsageError

__all__ = ["MAX_SEGMENT_BYTES", "path_segment", "printable"]


def printable(text: object) -> str:
    """`text` safe to print on a terminal: control and other non-printable characters as `\\x1b`-style
    escapes, so a hostile file name cannot move the cursor, recolour or forge output lines."""
    s = str(text)
    return s if s.isprintable() else "".join(c if c.isprintable() else _escape(c) for c in s)


def _escape(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


MAX_SEGMENT_BYTES = 200  # a file name is at most 255 bytes; room for the prefixes we add (a time, a cell's seed)


def path_segment(value: object, field: str) -> str:
    """A user-given name (experiment name, fault id, cell name) that becomes one file or directory name.

    Refused, naming `field`: anything that could leave the directory it is joined to or forge
    a terminal line (`/`, `\\`, `..`, a leading `.`, NUL, newlines and every other control or
    format character), the empty name and names over MAX_SEGMENT_BYTES."""
    why = _segment_problem(value) if isinstance(value, str) else "expected a string"
    if not isinstance(value, str) or why is not None:
        raise UsageError(f"{field}: {value!r} cannot be a file name: {why}")
    return value


def _segment_problem(value: str) -> str | None:
    if not value:
        return "it is empty"
    if value.startswith("."):
        return "it starts with '.'"
    if "/" in value or "\\" in value or ".." in value:
        return "it holds '/', '\\' or '..'"
    if any(unicodedata.category(c).startswith("C") for c in value):
        return "it holds a control character (NUL, newline, escape, ...)"
    if len(value.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
        return f"longer than {MAX_SEGMENT_BYTES} bytes"
    return None
