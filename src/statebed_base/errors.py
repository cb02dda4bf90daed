"""One exception tree for everything the store can report.

Every message names the file, checkpoint or argument concerned and what is wrong with it,
so a user can act on it without reading a stack trace. The CLI maps the tree to exit codes:
`RunFailedError` (the run could not finish: Spark failed, a fault was injected) exits 4,
`ProtocolViolationError` (a task or file contradicts the commit protocol) exits 5, any other
`StatebedError` (bad input or environment) exits 2; anything else is a bug (exit 70).
"""

from __future__ import annotations

__all__ = [
    "AlreadyExistsError",
    "BaseIdMismatchError",
    "CheckpointFileError",
    "CheckpointLockedError",
    "CommitConflictError",
    "CorruptFileError",
    "FieldError",
    "ForeignFileError",
    "InjectedFault",
    "LineageError",
    "LocalInstanceError",
    "MisplacedKeyError",
    "MissingFileError",
    "NotRegularFileError",
    "ProtocolViolationError",
    "QueryFailedError",
    "RunFailedError",
    "StatebedError",
    "StorageError",
    "StorageUnavailableError",
    "StoreStateError",
    "UnknownFormatError",
    "UnplannableError",
    "UsageError",
]


class StatebedError(Exception):
    """Base of every error statebed raises on purpose."""


class UsageError(StatebedError):
    """A bad argument, option or configuration value."""


class FieldError(UsageError):
    """A bad value of one named field of an options object (`field` as the object spells it): a front
    (the CLI, an experiment file) names it its own way, e.g. `--snapshot-interval` for `snapshot_interval`."""

    def __init__(self, field: str, detail: str) -> None:
        self.field = field
        self.detail = detail
        super().__init__(f"{field} {detail}")


class CheckpointFileError(StatebedError):
    """Something is wrong with one checkpoint file; `file` is its path as the user sees it."""

    def __init__(self, file: str, detail: str) -> None:
        self.file = file
        self.detail = detail
        super().__init__(f"{file}: {detail}")


class MissingFileError(CheckpointFileError):
    """A file that must exist does not."""


class NotRegularFileError(CheckpointFileError):
    """A path where a regular file is expected is something else (FIFO, socket, device,
    directory, a symlink that resolves to none) or is larger than its reader allows: never opened blocking."""


class CorruptFileError(CheckpointFileError):
    """A file exists but its bytes are damaged: truncated, bad checksum, undecodable."""


class ForeignFileError(CorruptFileError):
    """A file's own record (snapshot metadata, checksum sidecar) names another store or checkpoint: copied in."""


class MisplacedKeyError(CorruptFileError):
    """A file (or loaded state) of partition p holds keys the partitioner that wrote it sends elsewhere; `keys` samples them."""

    def __init__(self, file: str, detail: str, keys: list[object]) -> None:
        super().__init__(file, detail)
        self.keys = keys


class UnknownFormatError(CheckpointFileError):
    """A file declares a format version this reader does not know."""


class LineageError(CheckpointFileError):
    """A lineage is malformed or contradicts the files it should describe."""


class UnplannableError(StatebedError):
    """No sequence of existing files rebuilds the requested (version, id)."""

    def __init__(self, target: str, detail: str, missing: list[str] | None = None) -> None:
        self.target = target
        self.detail = detail
        self.missing = list(missing or [])
        super().__init__(f"cannot load {target}: {detail}")


class CheckpointLockedError(StatebedError):
    """Another process holds a checkpoint's maintenance lock (rewind, cleanup); the message names it."""


class StorageError(StatebedError):
    """Checkpoint storage refused or failed a request."""


class StorageUnavailableError(StorageError):
    """Checkpoint storage cannot be reached or keeps failing; nothing was changed by us."""


class AlreadyExistsError(StorageError):
    """A create-only write found the file already there; the existing file was kept."""

    def __init__(self, file: str) -> None:
        self.file = file
        super().__init__(f"{file}: already exists; create-only write refused, existing file kept")


class CommitConflictError(AlreadyExistsError):
    """Another writer committed the same batch first."""


class StoreStateError(StatebedError):
    """The store was used out of its lifecycle (e.g. commit without load)."""


class LocalInstanceError(StatebedError):
    """The local RocksDB instance failed an operation (a full disk, an I/O error); the message
    names its directory. The instance is dropped: it may hold part of the operation."""


class ProtocolViolationError(StatebedError):
    """A participant broke the commit protocol (not bad input): the batch must not commit."""


class BaseIdMismatchError(ProtocolViolationError):
    """A task's base checkpoint id is not the one the commit log says was committed."""


class RunFailedError(StatebedError):
    """A run could not finish for a reason outside its input: Spark failed, a fault fired."""


class QueryFailedError(RunFailedError):
    """Spark did not start, or the streaming query failed; the first line of Spark's error is kept."""


class InjectedFault(RunFailedError):
    """Raised by a failpoint armed with the `error` action."""
