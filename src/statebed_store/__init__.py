"""statebed_store: a RocksDB state store with Spark's checkpoint format V2 (SPARK-49374).

Every checkpoint file carries a unique id (`<version>_<id>.changelog|.zip`), records its
lineage back to the last snapshot, and is loaded by `(version, id)`, never by name alone,
so exactly one linear history is ever read. The legacy V1 format is kept as a mode.

    from statebed_store import StateStoreProvider, StoreId, open_storage

    storage = open_storage("/tmp/ckpt")                 # or "s3://bucket/prefix"
    provider = StateStoreProvider(storage, StoreId(operator=0, partition=0))
    with provider.load(0) as txn:                        # version 0: empty
        txn.put_many([b"k"], [b"v"])
        result = txn.commit()                            # version 1, new id, base id
"""

from __future__ import annotations

from .cleanup import CleanupReport, cleanup_store, retained_versions
from .commitlog import CommitLog, CommitRecord, committed_id
from .config import S3Settings, StoreOptions
from .lineage import CheckpointRef
from .naming import DEFAULT_STORE, StoreId
from .plan import LoadPlan, check_plan, plan_load
from .storage import CountingStorage, LocalStorage, S3Storage, Storage, open_storage
from .store import CommitResult, StateStore, StateStoreProvider
from .store_files import HeaderCache, StoreFiles
from .uploader import SnapshotUploader, default_uploader

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_STORE",
    "CheckpointRef",
    "CleanupReport",
    "CommitLog",
    "CommitRecord",
    "CommitResult",
    "CountingStorage",
    "HeaderCache",
    "LoadPlan",
    "LocalStorage",
    "S3Settings",
    "S3Storage",
    "SnapshotUploader",
    "StateStore",
    "StateStoreProvider",
    "Storage",
    "StoreFiles",
    "StoreId",
    "StoreOptions",
    "check_plan",
    "cleanup_store",
    "committed_id",
    "default_uploader",
    "open_storage",
    "plan_load",
    "retained_versions",
]
