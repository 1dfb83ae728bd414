"""`--algo=rcp_r` and `--algo=rcp_a`: Reward-Conditioned Policies (Kumar, Peng and Levine 2019, "Reward-Conditioned
Policies", algorithm 1 with exponential weights) on the engine's actor workers.

The policy (appo/models/command_policy.py, a one-dimensional command) maps (state, target) to actions and is trained
on a
FIFO replay of its recent episodes by exponentially weighted likelihood: each step (s, a) is relabelled with its
target Z, the discounted return-to-go (RCP-R) or the advantage against a value function trained on TD(lambda)
targets (RCP-A), and weighted by min(exp(standardised Z / beta), max). Rollouts condition on targets drawn from a
Gaussian fitted to the replay's targets, shifted up by one standard deviation: one draw per env per iteration,
written to the control channel's command table. Acting conditions on what training labels with:
RCP-R with --rcp_condition=episode (the default) labels every step with its episode's discounted return and the
command holds for the episode; with --rcp_condition=step (the paper's return-to-go) each step gets its own Z_t and the
command follows the episode as the labels do, Z_{t+1} = (Z_t - r_t) / gamma (envs/common/reward_conditioning.py, the
spec's command_follows). RCP-A's advantage target holds for the whole episode.
Stitching episodes, warm-up, iterations, the greedy evaluation and checkpoints work as in UDRL
(appo/algorithms/reward_conditioned/udrl.py). An episode's end is treated as terminal (no bootstrap at a time limit)."""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from appo.algorithms.base import Algorithm, NonFiniteGuard, adam
from appo.algorithms.common.returns import return_to_go
from appo.algorithms.reward_conditioned.udrl import HISTORY_COLUMNS, greedy_returns, remember, stitch
from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.models.actor_critic import build_mlp
from appo.models.command_policy import CommandPolicy
from appo.models.device import to_device, to_host
from appo.protocol.control import set_commands
from appo.utils.logging import log


# --- the math -------------------------------------------------------------------------------------------------
def lambda_returns(rewards: Tensor, values: Tensor, gamma: float, lam: float) -> Tensor:
    """TD(lambda) targets [L] of one whole episode: G_t = r_t + gamma ((1 - lam) V(s_{t+1}) + lam G_{t+1}), with
    V = 0 and G = 0 after the last step (the episode's end is terminal). rewards, values: [L]."""
    r, v = rewards.double().numpy(), values.double().numpy()
    out = np.empty_like(r)
    g = next_value = 0.0
    for t in range(len(r) - 1, -1, -1):
        g = r[t] + gamma * ((1.0 - lam) * next_value + lam * g)
        out[t] = g
        next_value = v[t]
    return torch.from_numpy(out).to(rewards.dtype)


def exponential_weights(targets: Tensor, beta: float, max_weight: float) -> Tensor:
    """min(exp((Z - mean(Z)) / (std(Z) beta)), max_weight) for the targets Z [N] (std over N, 1 when Z is
    constant)."""
    std = targets.std(unbiased=False)
    standardised = (targets - targets.mean()) / (std if std > 0 else 1.0)
    return torch.exp(standardised / beta).clamp(max=max_weight)


