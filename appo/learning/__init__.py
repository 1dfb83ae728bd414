"""Learner-side math: advantage/return targets (V-trace, GAE) and PPO loss terms.

The public API is ``from appo.learning import vtrace, gae``; loss terms live in ``appo.algorithms.common.losses``.
"""

from appo.algorithms.common.returns import gae, vtrace

__all__ = ["gae", "vtrace"]
