"""Seeds of restarted components. A process started again after a failure (an actor worker's `incarnation` > 0)
must not replay its predecessor's random streams (env seeds, action noise, task order): its seeds come from the
first start's seed and the incarnation through numpy's SeedSequence; the first start (incarnation 0) keeps the
seed as it is, so runs without restarts, serial mode included, are unchanged and reproducible."""

from __future__ import annotations

import numpy as np


def incarnation_seed(seed: int, incarnation: int) -> int:
    """The seed a component's `incarnation`-th start uses in place of `seed` (`seed` itself for the first)."""
    if incarnation == 0:
        return seed
    return int(np.random.SeedSequence([seed & (2**63 - 1), incarnation]).generate_state(1, np.uint32)[0])
