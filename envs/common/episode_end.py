"""What an env's info may say about the end of an episode, beyond gymnasium's terminated and truncated."""

from __future__ import annotations

# The info key of an episode end for learning only (terminated: nothing is bootstrapped past it) that the episode a
# run reports goes on past: Atari's lost life under episodic life, while the game and its score go on
# (envs/atari/atari.py). The actor workers' runner keeps counting the reported episode's return and length.
EPISODE_CONTINUES = "episode_continues"

# The info key of an episode's true objective, at the step that ends it: what population-based training
# optimises with --pbt_target_objective=true_objective (a win rate, say, where returns are shaped), averaged over
# a policy's recent episodes and written to tensorboard as episode/true_objective. A multi-agent env gives it per
# agent, in that agent's info.
TRUE_OBJECTIVE = "true_objective"
