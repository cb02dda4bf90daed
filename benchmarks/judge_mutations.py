"""The judge's mutation score: every file a committed batch needs, damaged each way; is it caught?

For every fixture (Spark 4.1.4 / 4.3.0 native V2: agg, dedup_agg, join; Spark 4.3.0 after its
retention, minBatchesToRetain 3; a statebed V2 checkpoint with a losing attempt and snapshots)
the files a committed batch needs are found from the pristine checkpoint with the loads' own
planning (`statebed_store.retention`: the retained window, each committed version's plan and
own files, the SSTs its snapshots name, each file's `.crc` sidecar), and the commit entries.
Each mutation is applied to a working copy, `verify_lineage` runs in-process, the file is
restored byte for byte:

* needed files: delete, truncate, flip one byte in the body, replace with the same-version file
  of another partition (with its sidecar), replace with an older version's file of the same
  partition (with its sidecar); commit entries: swap two partitions' ids. Every one must be
  invalid, except what is no damage: deleting a snapshot whose version's changelog and an
  earlier base remain (V2 traces past a missing snapshot, seed example 3), deleting a
  committed changelog its own snapshot shadows, and deleting a sidecar (the file is still
  checked by its own block checksums). Those must stay valid.
* files no committed batch needs (orphans, files below the retained window): delete and
  flip must leave it valid.

A valid verdict on damage is "wrongly valid"; an invalid verdict on no damage "wrongly
invalid"; an unknown verdict counts as neither caught nor wrongly valid ("unknown").

    python benchmarks/judge_mutations.py [--quick] [--seed N] [--limit N] [--fixtures a,b] [--json]

A full run (every mutation of every fixture) is about 6,000 verifier runs: hours on this
machine. Its work directory follows TMPDIR (a tmpfs such as /dev/shm makes the verifier's
RocksDB opens 2-3x faster), and `--fixtures` splits it over processes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statebed_base.errors import StatebedError
from statebed_store import CheckpointRef, CommitLog, SnapshotUploader, StateStoreProvider, StoreFiles, StoreId, StoreOptions, open_storage
from statebed_store.commitlog import render_commit
from statebed_store.inspection import discover_stores, dump_state, store_index
from statebed_store.naming import CHANGELOG, COMMITS_DIR, SNAPSHOT, SST_DIR, StateFileName, parse_state_file
from statebed_store.plan import loadable_plan, plan_load
from statebed_store.retention import kept_window, plan_names
from statebed_verify import verify_lineage

NATIVE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "native"
TARBALLS = {
    "4.1.4": ("agg", "dedup_agg", "join"),
    "4.3.0": ("agg", "dedup_agg", "join"),
    "4.3.0-retention": ("agg", "dedup_agg"),
    "4.3.0-repartitioned": ("agg", "dedup_agg"),  # 3 -> 5 partitions at batch 5
    "4.3.0-repartitioned-down": ("agg",),  # 5 -> 2 partitions at batch 5
    "4.3.0-cleanup-race": ("count",),  # Spark's maintenance stopped mid-pass (tests/fixtures/make_cleanup_race_fixture.py)
    "4.3.0-rowchecksum": ("agg", "dedup_agg", "join"),  # rowChecksum.enabled: every row framed with its CRC32C
    "4.3.0-repartitioned-tws": ("tws",),  # transformWithState 2 -> 3 partitions: column family ids renumbered
}
DAMAGE = ("delete", "truncate", "flip", "other-partition", "older-version")


@dataclass(frozen=True)
class Mutation:
    fixture: str
    kind: str  # one of DAMAGE, "swap-ids", or "<kind> (not needed)"
    path: str  # checkpoint-relative
    expect_valid: bool


@dataclass
class Score:
    rows: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    population: dict[str, int] = field(default_factory=dict)  # fixture -> mutations it has (before any sampling)
    wrong: list[dict[str, Any]] = field(default_factory=list)

    def add(self, m: Mutation, verdict: object) -> None:
        c = self.rows.setdefault((m.fixture, m.kind), Counter())
        c["tried"] += 1
        if verdict == "unknown":
            c["unknown"] += 1
        elif verdict is True and not m.expect_valid:
            c["wrongly valid"] += 1
        elif verdict is False and m.expect_valid:
            c["wrongly invalid"] += 1
        else:
            c["caught" if not m.expect_valid else "kept valid"] += 1
        if verdict != m.expect_valid:
            self.wrong.append({"fixture": m.fixture, "kind": m.kind, "path": m.path, "verdict": verdict})


def build_statebed(root: Path, work: Path) -> None:
    """A statebed V2 checkpoint: 3 partitions x 10 versions, snapshots every 4, a losing attempt at (1, 4)."""
    storage = open_storage(root)
    up = SnapshotUploader()
    opts = StoreOptions(snapshot_interval=4)
    execs = [StateStoreProvider(storage, StoreId(0, p), opts.with_(local_dir=work / "exec"), uploader=up) for p in range(3)]
    spec = StateStoreProvider(storage, StoreId(0, 1), opts.with_(local_dir=work / "spec"), uploader=up)
    log = CommitLog(storage)
    bases: list[CheckpointRef] = [CheckpointRef(0)] * 3
    for v in range(1, 11):
        ids = []
        for p in range(3):
            if p == 1 and v == 4:
                with spec.load(v - 1, bases[p].id) as txn:
                    txn.put_many([b"p1-loser"], [b"x"])
                    txn.commit()
            with execs[p].load(v - 1, bases[p].id) as txn:
                txn.put_many([b"p%d-k%d" % (p, v % 5), b"p%d-n%d" % (p, v)], [b"v%d" % v, b"n"])
                res = txn.commit()
            bases[p] = CheckpointRef(res.version, res.checkpoint_id)
            ids.append([res.checkpoint_id])
        log.write(v - 1, {0: ids})
    assert up.drain(30)
    for e in [*execs, spec]:
        e.close()


def fixtures(work: Path) -> Iterator[tuple[str, Path]]:
    for tag, queries in TARBALLS.items():
        with tarfile.open(NATIVE / f"spark-{tag}.tar.gz") as tar:
            tar.extractall(work / "src", filter="data")
        for q in queries:
            yield f"spark-{tag}/{q}", work / "src" / f"spark-{tag}" / q
    root = work / "src" / "statebed-v2"
    build_statebed(root, work / "local")
    yield "statebed-v2", root


def needed_files(root: Path) -> tuple[set[str], set[str], set[str]]:
    """(needed files, no-damage deletes, not needed files), checkpoint-relative, from the pristine copy."""
    storage = open_storage(root)
    log = CommitLog(storage)
    window = kept_window(storage, log.batch_ids())
    assert window is not None
    needed: set[str] = set()
    harmless: set[str] = set()
    optional: set[str] = set()  # a kept entry's files below the window: any of them may be gone
    stores = discover_stores(storage)
    all_files: set[str] = set()
    for s in stores:
        files = StoreFiles(storage, s)
        idx = store_index(s, [t.store_name for t in stores if (t.operator, t.partition) == (s.operator, s.partition)])
        names: set[StateFileName] = set()
        snaps: set[CheckpointRef] = set()
        for b in log.batch_ids():
            rec = log.read(b)
            assert rec is not None
            if (count := rec.partition_count(s.operator)) is not None and s.partition >= count:
                continue  # a repartition: this batch has no such partition
            ref = CheckpointRef(rec.version, rec.id_for(s.operator, s.partition, idx))
            if not window.required(ref.version):  # Spark's one version more: vouched for where present, may be gone
                own = {StateFileName(ref.version, ref.id, k) for k in (CHANGELOG, SNAPSHOT) if files.has(ref, k)}
                names |= own
                optional.update(s.path(n.name) for n in own)
                continue
            plan, _ = loadable_plan(files, ref)
            names |= plan_names(plan)
            if plan.snapshot is not None:
                snaps.add(plan.snapshot)
            for kind in (CHANGELOG, SNAPSHOT):
                if files.has(ref, kind):
                    names.add(StateFileName(ref.version, ref.id, kind))
            if files.has_snapshot(ref) and files.has_changelog(ref):
                try:
                    plan_load(files, ref, exclude_snapshots=frozenset({ref}))
                    harmless.add(s.path(StateFileName(ref.version, ref.id, SNAPSHOT).name))
                except StatebedError:
                    pass  # no other route to this version: deleting its snapshot is damage
                harmless.add(s.path(StateFileName(ref.version, ref.id, CHANGELOG).name))
        for n in names:
            needed.add(s.path(n.name))
            if files.has_sidecar(CheckpointRef(n.version, n.id), n.kind):
                needed.add(s.path(n.name + ".crc"))
                harmless.add(s.path(n.name + ".crc"))
        for snap in snaps:
            needed |= {f"{s.dir}/{SST_DIR}/{f.dfs}" for f in files.snapshot_metadata(snap).sst_files}
        all_files |= {s.path(n.name) for n in files.files}
    harmless -= {p for p in harmless if p.endswith(".zip") and p[:-4] + ".changelog" not in needed}
    return needed, (harmless | optional) & needed, all_files - needed


def _read(root: Path, rel: str) -> bytes:
    return (root / rel).read_bytes()


def _partner(root: Path, rel: str, older: bool) -> str | None:
    """The same-version file of another partition, or the newest older version's file of this one (same kind)."""
    p = Path(rel)
    me = parse_state_file(p.name)
    if me is None:
        return None  # an SST or a sidecar: replaced only together with its state file

    def same_kind(d: Path) -> list[tuple[StateFileName, Path]]:
        return [(n, f) for f in d.iterdir() if (n := parse_state_file(f.name)) is not None and n.kind == me.kind] if d.is_dir() else []

    if older:
        cands = sorted((n.version, str(f.relative_to(root))) for n, f in same_kind(root / p.parent) if n.version < me.version)
        return cands[-1][1] if cands else None
    parts = p.parts
    i = parts.index("state") + 2  # state/<op>/<partition>/...
    for q in sorted((root / Path(*parts[:i])).iterdir()):
        if q.name != parts[i] and q.name.isdigit():
            hits = sorted(str(f.relative_to(root)) for n, f in same_kind(q.joinpath(*parts[i + 1 : -1])) if n.version == me.version)
            if hits:
                return hits[0]
    return None


