"""What PPO's iteration reads of the whole batch before its updates (appo/algorithms/ppo/algorithm.py): the no-grad
pass of the weights before any step (GAE's values, the frozen distribution of the KL loss, a centralised value's old
values), and a centralised value's batch (its input normaliser, the learner's own old values)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


def only_steps(x: Tensor, steps: Tensor | None) -> Tensor:
    """The [N, T, ...] values of the steps a normaliser learns from (`steps` [N, T] bool; None: all of them):
    not the zero observations of agents out of a game, nor the steps of a self-play pool's snapshots."""
    return x if steps is None else x[steps]


def update_pixel_normalizers(model: nn.Module, ranks: Any, obs: Tensor, steps: Tensor | None) -> None:
    """--normalize_images: each convnet's pixel statistics learn from the batch's observations obs [N, T, ...] (the
    steps that train, over every learner rank)."""
    for normalizer, pixels in model.pixel_batches(obs.flatten(0, 1) if steps is None else obs[steps]):
        ranks.update_normalizer(normalizer, pixels)


def central_value_batch(model: nn.Module, ranks: Any, b: dict[str, Tensor], steps: Tensor | None) -> dict[str, Tensor]:
    """A centralised value's batch (--value_input: `team_obs` in it): its input's normaliser learns the batch's team
    inputs (the steps that train, over every learner rank), and `values` is a copy for the learner's own old values
    (the actors computed none), filled by `before_updates` or the first loss pass. Another batch comes back as it is."""
    if "team_obs" not in b:
        return b
    T = b["rewards"].shape[1]
    if model.team_normalizer is not None:
        ranks.update_normalizer(model.team_normalizer, only_steps(b["team_obs"][:, :T], steps))
    return {**b, "values": b["values"].clone()}


@torch.no_grad()
def before_updates(
    model: nn.Module, b: dict[str, Tensor], recurrence: int, values: bool, dist: bool
) -> tuple[Tensor | None, Any]:
    """What the iteration reads of the weights before its updates, from one no-grad pass over the batch: with
    `values`, the normalised values [N, T + 1] of every trajectory (GAE's; the bootstrap step's last); with
    `dist`, the policy's distribution over the N * T steps, frozen (--kl_loss_coeff's: the behaviour policy
    itself in a synchronous run). None for what was not asked. A centralised value's values become the batch's
    old `values` (a copy: `central_value_batch`)."""
    N, T = b["rewards"].shape
    if N == 0:  # a rank whose trajectories were all too old
        return (b["rewards"].new_zeros(0, T + 1) if values else None), None
    obs, rnn, dones = b["obs"][:, :T], b["rnn_states"][:, :T], b["dones"]
    team = b.get("team_obs")
    steps_team = team[:, :T] if team is not None else None
    if dist:
        out = model(obs, b["actions"], rnn, dones, recurrence, team=steps_team)
        step_values, frozen = out.values, out.dist.frozen()
    else:
        step_values = model.values(obs, rnn, dones, recurrence, team=steps_team) if values else None
        frozen = None
    if not values:
        return None, frozen
    boot = model.value_of(b["obs"][:, T], b["rnn_states"][:, T], team=team[:, T] if team is not None else None)
    if team is not None:  # the clipped value loss's old values: the learner's own, before its updates
        b["values"][:] = step_values
    return torch.cat([step_values, boot.unsqueeze(1)], dim=1), frozen
