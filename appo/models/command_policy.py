"""The command-conditioned policy of the reward-conditioned algorithms (model kind "command_policy"): Upside-Down
RL's behaviour function (Srivastava et al. 2019; the gated architecture of Schmidhuber's and the open LunarLander
implementations).

Its input is the observation as the actor workers store it: the env's state followed by the scaled command
(envs/common/reward_conditioning.py CommandObservation appends it, so the learner trains on exactly the input the policy
acted on, relabelled). state -> Linear -> sigmoid or tanh (--command_state_activation), command -> Linear ->
sigmoid, their product (the command gates the state's features) -> relu MLP (--command_mlp_layers after the first)
-> a categorical head (Discrete actions) or a Gaussian's mean with a state-independent log-std (Box actions).

Until the learner's first gradient step (`updates == 0`, a buffer published with the weights) `act` draws
uniformly random actions: UDRL's warm-up episodes, decided by the weights the actors hold. `command` (a buffer,
unscaled: desired return, horizon) is the learner's latest exploration command; it travels with the weights to
checkpoints, so enjoy.py can play it. The actor workers act with the same function in numpy
(NumpyCommandPolicy, appo/models/numpy_twins.py)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from appo.config.cfg import Cfg
from appo.models.actor_critic import ActOutput
from appo.models.distributions import Categorical, DiagGaussian
from appo.models.encoders import build_mlp
from appo.models.registry import register_model


@register_model("command_policy")
class CommandPolicy(nn.Module):
    obs_normalizer = None  # the state is read raw (engine code asks models for these)
    returns_normalizer = None

    def __init__(self, cfg: Cfg, obs_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        self.command_dims = cfg.traits.command_dims
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise ValueError(f"--algo={cfg.algo}: needs a flat Box observation space, the env has {obs_space}")
        if not isinstance(action_space, (gym.spaces.Discrete, gym.spaces.Box)):
            raise ValueError(f"--algo={cfg.algo}: needs Discrete or Box actions, the env has {action_space}")
        self.state_dims = int(obs_space.shape[0]) - self.command_dims
        self.is_discrete = isinstance(action_space, gym.spaces.Discrete)
        width, *rest = cfg.command_mlp_layers
        self.state_activation = torch.tanh if cfg.command_state_activation == "tanh" else torch.sigmoid
        self.state_layer = nn.Linear(self.state_dims, width)
        self.command_layer = nn.Linear(self.command_dims, width)
        self.trunk, size = build_mlp(width, rest, "relu")
        if self.is_discrete:
            self.num_actions = int(action_space.n)
            self.head = nn.Linear(size, self.num_actions)
            self.log_std = None
        else:
            self.head = nn.Linear(size, int(np.prod(action_space.shape)))
            self.log_std = nn.Parameter(torch.zeros(int(np.prod(action_space.shape))))
            self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32).reshape(-1))
            self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32).reshape(-1))
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))  # gradient steps these weights had
        self.register_buffer("command", torch.tensor([0.0, 1.0][: self.command_dims], dtype=torch.float32))

    def forward(self, obs: Tensor) -> Tensor:
        """Policy parameters [B, P] (logits, or Gaussian means) of obs [B, state + command dims]."""
        obs = obs.float()
        state, command = obs[:, : self.state_dims], obs[:, self.state_dims :]
        x = self.state_activation(self.state_layer(state)) * torch.sigmoid(self.command_layer(command))
        return self.head(self.trunk(x))

    def distribution(self, obs: Tensor) -> Categorical | DiagGaussian:
        params = self(obs)
        if self.is_discrete:
            return Categorical(params)
        return DiagGaussian(params, self.log_std.expand_as(params))

    @torch.no_grad()
    def act(self, obs: Tensor, rnn_states: Tensor, deterministic: bool = False) -> ActOutput:
        """One step for B envs, as ActorCritic.act: actions, their log-probs, zero values, the states passed
        through. Uniform random actions before the first update (the warm-up); the mode when deterministic."""
        B = len(obs)
        if int(self.updates) == 0 and not deterministic:
            if self.is_discrete:
                actions = torch.randint(self.num_actions, (B, 1))
                log_probs = torch.full((B,), -float(np.log(self.num_actions)))
            else:
                bounded = torch.isfinite(self.low) & torch.isfinite(self.high)
                uniform = self.low + (self.high - self.low) * torch.rand(B, len(self.low))
                actions = torch.where(bounded, uniform, torch.randn(B, len(self.low)))  # unbounded: N(0, 1)
                log_probs = torch.zeros(B)
            return ActOutput(actions, log_probs, torch.zeros(B), rnn_states)
        dist = self.distribution(obs)
        actions = dist.mode() if deterministic else dist.sample()
        log_probs = dist.log_prob(actions)
        if self.is_discrete:
            actions = actions.unsqueeze(-1)
        return ActOutput(actions, log_probs, torch.zeros(B), rnn_states)


def play_command(cfg: Cfg, env: gym.Env, model: CommandPolicy) -> tuple[float, float]:
    """Make `env` (built by envs.make_run_env) start its episodes from --command_return / --command_horizon where
    given, else from the command saved with `model` (the learner's last exploration command); returns it."""
    saved = [float(v) for v in model.command]
    command = [saved[0] if math.isnan(cfg.command_return) else cfg.command_return]
    if model.command_dims > 1:
        command.append(saved[1] if math.isnan(cfg.command_horizon) else cfg.command_horizon)
    env.get_wrapper_attr("set_default_command")(command)
    return tuple(command)  # type: ignore[return-value]
