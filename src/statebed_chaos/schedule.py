"""Realise an experiment's fault list: its explicit faults plus the seeded random schedule.

The same experiment and seed give the same list (kinds, trigger batches, delays, durations),
so a failing run's schedule replays; when each fault really fired depends on Spark's timing,
so the nemesis records the realised inject/heal times in the history.
"""

from __future__ import annotations

import random

from .experiment import Experiment
from .faults import FaultSpec, Trigger

__all__ = ["realise"]


def realise(exp: Experiment, seed: int) -> list[FaultSpec]:
    """Explicit faults as given, then `schedule.random.count` drawn ones (ids continue f<k+1>...)."""
    out = list(exp.faults)
    r = exp.schedule
    if r is None:
        return out
    rng = random.Random(f"statebed-schedule:{seed}:{exp.name}")
    taken = {s.id for s in out}
    n = len(out)
    drawn = []
    for _ in range(r.count):
        kind = rng.choice(r.kinds)
        batch = rng.randint(r.batches[0], r.batches[1])
        after_s = round(rng.uniform(0.0, r.after_s), 3) if r.after_s > 0 else 0.0
        for_s = None if r.for_s is None else round(rng.uniform(*r.for_s), 3)
        drawn.append((batch, after_s, kind, for_s))
    for batch, after_s, kind, for_s in sorted(drawn, key=lambda d: (d[0], d[1])):
        n += 1
        while f"f{n}" in taken:
            n += 1
        out.append(FaultSpec(id=f"f{n}", kind=kind, at=Trigger(batch=batch, after_s=after_s), for_s=for_s))
        taken.add(f"f{n}")
    return out
