"""Running the example experiments of the damage faults (`corrupt-snapshot`, `corrupt-row`) on real
Spark, and the proof every such run must carry: fired, Spark read the damaged file after the damage,
and the file's bytes changed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from statebed_chaos.experiment import load_experiment
from statebed_chaos.experiment_runner import run_experiment

EXAMPLES = Path(__file__).parents[1] / "examples" / "experiments"


def run_example(tmp_path: Path, name: str, out: str | None = None, **changes: Any) -> Any:
    """`examples/experiments/<name>.yaml` without its baseline (the other verifiers judge it), with
    `changes` to its fields (another format, storage), run into `tmp_path / (out or name)`."""
    exp = load_experiment(EXAMPLES / f"{name}.yaml")
    exp = replace(exp, verifiers=tuple(v for v in exp.verifiers if v != "baseline"), **changes)
    return run_experiment(exp, out_dir=tmp_path / (out or name), progress=False)


def damage_proof(res: Any) -> dict[str, Any]:
    """The first fault's proof, merged into one dict, after checking what every damage run must show."""
    ev = res.faults[0]
    assert ev["fired"] is True, (ev["detail"], ev["proof"])
    proof = {k: v for p in ev["proof"] for k, v in p.items()}
    assert proof["count"] >= 1 and all(r["file"].endswith("/" + proof["damaged"]["file"]) for r in proof["reads"])
    assert proof["damaged"]["sha256"][0] != proof["damaged"]["sha256"][1]
    return proof