def _ref_of(rel: str) -> tuple[StoreId, CheckpointRef]:
    parts = Path(rel).parts  # state/<op>/<partition>/[<store>/]<v>_<id>.zip
    name = parse_state_file(parts[-1])
    assert name is not None, rel
    return StoreId(int(parts[1]), int(parts[2]), parts[3] if len(parts) == 5 else "default"), CheckpointRef(name.version, name.id)


def _same_state(root: Path, rel: str, kind: str) -> bool:
    """Does the snapshot that would replace `rel` hold exactly the state `rel` holds (both read whole)?"""
    src = _partner(root, rel, older=kind == "older-version")
    if src is None:
        return False
    storage = open_storage(root)
    states = []
    for path in (rel, src):
        store, ref = _ref_of(path)
        states.append(sorted(dump_state(storage, store, ref)))
    return states[0] == states[1]


def _apply(root: Path, rel: str, kind: str) -> Callable[[], None] | None:
    """Mutate `rel` in place; returns the undo, or None when the mutation does not apply."""
    target = root / rel
    saved = {rel: target.read_bytes(), rel + ".crc": (root / (rel + ".crc")).read_bytes() if (root / (rel + ".crc")).exists() else None}

    def undo() -> None:
        for r, data in saved.items():
            if data is None:
                (root / r).unlink(missing_ok=True)
            else:
                (root / r).write_bytes(data)

    data = saved[rel]
    assert data is not None
    if kind == "delete":
        target.unlink()
    elif kind == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif kind == "flip":
        pos = len(data) // 2
        at = data.find(b'"value":') if rel.endswith(".crc") else -1
        if at >= 0:  # a sidecar: damage the checksum itself (its other fields are informational)
            pos = next(i for i in range(at + 8, len(data)) if data[i : i + 1].isdigit())
            target.write_bytes(data[:pos] + (b"1" if data[pos : pos + 1] != b"1" else b"2") + data[pos + 1 :])
            return undo
        target.write_bytes(data[:pos] + bytes([data[pos] ^ 0x40]) + data[pos + 1 :])
    else:
        src = _partner(root, rel, older=kind == "older-version")
        if src is None:
            return None
        target.write_bytes(_read(root, src))
        if (root / (src + ".crc")).exists():
            (root / (rel + ".crc")).write_bytes(_read(root, src + ".crc"))
    return undo


