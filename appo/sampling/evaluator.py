"""Evaluator: runs the newest weights of a policy with deterministic actions on its own envs, never
touching the training buffers. For plain envs: `eval_episodes` episodes (eval/* summaries). For task
envs: one trial on each held-out test task, with the recurrent state carried across the trial's
episodes; the mean return by episode index is the adaptation curve (meta_test/* summaries); then the
same trials with sampled actions (meta_test_sampled/return_ep*). The adaptation gain (`adaptation_gain`) is the
last episode's return minus the first's, paired by task, with its standard error over the tasks: a memoryless
policy's is zero up to that error.

On the CPU with --numpy_inference the evaluator acts with the numpy pass of its model (the actor workers' own,
appo/models/numpy_twins.py; a torch forward pass of one observation costs several times the step of a MuJoCo
env, and the meta-test of a task family runs thousands of them on the cores the actors step on); other models keep
torch. Sampled meta-test actions come from a generator seeded by (seed, weights version) either way.

`Evaluator` is the component (called directly in --serial_mode); `run_evaluator` the process shell,
which serves EvalRequests from the driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from appo.config.cfg import Cfg
from appo.envs import make_run_env
from appo.envs.common.episode_end import TRUE_OBJECTIVE
from appo.envs.multi_agent.multi_agent import run_game
from appo.models.device import model_device, to_device, to_host
from appo.models.numpy_twins import make_numpy_policy
from appo.models.registry import make_model
from appo.numpy_policy.ops import NumpyPass
from appo.protocol.buffers import obs_dtype, rnn_state_size
from appo.protocol.messages import EvalReport, EvalRequest, Stop
from appo.protocol.param_sync import ParamStore
from appo.protocol.processes import component_main
from appo.protocol.wiring import Queues, send


def adaptation_gain(by_episode: np.ndarray) -> tuple[float, float]:
    """Mean over tasks of (last episode's return - first's) in `by_episode` [tasks, episodes] and its standard
    error (0 with fewer than two tasks or one episode)."""
    gains = by_episode[:, -1] - by_episode[:, 0]
    se = gains.std(ddof=1) / np.sqrt(len(gains)) if len(gains) > 1 else 0.0
    return float(gains.mean()), float(se)


def true_objective(info: dict) -> float | None:
    """An evaluation episode's true objective, where its env reports one: the last info's, or in a game (run_game's
    info) the policy's row's against a scripted opponent, else the mean over the rows that report one."""
    if "objectives" not in info:
        value = info.get(TRUE_OBJECTIVE)
        return None if value is None else float(value)
    rows = np.asarray(info["objectives"], dtype=np.float64)
    rows = rows[[info["policy_row"]]] if "policy_row" in info else rows
    rows = rows[~np.isnan(rows)]
    return float(rows.mean()) if len(rows) else None


def env_action(actions: torch.Tensor | np.ndarray, space: gym.Space) -> Any:
    """The action an env takes from the model's [1, A] (or [1, 1] discrete) output: Box actions clipped, a Discrete
    index 0..n-1 shifted by the space's start."""
    if isinstance(space, gym.spaces.Discrete):
        return int(actions[0, 0]) + int(space.start)
    first = actions[0].numpy() if isinstance(actions, torch.Tensor) else actions[0]
    return np.clip(first.reshape(space.shape), space.low, space.high)


def run_episode(
    env: gym.Env,
    model: torch.nn.Module | None,
    state_size: int,
    deterministic: bool = True,
    seed: int | None = None,
    on_frame: Callable[[], None] | None = None,
    fast: NumpyPass | None = None,
    reset_options: dict[str, Any] | None = None,
) -> tuple[float, int, dict]:
    """One engine episode (a whole trial for task envs) from reset to its end: (return, length, last info).
    `on_frame` is called after the reset and after every step (video recording). `fast`: the numpy pass of `model`
    (its weights loaded) to act with instead of torch. `reset_options`: the env's reset options (a command). The
    one episode loop of evaluations, enjoy.py and UDRL/RCP's greedy evaluation."""
    stored = obs_dtype(env.observation_space)  # what training stored and read: uint8 frames stay uint8
    act = policy_actor(model, state_size, fast, deterministic, stored)
    if getattr(env, "is_multi_agent", False):  # a game of several agents (appo/envs/multi_agent.py)
        return run_game(env, act, seed, on_frame)
    obs, _ = env.reset(seed=seed, options=reset_options)
    if on_frame is not None:
        on_frame()
    total, length = 0.0, 0
    while True:
        actions = act(np.asarray(obs)[None], None)
        obs, reward, terminated, truncated, info = env.step(env_action(actions, env.action_space))
        total += float(reward)
        length += 1
        if on_frame is not None:
            on_frame()
        if terminated or truncated:
            return total, length, info


