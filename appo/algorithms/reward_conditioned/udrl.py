"""`--algo=udrl`: Upside-Down RL (Srivastava et al. 2019, "Training Agents using Upside-Down Reinforcement
Learning", algorithms 1-2) on the engine's actor workers.

The policy (appo/models/command_policy.py) maps (state, command = (desired return-to-go, desired horizon)) to actions
and
is trained by likelihood on its own past episodes relabelled with what they achieved. Data flow:
- actor workers act with the published weights (uniformly random until the first update: the warm-up) on envs
  whose observations carry the scaled command (envs/common/reward_conditioning.py); each episode starts from the command
  in the control channel's command table (appo/protocol/control.py), written here after every iteration;
- the learner core hands over every trajectory as it arrives (`consumes = "replay"`); `update` stitches them into
  whole episodes (by the `episode_ids` field) and keeps the --udrl_buffer_episodes best by return (`BestEpisodes`);
- once --udrl_warmup_episodes episodes are in, and then every --udrl_episodes_per_iteration new ones, an iteration
  runs: --udrl_updates_per_iteration Adam steps on --batch_size uniform samples (state, (return-to-go, steps
  left), action), then a new exploration command from the --udrl_last_few best episodes (`exploration_command`:
  their mean return plus a draw from U[0, std]), written to the control channel for the actors; the model keeps
  the command without the draw (mean return, mean length), which the greedy evaluations, the engine's evaluator
  (--eval_interval) and enjoy.py play; every --udrl_eval_every iterations a greedy evaluation with it, in this
  process, logged once at the env steps it ran at (`greedy/return_mean`; the engine's evaluator is `eval/*`).
Collection does not wait for training: episodes finished during an iteration count toward the next one."""

from __future__ import annotations

import math
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from appo.algorithms.base import Algorithm, NonFiniteGuard, adam
from appo.algorithms.common.returns import return_to_go
from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.models.command_policy import CommandPolicy  # registers the model kind
from appo.models.device import to_device, to_host
from appo.protocol.control import set_commands
from appo.protocol.episode_ids import env_of
from appo.sampling.evaluator import run_episode
from appo.utils.logging import log


# --- the math -------------------------------------------------------------------------------------------------
def relabel(rewards: Tensor) -> tuple[Tensor, Tensor]:
    """Commands an episode achieved from each of its steps: return-to-go [L] (sum of rewards from t on) and
    horizon [L] (steps left, L - t), for rewards [L] of one whole episode."""
    L = len(rewards)
    to_go = return_to_go(rewards)
    horizon = torch.arange(L, 0, -1, dtype=rewards.dtype)
    return to_go, horizon


def exploration_command(returns: np.ndarray, lengths: np.ndarray, cap: float, u: float) -> tuple[float, float]:
    """UDRL's exploration command from the best episodes' `returns` and `lengths`: horizon = their mean length,
    desired return = mean + u * std (u ~ U[0, 1]: a draw from U[mean, mean + std]), at most `cap`."""
    mean, std = float(np.mean(returns)), float(np.std(returns))
    return min(mean + u * std, cap), float(np.mean(lengths))


