"""SAC's networks: the tanh-squashed Gaussian actor (the model actor workers act with, registered as model kind
"squashed_gaussian") and the twin Q-functions (the learner's only). Haarnoja et al. 2018, "Soft Actor-Critic
Algorithms and Applications", appendix C (the squashing and its log-likelihood correction).

Actions live in two scales: the env's box [low, high], which the env and the trajectory buffers see, and the
normalised box [-1, 1] = tanh(u), in which the critics read actions and log-probabilities and the entropy target
are measured (as in Stable-Baselines3). `to_env` and `to_unit` convert.

Until the learner's first gradient step (`updates == 0`, a buffer published with the weights), `act` draws
uniformly random actions from the box: the warm-up of --learning_starts, decided by the weights the actor
workers hold rather than by a message. Deterministic acting (evaluation, enjoy.py) is always tanh(mean)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from appo.config.cfg import Cfg
from appo.models.actor_critic import ActOutput
from appo.models.distributions import gaussian_log_prob
from appo.models.encoders import build_mlp, require_mlp
from appo.models.registry import register_model
from appo.numpy_policy.squashed_gaussian import LOG_STD_MAX, LOG_STD_MIN, TANH_EPS

# LOG_STD_MIN, LOG_STD_MAX (the log-std's clamp) and TANH_EPS: appo/numpy_policy/squashed_gaussian.py says why.
__all__ = ["LOG_STD_MAX", "LOG_STD_MIN", "TANH_EPS", "SquashedGaussianActor", "TwinQ"]
_LOG_2 = math.log(2.0)


def squashed_log_prob(u: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """log-density [B] of a = tanh(u) for u ~ N(mean, exp(log_std)^2), all [B, A]: the Gaussian's log-density of u
    minus log |det da/du| = sum log(1 - tanh(u)^2 + TANH_EPS). The epsilon, as in Haarnoja et al.'s code and
    Stable-Baselines3, changes the exact correction by less than 1e-4 per dimension while |u| < 3 and caps each
    dimension's term at log(TANH_EPS) when the action saturates: a policy that pins an action at the box's edge (full
    throttle) pays a bounded entropy cost instead of one that grows with |u|."""
    gaussian = gaussian_log_prob(u, mean, log_std)
    log_det = torch.log(1.0 - torch.tanh(u).square() + TANH_EPS).sum(-1)
    return gaussian - log_det


def polyak_update(target: list[Tensor], online: list[Tensor], tau: float) -> None:
    """target <- tau * online + (1 - tau) * target, in place, for every pair (the target critics' slow copy)."""
    with torch.no_grad():
        torch._foreach_lerp_(target, online, tau)


def _action_box(action_space: gym.Space) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise ValueError(f"--algo=sac: needs a 1-D continuous (Box) action space, the env has {action_space}")
    low, high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(f"--algo=sac: needs a bounded action box (tanh squashing), the env has {action_space}")
    return low, high


@register_model("squashed_gaussian")
class SquashedGaussianActor(nn.Module):
    """obs -> relu MLP (--actor_mlp_layers) -> mean and log-std heads; a = tanh(u), u ~ N(mean, std)."""

    obs_normalizer = None  # SAC reads raw observations (engine code asks models for these)
    returns_normalizer = None

    def __init__(self, cfg: Cfg, obs_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        require_mlp(cfg, obs_space)
        low, high = _action_box(action_space)
        self.spaces = (obs_space, action_space)  # for the learner's critics (appo/algorithms/sac/algorithm.py)
        self.trunk, size = build_mlp(int(np.prod(obs_space.shape)), cfg.actor_mlp_layers, "relu")
        self.mean_head = nn.Linear(size, len(low))
        self.log_std_head = nn.Linear(size, len(low))
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))  # gradient steps these weights had

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """(mean [B, A], log_std [B, A]) of the pre-squash Gaussian for obs [B, *obs_shape]."""
        x = self.trunk(obs.float().flatten(1))
        return self.mean_head(x), self.log_std_head(x).clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Reparameterised draw: (a in [-1, 1], [B, A]; its log-prob [B]), differentiable in the weights."""
        mean, log_std = self(obs)
        u = mean + log_std.exp() * torch.randn_like(mean)
        return torch.tanh(u), squashed_log_prob(u, mean, log_std)

    def to_env(self, a: Tensor) -> Tensor:
        return a * self.action_scale + self.action_bias

    def to_unit(self, action: Tensor) -> Tensor:
        """Env-scale actions back to [-1, 1] (clamped: float rounding at the box's edges)."""
        return ((action - self.action_bias) / self.action_scale).clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, obs: Tensor, rnn_states: Tensor, deterministic: bool = False) -> ActOutput:
        """One step for B envs, as ActorCritic.act: env-scale actions [B, A], the log-probs of their [-1, 1] form,
        zero values, the states passed through. Uniform over the box before the first update (the warm-up)."""
        mean, log_std = self(obs)
        if deterministic:
            a = torch.tanh(mean)
            log_probs = torch.zeros(len(a))
        elif int(self.updates) == 0:
            a = torch.rand_like(mean) * 2.0 - 1.0
            log_probs = torch.full((len(a),), -len(self.action_scale) * _LOG_2)  # uniform density on [-1, 1]^A
        else:
            u = mean + log_std.exp() * torch.randn_like(mean)
            a, log_probs = torch.tanh(u), squashed_log_prob(u, mean, log_std)
        return ActOutput(self.to_env(a), log_probs, torch.zeros(len(a)), rnn_states)


class TwinQ(nn.Module):
    """Two Q-functions (obs, a in [-1, 1]) -> value, relu MLPs of --critic_mlp_layers, evaluated as one: each
    layer's weights are stacked [2, in, out] and applied with one batched matmul, which on the CPU costs about
    what one network's layer costs (half the operator launches of two separate networks)."""

    def __init__(self, cfg: Cfg, obs_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        require_mlp(cfg, obs_space)
        sizes = [int(np.prod(obs_space.shape)) + len(_action_box(action_space)[0]), *cfg.critic_mlp_layers, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation, per network
            self.weights.append(nn.Parameter(torch.empty(2, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(2, 1, fan_out).uniform_(-bound, bound)))

    def forward(self, obs: Tensor, a: Tensor) -> Tensor:
        """Q-values [2, B] of obs [B, *obs_shape] and actions a [B, A] in [-1, 1]."""
        x = torch.cat([obs.float().flatten(1), a], dim=-1).expand(2, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = torch.relu(x)
        return x.squeeze(-1)