def policy_actor(
    model: torch.nn.Module | None, state_size: int, fast: NumpyPass | None, deterministic: bool, stored: np.dtype
) -> Callable[[np.ndarray, np.ndarray | None], Any]:
    """`act(obs [B, ...], reset [B] bool or None)`: the actions [B, A] (or [B, 1]) of a batch of rows that the
    policy plays from their first step on, with the numpy pass `fast` where given (weights loaded), else torch;
    the recurrent state of each row is kept between calls and zeroed where `reset` says. Observations are cast to
    `stored`, the dtype training stored them in."""
    device = model_device(model) if model is not None else None
    state: dict[str, Any] = {}

    def act(obs: np.ndarray, reset: np.ndarray | None) -> Any:
        obs = np.asarray(obs, dtype=stored)
        rows = len(obs)
        if "rnn" not in state or len(state["rnn"]) != rows:
            state["rnn"] = torch.zeros(rows, state_size)
            core = getattr(model, "core", None) is not None
            state["states"] = np.zeros((rows, state_size), dtype=np.float32) if core else None
        if reset is not None:
            state["rnn"][torch.as_tensor(reset)] = 0.0
            if state["states"] is not None:
                state["states"][reset] = 0.0
        if fast is not None:
            actions, _, _, state["states"] = fast.act(obs, state["states"], deterministic)
            return actions
        with torch.inference_mode():
            out = model.act(to_device(torch.as_tensor(obs), device), to_device(state["rnn"], device), deterministic)
        state["rnn"] = to_host(out.rnn_states)
        return to_host(out.actions)

    return act


class Evaluator:
    def __init__(self, cfg: Cfg, spaces: tuple[gym.Space, gym.Space], params: list[ParamStore]) -> None:
        self.cfg, self.params = cfg, params
        self.model = make_model(cfg, *spaces).eval()
        self.fast = make_numpy_policy(self.model, "cpu", cfg.seed) if cfg.numpy_inference else None
        self.state_size = rnn_state_size(cfg)
        self.is_meta = cfg.task_schedule != "none"
        self.env = make_run_env(cfg, split="test" if self.is_meta else "train", evaluation=True)

    def evaluate(self, request: EvalRequest) -> EvalReport:
        version = self.params[request.policy_id].pull(self.model)
        if self.fast is not None:
            self.fast.load(self.model)
        if self.is_meta:
            return self._meta_test(request, version)
        # A reward-conditioned policy plays the command its weights carry (the learner's greedy command), as enjoy.py
        # does; without it the env's default command (0, 1) would be played.
        options = {"command": self.model.command.tolist()} if self.cfg.command_dims else None
        episodes = [
            run_episode(
                self.env,
                self.model,
                self.state_size,
                seed=self.cfg.seed + 10_000 + i,
                fast=self.fast,
                reset_options=options,
            )
            for i in range(self.cfg.eval_episodes)
        ]
        returns = np.array([e[0] for e in episodes])
        lengths = np.array([e[1] for e in episodes])
        objectives = [true_objective(e[2]) for e in episodes]
        known = [o for o in objectives if o is not None]
        return EvalReport(
            request.policy_id,
            request.env_steps,
            version,
            float(returns.mean()),
            float(returns.std()),
            float(lengths.mean()),
            [],
            [],
            true_objective_mean=float(np.mean(known)) if len(known) == len(objectives) else None,
        )

    def _meta_test(self, request: EvalRequest, version: int) -> EvalReport:
        """One trial per held-out task with deterministic actions, then one with sampled actions."""
        trials = self._trials(deterministic=True)
        by_episode = np.array([t["returns"] for t in trials])  # [tasks, episodes_per_trial]
        # The same tasks with sampled actions: a policy may need its noise to search within a trial.
        torch.manual_seed(self.cfg.seed + version)
        if self.fast is not None:
            self.fast.rng = np.random.default_rng(self.cfg.seed + version)
        stochastic = np.array([t["returns"] for t in self._trials(deterministic=False)])
        totals = by_episode.sum(axis=1)
        lengths = [sum(t["lengths"]) for t in trials]
        return EvalReport(
            request.policy_id,
            request.env_steps,
            version,
            float(totals.mean()),
            float(totals.std()),
            float(np.mean(lengths)),
            by_episode.mean(axis=0).tolist(),
            totals.tolist(),
            stochastic.mean(axis=0).tolist(),
            adaptation_gain(by_episode),
            adaptation_gain(stochastic),
        )

    def _trials(self, deterministic: bool) -> list[dict]:
        """One trial per held-out task, in order (the wrapper's sequence schedule hands them out)."""
        schedule = self.env.schedule
        schedule.index = 0
        return [
            run_episode(
                self.env, self.model, self.state_size, deterministic, self.cfg.seed + 20_000 + i, None, self.fast
            )[2]["trial"]
            for i in range(len(schedule.tasks))
        ]

    def close(self) -> None:
        self.env.close()


def evaluator_loop(evaluator: Evaluator, queues: Queues) -> None:
    while True:
        try:
            msgs = queues.eval_queue.get_many(timeout=0.5)
        except Exception:  # queue.Empty on timeout
            msgs = []
        for msg in msgs:
            if type(msg) is Stop:
                return
            send([evaluator.evaluate(msg)], queues)


def run_evaluator(cfg: Cfg, spaces: tuple[gym.Space, gym.Space], params: list[ParamStore], queues: Queues) -> None:
    """Process entry point of the evaluator."""

    def body() -> None:
        evaluator = Evaluator(cfg, spaces, params)
        try:
            evaluator_loop(evaluator, queues)
        finally:
            evaluator.close()

    component_main(cfg, "evaluator", queues, body)
