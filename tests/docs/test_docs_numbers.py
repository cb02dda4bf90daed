"""Numbers and lists the docs state about the code, checked against the code: the load
benchmark's trigger, what `make bench` runs, which benchmarks measure both sides in one
process, and how many Spark runs the quick matrix makes."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from statebed_chaos.baseline import baseline_key
from statebed_chaos.matrix_presets import PRESETS, plan_cells
from statebed_load.load_run import LoadOptions

ROOT = Path(__file__).resolve().parents[2]
CHAOS_DOC = (ROOT / "docs" / "chaos.md").read_text()  # the matrix's reference page (moved from the README)
BENCH_README = (ROOT / "benchmarks" / "README.md").read_text()
SPAWNS = ("subprocess", "run_load", "Popen", "statebed_json", "run_to_end")  # how a benchmark starts a measurement as its own process
WORDS = {4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def named(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", text))


def test_the_load_benchmarks_trigger_is_the_one_it_runs_with() -> None:
    stated = [int(ms) for ms in re.findall(r"(\d+) ms trigger", BENCH_README)]
    assert stated == [LoadOptions().trigger_ms], stated


def test_make_bench_runs_what_the_docs_say() -> None:
    recipe = re.search(r"^bench:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert recipe is not None and recipe.group(1).endswith("python benchmarks/run_all.py")
    bench = run_all()
    said = re.search(r"`make bench` is `python benchmarks/run_all.py`: it runs (.+?)\.\s", BENCH_README, re.S)
    assert said is not None and named(said.group(1)) == set(bench.BENCHMARKS), said
    only = re.search(r"process\. (.+?) start Spark and run only when named in\s+`--only`", BENCH_README, re.S)
    assert only is not None and named(only.group(1)) == set(bench.SPARK_BENCHMARKS)
    assert "load_knee" not in set(bench.BENCHMARKS) | set(bench.SPARK_BENCHMARKS)
    assert "`load_knee` is not part of `run_all.py`" in BENCH_README


def test_which_benchmarks_measure_both_sides_in_one_process() -> None:
    said = re.search(
        r"The store benchmarks \((.+?)\) measure both sides in the\s+same process; (.+?) run every measurement", BENCH_README, re.S
    )
    assert said is not None
    one, fresh = named(said.group(1)), named(said.group(2))
    for name in one | fresh:
        source = (ROOT / "benchmarks" / f"{name}.py").read_text()
        assert any(s in source for s in SPAWNS) == (name in fresh), name
    assert "Every benchmark measures its baseline in the\nsame process" not in BENCH_README


def test_the_quick_matrix_makes_as_many_spark_runs_as_the_docs_say() -> None:
    cells, _ = plan_cells(PRESETS["quick"], PRESETS["quick"].seeds)
    runs = len(cells) + len({baseline_key(c.experiment, c.seed) for c in cells})  # a faulted run per cell, a baseline per key
    stated = f"{WORDS[len(cells)]} cells, {WORDS[runs]} Spark runs"
    assert stated in " ".join(CHAOS_DOC.split()), stated
    preset_source = (ROOT / "src" / "statebed_chaos" / "matrix_presets.py").read_text()
    assert f"{WORDS[len(cells)]} small cells, {WORDS[runs]} Spark runs" in preset_source
