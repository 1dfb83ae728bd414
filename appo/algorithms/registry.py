"""The learner's algorithms by `--algo`: the class that does its math (appo/algorithms/base.py `Algorithm`). What
the rest of the engine needs to know of an algorithm (flags, defaults, PBT ranges, traits) is configuration, in
appo/config/algorithms/; MAML-TRPO runs its own loop (appo/maml/) and has no learner class here.

An algorithm is data plus math: the model it builds, how it consumes data, `update(batch) -> stats`, its
checkpoint state. It never starts a process or opens a queue. docs/algorithms.md shows how to add one.
"""

from __future__ import annotations

from appo.algorithms.base import Algorithm
from appo.algorithms.ppo.algorithm import PPO
from appo.algorithms.reward_conditioned.rcp import RCP, RCPA
from appo.algorithms.reward_conditioned.udrl import UDRL
from appo.algorithms.sac.algorithm import SAC

LEARNER_ALGORITHMS: dict[str, type[Algorithm]] = {"appo": PPO, "sac": SAC, "udrl": UDRL, "rcp_r": RCP, "rcp_a": RCPA}


def algorithm_class(name: str) -> type[Algorithm]:
    """The Algorithm subclass the learner trains `--algo=name` with; ValueError naming the valid ones."""
    try:
        return LEARNER_ALGORITHMS[name]
    except KeyError:
        valid = ", ".join(sorted(LEARNER_ALGORITHMS))
        raise ValueError(f"--algo={name}: no learner algorithm of that name (learner algorithms: {valid})") from None