def stitch(
    batch: dict[str, Tensor], state_dims: int, partial: dict[int, list[tuple[Tensor, Tensor, Tensor]]]
) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The episodes that end in `batch` (trajectories [N, T] as actor workers write them), each whole: (states
    [L, state_dims] without the command the actors appended, actions [L, ...], rewards [L]). Steps of episodes
    still running wait in `partial` (episode id -> chunks), keyed by the `episode_ids` field. An env runs one episode
    at a time: a new episode of an env ends the wait of any older one of the same env (its worker died, or its
    trajectory was dropped), so `partial` holds at most one episode per env."""
    host = to_host({k: batch[k] for k in ("obs", "actions", "rewards", "dones", "episode_ids")})
    obs, actions, rewards, dones, ids = host.values()
    N, T = rewards.shape
    finished = []
    for n in range(N):
        ends = (torch.nonzero(dones[n] > 0).flatten() + 1).tolist()
        start = 0
        for end in ends if ends and ends[-1] == T else [*ends, T]:
            episode = int(ids[n, start])
            if episode not in partial:
                env = env_of(episode)
                for stale in [k for k in partial if env_of(k) == env]:
                    del partial[stale]
            chunk = (
                obs[n, start:end, :state_dims].clone(),
                actions[n, start:end].clone(),
                rewards[n, start:end].clone(),
            )
            partial.setdefault(episode, []).append(chunk)
            if dones[n, end - 1] > 0:
                finished.append(tuple(torch.cat(parts) for parts in zip(*partial.pop(episode), strict=True)))
            start = end
    return finished  # type: ignore[return-value]


class BestEpisodes:
    """The `capacity` whole episodes with the highest returns (ties: the earlier stays). Each episode is
    (states [L, S], actions [L, ...], rewards [L]); `flat` concatenates them with their relabelled commands for
    uniform sampling."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.episodes: list[tuple[float, Tensor, Tensor, Tensor]] = []  # sorted by return, highest first
        self._flat: dict[str, Tensor] | None = None

    def __len__(self) -> int:
        return len(self.episodes)

    def add(self, states: Tensor, actions: Tensor, rewards: Tensor) -> bool:
        """Keep the episode if it is among the best `capacity`; returns whether it was kept."""
        ret = float(rewards.double().sum())
        if len(self.episodes) >= self.capacity and ret <= self.episodes[-1][0]:
            return False
        position = len(self.episodes)
        while position > 0 and self.episodes[position - 1][0] < ret:
            position -= 1
        self.episodes.insert(position, (ret, states, actions, rewards))
        del self.episodes[self.capacity :]
        self._flat = None
        return True

    def returns(self) -> np.ndarray:
        return np.array([e[0] for e in self.episodes])

    def lengths(self) -> np.ndarray:
        return np.array([len(e[3]) for e in self.episodes])

    def flat(self) -> dict[str, Tensor]:
        """Every step of every episode: states, actions, return_to_go, horizon; offsets [E] and lengths [E]."""
        if self._flat is None:
            relabelled = [relabel(e[3]) for e in self.episodes]
            lengths = torch.tensor([len(e[3]) for e in self.episodes], dtype=torch.int64)
            self._flat = {
                "states": torch.cat([e[1] for e in self.episodes]),
                "actions": torch.cat([e[2] for e in self.episodes]),
                "return_to_go": torch.cat([r[0] for r in relabelled]),
                "horizon": torch.cat([r[1] for r in relabelled]),
                "lengths": lengths,
                "offsets": torch.cumsum(lengths, 0) - lengths,
            }
        return self._flat

    def sample(self, n: int, unit: str = "episode") -> dict[str, Tensor]:
        """n samples (torch's global generator): an episode uniformly, then a step of it uniformly (`unit` episode,
        as in the UDRL paper), or a step uniformly among all the buffer's steps (`unit` step: long episodes weigh
        in proportion to their length, as in the open LunarLander implementation's sorted transition buffer)."""
        flat = self.flat()
        if unit == "step":
            index = torch.randint(len(flat["states"]), (n,))
        else:
            episode = torch.randint(len(self.episodes), (n,))
            lengths = flat["lengths"][episode]
            index = flat["offsets"][episode] + (torch.rand(n) * lengths).long().clamp(max=lengths - 1)
        return {key: flat[key][index] for key in ("states", "actions", "return_to_go", "horizon")}

    def state_dict(self) -> dict[str, Any]:
        flat = self.flat() if self.episodes else None
        if flat is None:
            return {"lengths": torch.zeros(0, dtype=torch.int64)}
        rewards = torch.cat([e[3] for e in self.episodes])
        return {"lengths": flat["lengths"], "states": flat["states"], "actions": flat["actions"], "rewards": rewards}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episodes, self._flat = [], None
        if len(state["lengths"]) == 0:
            return
        sizes = state["lengths"].tolist()
        for s, a, r in zip(*(torch.split(state[k], sizes) for k in ("states", "actions", "rewards")), strict=True):
            self.add(s.clone(), a.clone(), r.clone())