def _swap_ids(root: Path, name: str) -> Iterator[tuple[Mutation, Callable[[], None]]]:
    storage = open_storage(root)
    for b in CommitLog(storage).batch_ids():
        rec = CommitLog(storage).read(b)
        if rec is None or rec.state_ids is None:
            continue
        ids = {op: [list(p) for p in parts] for op, parts in rec.state_ids.items()}
        op = min(ids)
        if len(ids[op]) < 2:
            continue
        ids[op][0], ids[op][1] = ids[op][1], ids[op][0]
        path = root / COMMITS_DIR / str(b)
        saved = path.read_bytes()
        path.write_bytes(render_commit(ids))
        yield Mutation(name, "swap-ids", f"{COMMITS_DIR}/{b}", False), lambda p=path, d=saved: p.write_bytes(d)  # type: ignore[misc]


def mutations(name: str, root: Path) -> list[tuple[Mutation, str]]:
    needed, harmless, spare = needed_files(root)
    out = []
    for rel in sorted(needed):
        for kind in DAMAGE:
            if rel.endswith(".crc") and kind in ("other-partition", "older-version"):
                continue
            out.append((Mutation(name, kind, rel, kind == "delete" and rel in harmless), kind))
    for rel in sorted(spare):
        for kind in ("delete", "flip"):
            out.append((Mutation(name, f"{kind} (not needed)", rel, True), kind))
    return out


