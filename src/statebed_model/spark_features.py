"""Spark 4.2–4.3's own repair machinery, as a run turns it on or off, and as a judge reads it back.

Spark's state store gained features whose purpose is surviving the damage statebed injects
(pyspark 4.3.0 carries them all; the settings are Spark's internal SQL confs):

* `auto-snapshot-repair` (SPARK-54121): a snapshot that fails to load is skipped; the store
  loads an older one (or starts empty) within `maxChangeFileReplay` versions and replays the
  changelogs from there. RocksDB allows it only with changelog checkpointing on (statebed's
  native runs always have it). Spark's default is on outside its own tests (`!Utils.isTesting`).
* `row-checksum` (SPARK-54106): a CRC32C per state row, checked on every changelog replay
  (and on reads when `readVerificationRatio` > 0). Spark records it in the offset log; the
  checkpoint's value wins on restart.
* `snapshot-lag-force` (SPARK-51358 / SPARK-54063): the coordinator reports stores whose snapshot
  uploads lag and forces a snapshot at their next commit.

A run names the features it wants on (`spark_features` in an experiment file; not given: Spark
4.3's defaults, `SPARK_DEFAULTS`); `feature_conf` sets every feature explicitly, on or off, so the
run's event log records what it ran with. `SnapshotRepair.from_properties` reads that record back for
the judge (`verify lineage`): a damaged snapshot that Spark's configured load routes around is a
note, not an anomaly.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from statebed_store.offset_conf import ROW_CHECKSUM_CONF

__all__ = [
    "FEATURES",
    "REPAIRED_METRIC",
    "ROW_CHECKSUM_CONF",
    "SPARK_DEFAULTS",
    "SnapshotRepair",
    "SparkFeature",
    "feature_conf",
]

_STORE = "spark.sql.streaming.stateStore"
REPAIR_CONF = f"{_STORE}.autoSnapshotRepair.enabled"
REPLAY_CONF = f"{_STORE}.autoSnapshotRepair.maxChangeFileReplay"
READ_RATIO_CONF = f"{_STORE}.rowChecksum.readVerificationRatio"
LAG_REPORT_CONF = f"{_STORE}.coordinatorReportSnapshotUploadLag"
FORCE_ON_LAG_CONF = f"{_STORE}.forceSnapshotUploadOnLag"
REPAIRED_METRIC = "rocksdbNumSnapshotsAutoRepaired"  # a state operator's custom metric in each query progress
DEFAULT_MAX_REPLAY = 500  # Spark 4.3's maxChangeFileReplay default


@dataclass(frozen=True)
class SparkFeature:
    """One feature: its name in experiment files, and the Spark settings that turn it on and off."""

    name: str
    description: str
    on: Mapping[str, str]
    off: Mapping[str, str]


FEATURES: dict[str, SparkFeature] = {
    f.name: f
    for f in (
        SparkFeature(
            "auto-snapshot-repair",
            "skip a snapshot that fails to load, load an older one and replay changelogs (SPARK-54121)",
            {REPAIR_CONF: "true"},
            {REPAIR_CONF: "false"},
        ),
        SparkFeature(
            "row-checksum",
            "a CRC32C per state row, verified on changelog replay and on every read (SPARK-54106)",
            {ROW_CHECKSUM_CONF: "true", READ_RATIO_CONF: "1"},
            {ROW_CHECKSUM_CONF: "false"},
        ),
        SparkFeature(
            "snapshot-lag-force",
            "the coordinator forces a snapshot on a store whose uploads lag (SPARK-51358, SPARK-54063)",
            {LAG_REPORT_CONF: "true", FORCE_ON_LAG_CONF: "true"},
            {FORCE_ON_LAG_CONF: "false"},
        ),
    )
}


# What Spark 4.3 turns on by itself outside its own tests (autoSnapshotRepair.enabled =
# !Utils.isTesting; forceSnapshotUploadOnLag true since 4.2; rowChecksum.enabled false).
SPARK_DEFAULTS: tuple[str, ...] = ("auto-snapshot-repair", "snapshot-lag-force")


def feature_conf(enabled: Collection[str]) -> dict[str, str]:
    """Every feature's settings, on for those in `enabled` and off for the rest (names from FEATURES)."""
    conf: dict[str, str] = {}
    for name, feature in FEATURES.items():
        conf.update(feature.on if name in enabled else feature.off)
    return conf


@dataclass(frozen=True)
class SnapshotRepair:
    """Whether Spark's load skips a damaged snapshot, and how many changelogs it replays at most
    from the older snapshot it falls back to (`max_replay`)."""

    enabled: bool = False
    max_replay: int = DEFAULT_MAX_REPLAY
    source: str = "not recorded"  # where the setting was read, for the judge's note

    @classmethod
    def from_properties(cls, props: Mapping[str, str], source: str) -> SnapshotRepair:
        """From a run's recorded Spark properties; unset is off (the judge never assumes a repair
        it cannot see configured)."""
        enabled = props.get(REPAIR_CONF, "false").strip().lower() == "true"
        try:
            replay = int(props.get(REPLAY_CONF, str(DEFAULT_MAX_REPLAY)))
        except ValueError:
            replay = DEFAULT_MAX_REPLAY
        return cls(enabled, max(replay, 1), source)

    def routes(self, target_version: int, base_version: int) -> bool:
        """Spark's repair reaches `target_version` from a snapshot at `base_version` (0: empty)."""
        return self.enabled and target_version - base_version <= self.max_replay