class EpisodeFifo:
    """Whole episodes, the newest kept while their steps fit in `capacity` transitions."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.episodes: deque[tuple[Tensor, Tensor, Tensor]] = deque()
        self.transitions = 0

    def __len__(self) -> int:
        return len(self.episodes)

    def add(self, states: Tensor, actions: Tensor, rewards: Tensor) -> None:
        self.episodes.append((states, actions, rewards))
        self.transitions += len(rewards)
        while self.transitions > self.capacity and len(self.episodes) > 1:
            self.transitions -= len(self.episodes.popleft()[2])

    def state_dict(self) -> dict[str, Any]:
        if not self.episodes:
            return {"lengths": torch.zeros(0, dtype=torch.int64)}
        parts = list(zip(*self.episodes, strict=True))
        lengths = torch.tensor([len(r) for r in parts[2]], dtype=torch.int64)
        return {
            "lengths": lengths,
            **{k: torch.cat(p) for k, p in zip(("states", "actions", "rewards"), parts, strict=True)},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episodes, self.transitions = deque(), 0
        if len(state["lengths"]) == 0:
            return
        sizes = state["lengths"].tolist()
        for s, a, r in zip(*(torch.split(state[k], sizes) for k in ("states", "actions", "rewards")), strict=True):
            self.add(s.clone(), a.clone(), r.clone())


# --- the algorithm --------------------------------------------------------------------------------------------
class RCP(Algorithm):
    """RCP-R; `RCPA` conditions on advantages instead."""

    advantage: ClassVar[bool] = False

    def __init__(self, cfg: Cfg, derived: Derived, model: nn.Module, device: str, guard: NonFiniteGuard) -> None:
        super().__init__(cfg, derived, model, device, guard)
        self.model: CommandPolicy = model  # type: ignore[assignment]
        self.optimizer = adam(model.parameters(), cfg.learning_rate, device)
        self.value: nn.Module | None = None
        if self.advantage:
            trunk, size = build_mlp(self.model.state_dims, cfg.rcp_value_layers, "relu")
            self.value = nn.Sequential(trunk, nn.Linear(size, 1)).to(device)
            self.value_optimizer = adam(self.value.parameters(), cfg.learning_rate, device)
        self.replay = EpisodeFifo(cfg.rcp_replay_transitions)
        self.partial: dict[int, list[tuple[Tensor, Tensor, Tensor]]] = {}
        self.episodes = self.since_iteration = self.iterations = 0
        self.new_returns: list[float] = []
        self.last_iteration_at = time.monotonic()
        self.history: list[list[float]] = []
        self.eval_env: gym.Env | None = None
        self.last: dict[str, float] = {}
        self.target = (math.nan, math.nan)  # (mean, std) of the last iteration's start targets

    def set_cfg(self, cfg: Cfg) -> None:
        super().set_cfg(cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.learning_rate

    # --- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        counters = {"episodes": self.episodes, "since_iteration": self.since_iteration, "iterations": self.iterations}
        history = torch.tensor(self.history, dtype=torch.float64).reshape(-1, len(HISTORY_COLUMNS))
        target = torch.tensor(self.target, dtype=torch.float64)
        state = {"optimizer": self.optimizer.state_dict(), "rcp": counters | {"history": history, "target": target}}
        if self.value is not None:
            state |= {"value": self.value.state_dict(), "value_optimizer": self.value_optimizer.state_dict()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.value is not None:
            self.value.load_state_dict(state["value"])
            self.value_optimizer.load_state_dict(state["value_optimizer"])
        counters = state["rcp"]
        self.episodes, self.since_iteration = int(counters["episodes"]), int(counters["since_iteration"])
        self.iterations, self.history = int(counters["iterations"]), counters["history"].tolist()
        if "target" in counters and not torch.isnan(counters["target"]).any():
            self.write_commands(*counters["target"].tolist())  # each env draws its own target again
        elif self.iterations > 0 and self.control is not None:  # a checkpoint from before the target was kept
            set_commands(self.control["commands"], self.model.command.tolist())

    def replay_state(self) -> dict[str, Any] | None:
        return self.replay.state_dict()

    def load_replay_state(self, state: dict[str, Any]) -> None:
        self.replay.load_state_dict(state)
        log.info("RCP: replay of %d episodes (%d transitions) loaded", len(self.replay), self.replay.transitions)

    # --- trajectories and iterations ----------------------------------------------------------------
    def update(self, batch: dict[str, Tensor], env_steps: int) -> dict[str, float]:
        for states, actions, rewards in stitch(batch, self.model.state_dims, self.partial):
            self.replay.add(states, actions, rewards)
            self.new_returns.append(float(rewards.double().sum()))
            self.episodes += 1
            self.since_iteration += 1
        due = self.cfg.udrl_episodes_per_iteration if self.iterations else max(self.cfg.udrl_warmup_episodes, 1)
        if self.since_iteration >= due and len(self.replay) > 0:
            return remember(self, self.iteration())
        return dict(self.last)

    def targets(self) -> dict[str, Tensor]:
        """Every step of the replay with its target (and, RCP-A, its TD(lambda) value target); `starts`: the
        targets of the episodes' first steps; `weight_targets`: what the exponential weights are computed from (the
        targets, or with --rcp_weight_by=return_to_go each step's own discounted return-to-go)."""
        episodes = list(self.replay.episodes)
        states = torch.cat([e[0] for e in episodes])
        out = {"states": states, "actions": torch.cat([e[1] for e in episodes])}
        gamma = self.cfg.gamma
        if self.value is None:
            to_go = [return_to_go(e[2], gamma) for e in episodes]
            per_episode = to_go
            if self.cfg.rcp_condition == "episode":  # every step: its episode's discounted return
                per_episode = [z[:1].expand(len(z)) for z in to_go]
            out["targets"] = torch.cat(per_episode)
            out["starts"] = torch.stack([z[0] for z in per_episode])
            out["weight_targets"] = torch.cat(to_go) if self.cfg.rcp_weight_by == "return_to_go" else out["targets"]
            return out
        with torch.no_grad():
            values = to_host(self.value(to_device(states, self.device)).squeeze(-1))
        lengths = [len(e[2]) for e in episodes]
        returns = torch.cat(
            [
                lambda_returns(e[2], v, gamma, self.cfg.rcp_lambda)
                for e, v in zip(episodes, values.split(lengths), strict=True)
            ]
        )
        out["value_targets"] = returns
        out["targets"] = returns - values
        out["starts"] = out["weight_targets"] = out["targets"]
        return out

    def iteration(self) -> dict[str, float]:
        """Weighted likelihood (and, RCP-A, value) updates on the replay, then the next rollout targets."""
        cfg, model = self.cfg, self.model
        data = self.targets()
        weights = exponential_weights(data["weight_targets"], cfg.rcp_beta, cfg.rcp_max_weight)
        commands = (data["targets"] * cfg.command_scale[0]).unsqueeze(-1)
        inputs = to_device(torch.cat([data["states"], commands], dim=-1), self.device)
        actions = to_device(data["actions"].reshape(len(inputs), -1), self.device)
        if model.is_discrete:
            actions = actions.reshape(-1)
        losses, value_losses = [], []
        for _ in range(cfg.rcp_updates_per_iteration):
            idx = torch.randint(len(inputs), (cfg.batch_size,))
            log_probs = model.distribution(inputs[idx]).log_prob(actions[idx])
            loss = -(to_device(weights[idx], self.device) * log_probs).mean()
            grad_norm = self.guard.step(loss, list(model.parameters()), self.optimizer, cfg.max_grad_norm)
            if grad_norm == grad_norm:  # not NaN: the step was taken
                model.updates += 1
                losses.append(float(loss.detach()))
            if self.value is not None:
                v = self.value(to_device(data["states"][idx], self.device)).squeeze(-1)
                value_loss = (v - to_device(data["value_targets"][idx], self.device)).square().mean()
                self.guard.step(value_loss, list(self.value.parameters()), self.value_optimizer, cfg.max_grad_norm)
                value_losses.append(float(value_loss.detach()))
        self.since_iteration = 0
        self.iterations += 1
        mean, std = float(data["starts"].mean()), float(data["starts"].std(unbiased=False))
        self.write_commands(mean, std)
        returns = np.array([float(e[2].double().sum()) for e in self.replay.episodes])
        stats = {
            "loss": float(np.mean(losses)) if losses else math.nan,
            "rcp/command_mean": mean + std,
            "rcp/target_std": std,
            "rcp/replay_return": float(returns.mean()),
            "rcp/weight_max": float(weights.max()),
            "rcp/episode_return": float(np.mean(self.new_returns)) if self.new_returns else math.nan,
            "rcp/seconds_per_iteration": time.monotonic() - self.last_iteration_at,
            "rcp/iterations": float(self.iterations),
        }
        if value_losses:
            stats["value_loss"] = float(np.mean(value_losses))
        self.new_returns, self.last_iteration_at = [], time.monotonic()
        if cfg.udrl_eval_every > 0 and self.iterations % cfg.udrl_eval_every == 0:
            stats["greedy/return_mean"] = float(np.mean(self.evaluate([mean + std])))
        row = [self.iterations, self.episodes, stats["rcp/episode_return"], mean + std, math.nan]
        row += [stats["rcp/replay_return"], stats["loss"], stats["rcp/seconds_per_iteration"]]
        self.history.append(row + [stats.get("greedy/return_mean", math.nan)])
        return stats

    def write_commands(self, mean: float, std: float) -> None:
        """Each env's next episodes condition on its own draw from N(mean + std, std); the model keeps mean + std
        (the greedy evaluation's and enjoy.py's target)."""
        self.target = (mean, std)
        self.model.command.fill_(mean + std)
        if self.control is None:
            return
        table = self.control["commands"]
        draws = torch.normal(mean + std, max(std, 1e-6), (len(table),))
        for env, value in enumerate(draws.tolist()):
            set_commands(table, [value], [env])

    def evaluate(self, command: list[float]) -> list[float]:
        return greedy_returns(self, command)


class RCPA(RCP):
    advantage = True