def run(
    quick: bool, seed: int, limit: int | None, work: Path, only: frozenset[str] = frozenset(), say: Callable[[str], None] | None = None
) -> Score:
    """`only`: the fixtures to judge (default every one; a sample's draws then differ from a run over all);
    `say`: a progress line per fixture and every 250 mutations (a full run takes hours)."""
    say = say or (lambda _line: None)
    score = Score()
    rng = random.Random(seed)
    for name, src in fixtures(work):
        if only and name not in only:
            continue
        root = work / "w" / name.replace("/", "-")
        shutil.copytree(src, root)
        base = verify_lineage(open_storage(root)).valid
        if base is not True:
            raise SystemExit(f"judge_mutations: the pristine fixture {name} is not valid ({base})")
        todo = mutations(name, root)
        score.population[name] = len(todo)
        if quick or limit:  # a sample of each stratum: the few files nobody needs would rarely be drawn
            k = limit or 12
            damage = [t for t in todo if "(not needed)" not in t[0].kind]
            spare = [t for t in todo if "(not needed)" in t[0].kind]
            todo = rng.sample(damage, min(len(damage), k)) + rng.sample(spare, min(len(spare), max(1, k // 4)))
        say(f"{name}: {len(todo)} mutation(s)")
        for i, (m, kind) in enumerate(todo, 1):
            if i % 250 == 0:
                say(f"{name}: {i}/{len(todo)}")
            if kind in ("other-partition", "older-version") and m.path.endswith(".zip") and _same_state(root, m.path, kind):
                m = Mutation(m.fixture, m.kind, m.path, True)  # the replacement holds the very same state: no damage
            undo = _apply(root, m.path, kind)
            if undo is None:
                continue
            try:
                score.add(m, verify_lineage(open_storage(root)).valid)
            finally:
                undo()
        swaps = _swap_ids(root, name)
        for m, undo in itertools.islice(swaps, 1) if quick or limit else swaps:
            try:
                score.add(m, verify_lineage(open_storage(root)).valid)
            finally:
                undo()
    return score


def table(score: Score) -> list[dict[str, Any]]:
    keys = ("tried", "caught", "kept valid", "wrongly valid", "wrongly invalid", "unknown")
    return [{"fixture": f, "mutation": k, **{x: c[x] for x in keys}} for (f, k), c in sorted(score.rows.items())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a seeded sample of 12 mutations per fixture")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--limit", type=int, help="a seeded sample per fixture: N damaging mutations and N/4 (at least 1) of files nobody needs"
    )
    ap.add_argument("--fixtures", default="", help="comma-separated fixture names (default: every one), e.g. spark-4.3.0/join")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    only = frozenset(f for f in args.fixtures.split(",") if f)
    known = {f"spark-{tag}/{q}" for tag, queries in TARBALLS.items() for q in queries} | {"statebed-v2"}
    if only - known:
        ap.error(f"unknown fixture(s): {', '.join(sorted(only - known))}; known: {', '.join(sorted(known))}")
    with tempfile.TemporaryDirectory(prefix="statebed-mutations-") as tmp:
        say = None if args.quiet else (lambda line: print(f"judge_mutations: {line}", file=sys.stderr, flush=True))
        score = run(args.quick, args.seed, args.limit, Path(tmp), only, say)
    rows = table(score)
    if args.json:
        print(json.dumps({"rows": rows, "population": score.population, "wrong": score.wrong}, indent=1))
    else:
        print(f"{'fixture':28} {'mutation':26} tried caught kept-valid wrongly-valid wrongly-invalid unknown")
        for r in rows:
            print(
                f"{r['fixture']:28} {r['mutation']:26} {r['tried']:5} {r['caught']:6} {r['kept valid']:10} "
                f"{r['wrongly valid']:13} {r['wrongly invalid']:15} {r['unknown']:7}"
            )
        for f, n in score.population.items():
            print(f"{f}: {n} file mutations in all")
        for w in score.wrong:
            print(f"WRONG: {w}", file=sys.stderr)
    return 1 if score.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
