"""Learner-side math: advantage/return targets (V-trace, GAE) and PPO loss terms.

The public API is ``from appo.learning import vtrace, gae``; loss terms live in ``appo.learning.losses``.
"""

from appo.learning.returns import gae, vtrace

__all__ = ["gae", "vtrace"]