# The command statistics kept per iteration (checkpoints: state["udrl"]["history"], one row each), for curves
# and the benchmark (benchmarks/udrl_lunarlander.py).
HISTORY_COLUMNS = (
    "iteration",
    "episodes",
    "episode_return",
    "command_return",
    "command_horizon",
    "buffer_top_return",
    "loss",
    "seconds",
    "eval_return",
)


# --- the algorithm --------------------------------------------------------------------------------------------
class UDRL(Algorithm):
    def __init__(self, cfg: Cfg, derived: Derived, model: nn.Module, device: str, guard: NonFiniteGuard) -> None:
        super().__init__(cfg, derived, model, device, guard)
        self.model: CommandPolicy = model  # type: ignore[assignment]
        self.optimizer = adam(model.parameters(), cfg.learning_rate, device)
        self.buffer = BestEpisodes(cfg.udrl_buffer_episodes)
        self.partial: dict[int, list[tuple[Tensor, Tensor, Tensor]]] = {}  # episode id -> its steps so far
        self.episodes = 0  # whole episodes received over the run
        self.since_iteration = 0  # ... since the last iteration
        self.iterations = 0
        self.new_returns: list[float] = []  # returns of the episodes received since the last iteration
        self.last_iteration_at = time.monotonic()
        self.history: list[list[float]] = []  # one row per iteration: HISTORY_COLUMNS (in the checkpoints)
        self.eval_env: gym.Env | None = None
        self.last: dict[str, float] = {}  # the last iteration's stats, reported until the next

    def set_cfg(self, cfg: Cfg) -> None:
        super().set_cfg(cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.learning_rate

    @property
    def command(self) -> tuple[float, float]:
        return tuple(float(v) for v in self.model.command)  # type: ignore[return-value]

    # --- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        counters = {"episodes": self.episodes, "since_iteration": self.since_iteration, "iterations": self.iterations}
        history = torch.tensor(self.history, dtype=torch.float64).reshape(-1, len(HISTORY_COLUMNS))
        return {"optimizer": self.optimizer.state_dict(), "udrl": counters | {"history": history}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.episodes = int(state["udrl"]["episodes"])
        self.since_iteration = int(state["udrl"]["since_iteration"])
        self.iterations = int(state["udrl"]["iterations"])
        self.history = state["udrl"]["history"].tolist()
        if self.iterations > 0:
            self.write_command()  # the model (loaded before) holds the command

    def replay_state(self) -> dict[str, Any] | None:
        return self.buffer.state_dict()

    def load_replay_state(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state)
        log.info("UDRL: replay of %d episodes loaded (best return %.1f)", len(self.buffer), self._best())

    # --- one trajectory -----------------------------------------------------------------------------
    def update(self, batch: dict[str, Tensor], env_steps: int) -> dict[str, float]:
        """Stitch the trajectories into episodes; run an iteration when enough new episodes are in."""
        self.ingest(batch)
        due = self.cfg.udrl_episodes_per_iteration if self.iterations else max(self.cfg.udrl_warmup_episodes, 1)
        if self.since_iteration >= due and len(self.buffer) > 0:
            return remember(self, self.iteration())
        return dict(self.last)

    def ingest(self, batch: dict[str, Tensor]) -> None:
        """Append each trajectory's steps to their episodes; finished episodes go to the buffer."""
        for states, actions, rewards in stitch(batch, self.model.state_dims, self.partial):
            self.buffer.add(states, actions, rewards)
            self.new_returns.append(float(rewards.double().sum()))
            self.episodes += 1
            self.since_iteration += 1

    # --- one iteration ------------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        """Updates on the buffer, then the next exploration command (and, when due, a greedy evaluation)."""
        cfg, model = self.cfg, self.model
        scale = torch.tensor(cfg.command_scale, dtype=torch.float32)
        losses = []
        for _ in range(cfg.udrl_updates_per_iteration):
            b = self.buffer.sample(cfg.batch_size, cfg.udrl_sample_unit)
            commands = torch.stack([b["return_to_go"], b["horizon"]], dim=-1).float() * scale
            inputs = to_device(torch.cat([b["states"], commands], dim=-1), self.device)
            actions = to_device(b["actions"], self.device)
            if model.is_discrete:
                actions = actions.reshape(-1)
            loss = -model.distribution(inputs).log_prob(actions).mean()
            grad_norm = self.guard.step(loss, list(model.parameters()), self.optimizer, cfg.max_grad_norm)
            if grad_norm == grad_norm:  # not NaN: the step was taken
                model.updates += 1
                losses.append(float(loss.detach()))
        self.since_iteration = 0
        self.iterations += 1
        returns, lengths = self.buffer.returns(), self.buffer.lengths()
        best = slice(0, min(cfg.udrl_last_few, len(returns)))
        command = exploration_command(returns[best], lengths[best], cfg.max_command_return, float(torch.rand(())))
        self.write_command(command)
        greedy = exploration_command(returns[best], lengths[best], cfg.max_command_return, 0.0)
        model.command.copy_(torch.tensor(greedy))
        stats = {
            "loss": float(np.mean(losses)) if losses else math.nan,
            "udrl/command_return": command[0],
            "udrl/command_horizon": command[1],
            "udrl/buffer_top_return": float(np.mean(returns[best])),
            "udrl/iterations": float(self.iterations),
            "udrl/episodes": float(self.episodes),
            # The iteration's own episodes (collected with the previous command) and its wall time.
            "udrl/episode_return": float(np.mean(self.new_returns)) if self.new_returns else math.nan,
            "udrl/seconds_per_iteration": time.monotonic() - self.last_iteration_at,
        }
        self.new_returns, self.last_iteration_at = [], time.monotonic()
        if cfg.udrl_eval_every > 0 and self.iterations % cfg.udrl_eval_every == 0:
            stats["greedy/return_mean"] = float(np.mean(self.evaluate(greedy)))
        row = [self.iterations, self.episodes, stats["udrl/episode_return"], *command]
        row += [stats["udrl/buffer_top_return"], stats["loss"], stats["udrl/seconds_per_iteration"]]
        self.history.append(row + [stats.get("greedy/return_mean", math.nan)])
        return stats

    def write_command(self, command: Any = None) -> None:
        """Every env's next episodes start from `command` (the control channel's command table); by default the
        model's."""
        if self.control is not None and "commands" in self.control:
            set_commands(
                self.control["commands"], list(command) if command is not None else self.model.command.tolist()
            )

    def evaluate(self, command: tuple[float, float]) -> list[float]:
        """Greedy episodes with `command` on an env of this process (built on first use)."""
        return greedy_returns(self, command)

    def _best(self) -> float:
        return float(self.buffer.returns()[0]) if len(self.buffer) else math.nan


def remember(algo: Any, stats: dict[str, float]) -> dict[str, float]:
    """`stats` of an iteration of UDRL or RCP, kept in `algo.last` to be reported until the next iteration, less
    the greedy evaluation: that one is reported once, by the update that ran it (appo/driver/stats.py writes
    greedy/* at the env steps they came with)."""
    algo.last = {k: v for k, v in stats.items() if not k.startswith("greedy/")}
    return stats


def greedy_returns(algo: Any, command: Any) -> list[float]:
    """`--udrl_eval_episodes` greedy episodes of `algo`'s model with `command`, on an env of this process that
    `algo.eval_env` keeps (built on first use): UDRL's and RCP's evaluation."""
    if algo.eval_env is None:
        from appo.envs import make_run_env

        algo.eval_env = make_run_env(algo.cfg)
    algo.model.eval()
    try:
        return [
            run_command_episode(algo.eval_env, algo.model, command, seed=algo.cfg.seed + 10_000 + k)[0]
            for k in range(algo.cfg.udrl_eval_episodes)
        ]
    finally:
        algo.model.train()


def run_command_episode(
    env: gym.Env, model: nn.Module, command: Any, seed: int | None = None, deterministic: bool = True
) -> tuple[float, int]:
    """One episode of `env` (built by envs.make_run_env, so it appends the command) started with `command`;
    returns (return, length)."""
    total, length, _ = run_episode(env, model, 1, deterministic, seed, reset_options={"command": list(command)})
    return total, length
