"""What every subcommand shares: checkpoint arguments, opening storage, output."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statebed_base.durations import parse_duration
from statebed_base.errors import UsageError
from statebed_base.names import printable
from statebed_store import S3Settings, Storage, StoreId, open_storage
from statebed_store.location import is_remote, parse_location
from statebed_store.naming import DEFAULT_STORE, check_id
from statebed_verify import EXIT_CODES

__all__ = [
    "add_checkpoint_args",
    "add_s3_args",
    "add_store_args",
    "add_target_args",
    "bounded_int",
    "checked_target",
    "duration_arg",
    "emit_json",
    "fresh_output_dir",
    "non_negative_int",
    "open_checkpoint",
    "open_location",
    "output_file",
    "store_from_args",
]

EXIT_OK, EXIT_NEGATIVE = EXIT_CODES[True], EXIT_CODES[False]  # the one verdict table (unknown: EXIT_CODES["unknown"])


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (counts, sizes)."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def bounded_int(hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in 1..hi (the limits in statebed_chaos.limits)."""

    def parse(text: str) -> int:
        value = non_negative_int(text)
        if not 1 <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer >= 1 and <= {hi}, got {value}")
        return value

    return parse


def duration_arg(maximum: float) -> Callable[[str], float]:
    """An argparse type: seconds from `30`, `30s`, `2m` or `1h30m` (Locust's `-t`), in (0, maximum]."""

    def parse(text: str) -> float:
        try:
            return parse_duration(text, "", maximum=maximum)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def fresh_output_dir(path: Path, flag: str = "--out") -> Path:
    """`path` as a new or empty directory (created): a command never writes into another run's."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"{flag} {path}: exists and is not an empty directory")
    path.mkdir(parents=True, exist_ok=True)
    return path


def output_file(path: Path | None, flag: str) -> Path | None:
    """`path` if it is absent or a regular file: a FIFO, socket, device, directory or symlink
    there is refused before anything is written (it must never be replaced or opened blocking)."""
    if path is None:
        return None
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as e:
        raise UsageError(f"{flag} {path}: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"{flag} {path}: exists and is not a regular file; refusing to replace it")
    return path


def add_checkpoint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", metavar="CKPT", help="checkpoint root: a directory or s3://bucket/prefix")
    add_s3_args(p)


def add_s3_args(p: argparse.ArgumentParser) -> None:
    s3 = p.add_argument_group("S3 (for s3:// checkpoints; defaults from STATEBED_S3_ENDPOINT, AWS_* variables)")
    s3.add_argument("--s3-endpoint", help="e.g. http://127.0.0.1:9000")
    s3.add_argument("--s3-access-key")
    s3.add_argument("--s3-secret-key")


def add_store_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--operator", type=non_negative_int, required=required, help="stateful operator id")
    p.add_argument("--partition", type=non_negative_int, required=required, help="state partition id")
    p.add_argument("--store", default=DEFAULT_STORE, help="store name (default: %(default)s)")


def add_target_args(p: argparse.ArgumentParser, *, required: bool, version_help: str, id_help: str) -> None:
    p.add_argument("--version", type=non_negative_int, required=required, help=version_help)
    p.add_argument("--id", dest="checkpoint_id", help=id_help)


def checked_target(args: argparse.Namespace) -> tuple[int | None, str | None]:
    """`--version`/`--id` after the checks a load would make, so they fail before any I/O."""
    if args.checkpoint_id is not None:
        check_id(args.checkpoint_id, "--id")
        if args.version is None:
            raise UsageError("--id needs --version")
        if args.version == 0:
            raise UsageError("version 0 is the empty state and has no checkpoint id (--id)")
    return args.version, args.checkpoint_id


def open_checkpoint(args: argparse.Namespace, location: str | None = None, *, option: str = "CKPT") -> Storage:
    """The checkpoint `args.checkpoint` (or `location`, given as `option`) names: an existing
    directory or an s3:// prefix."""
    location = args.checkpoint if location is None else location
    if not location.strip():  # "" would silently mean the current directory
        raise UsageError(f"{option} {location!r} is empty: give a checkpoint directory or s3://bucket/prefix")
    if is_remote(location):
        return open_location(args, location)
    storage = open_storage(location)
    if not os.path.isdir(storage.url):
        raise UsageError(f"{'checkpoint' if option == 'CKPT' else option} {printable(storage.url)}: no such directory")
    return storage


def open_location(args: argparse.Namespace, location: str, *, create: bool = False) -> Storage:
    """`location` as storage: S3 settings from the `add_s3_args` options (else the environment)."""
    if is_remote(location):
        return open_storage(
            parse_location(location, S3Settings.from_env(args.s3_endpoint, args.s3_access_key, args.s3_secret_key)), create_bucket=create
        )
    return open_storage(location)


def store_from_args(args: argparse.Namespace) -> StoreId:
    return StoreId(args.operator, args.partition, args.store)


def emit_json(doc: Any) -> None:
    json.dump(doc, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
