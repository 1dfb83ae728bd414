"""Seeds of restarted components. A process started again after a failure (an actor worker's `incarnation` > 0)
must not replay its predecessor's random streams (env seeds, action noise, task order): its seeds come from the
first start's seed and the incarnation through numpy's SeedSequence; the first start (incarnation 0) keeps the
seed as it is, so runs without restarts, serial mode included, are unchanged and reproducible."""

from __future__ import annotations

import numpy as np


def incarnation_seed(seed: int, incarnation: int, resumed_steps: int = 0) -> int:
    """The seed a component's `incarnation`-th start uses in place of `seed` (`seed` itself for the first); in a
    resumed run (`resumed_steps`: the env steps its checkpoints hold) a seed of its own, so that a resumed run goes
    on with new env seeds, action noise and policy draws instead of replaying its first start's."""
    if incarnation == 0 and resumed_steps == 0:
        return seed
    streams = [seed & (2**63 - 1), incarnation] + ([resumed_steps] if resumed_steps else [])
    return int(np.random.SeedSequence(streams).generate_state(1, np.uint32)[0])
