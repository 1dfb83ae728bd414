"""MAML's episode sampling on actor worker processes (--algo=maml_trpo): each worker owns --fast_batch_size envs and
fills whole rows of a shared episode buffer, one row per task: the row's episodes run in lockstep, the Gaussian MLP
acting in numpy with the weight set the driver wrote for that row (the meta-parameters, or the row's adapted ones).

Determinism: an episode's env seed and action noise come from (seed, stream, iteration, row, episode) alone, and a
row's forward passes have the same shapes wherever it runs, so one worker or four give bit-identical episodes.

Shared memory (allocated by the MAML driver, appo/algorithms/maml_run.py; `EpisodeBuffers`):
    weights [num_weight_sets, P] float32   row 0: the meta-parameters; row 1 + k: task k's adapted parameters
    per buffer b (0: train episodes, 1: validation episodes; the meta-test reuses them):
        obs [K, E, T, obs_dim] float32, actions [K, E, T, act_dim] float32 (as sampled, before clipping),
        rewards [K, E, T] float32 (0 after an episode's end), lengths [K, E] int64
Writers: sampler workers, each row by the one worker the driver sent it to (SampleEpisodes); the driver reads a row
after that worker's EpisodesReady.
"""

from __future__ import annotations

import queue
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from appo.messages import EpisodesReady, HvpReady, HvpRequest, SampleEpisodes, Stop
from envs import make_env
from envs.tasks import task_family

ParamShapes = list[tuple[str, tuple[int, ...]]]  # (name, shape) of each policy parameter, in flat order


class EpisodeBuffers(NamedTuple):
    weights: torch.Tensor
    hvp_in: torch.Tensor  # [P]: the vector of the KL Hessian-vector product being computed
    hvp_out: torch.Tensor  # [K, P]: each task's product
    obs: list[torch.Tensor]
    actions: list[torch.Tensor]
    rewards: list[torch.Tensor]
    lengths: list[torch.Tensor]


def episode_horizon(env: gym.Env) -> int:
    """The time limit of `env` (its TimeLimit wrapper's), which fixes T of the episode buffers."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return int(env._max_episode_steps)
        env = env.env
    raise ValueError(f"--algo=maml_trpo: the env {env} has no time limit; pass --max_episode_steps")


def allocate_buffers(
    num_rows: int, episodes: int, horizon: int, obs_dim: int, act_dim: int, num_params: int
) -> EpisodeBuffers:
    def shared(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype).share_memory_()

    return EpisodeBuffers(
        shared(1 + num_rows, num_params),
        shared(num_params),
        shared(num_rows, num_params),
        [shared(num_rows, episodes, horizon, obs_dim) for _ in range(2)],
        [shared(num_rows, episodes, horizon, act_dim) for _ in range(2)],
        [shared(num_rows, episodes, horizon) for _ in range(2)],
        [shared(num_rows, episodes, dtype=torch.int64) for _ in range(2)],
    )


def episode_seed(seed: int, stream: int, iteration: int, row: int, episode: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, stream, iteration, row, episode])


class NumpyGaussianMlp:
    """The MAML policy's mean and std from one flat weight row, laid out as appo/algorithms/maml.py `flatten`
    lays out MamlPolicy's named parameters (`shapes`: (name, shape) in that order)."""

    def __init__(self, flat: np.ndarray, shapes: ParamShapes, nonlinearity: str) -> None:
        arrays, i = {}, 0
        for name, shape in shapes:
            n = int(np.prod(shape))
            arrays[name] = flat[i : i + n].reshape(shape)
            i += n
        linear = sorted({int(name.split(".")[1]) for name in arrays if name.startswith("mlp.")})
        self.layers = [(arrays[f"mlp.{j}.weight"].T.copy(), arrays[f"mlp.{j}.bias"]) for j in linear]
        self.std = np.exp(arrays["log_std"])
        self.activation = np.tanh if nonlinearity == "tanh" else (lambda x: np.maximum(x, 0.0))

    def mean(self, obs: np.ndarray) -> np.ndarray:
        x = obs
        for j, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if j < len(self.layers) - 1:
                x = self.activation(x)
        return x


class EpisodeSampler:
    """`num_envs` envs of the run's env (one per episode of a row); `sample_row` runs them in lockstep."""

    def __init__(self, cfg: Any, num_envs: int, buffers: EpisodeBuffers, shapes: ParamShapes) -> None:
        self.cfg, self.buffers, self.shapes = cfg, buffers, shapes
        self.envs = [make_env(cfg.env, max_episode_steps=cfg.max_episode_steps) for _ in range(num_envs)]
        self.horizon = episode_horizon(self.envs[0])
        space = self.envs[0].action_space
        self.low, self.high = space.low.astype(np.float32), space.high.astype(np.float32)
        self.hvp_cache: tuple[tuple, list] | None = None  # ((iteration, rows), those rows' products)

    def on_sample(self, msg: SampleEpisodes) -> None:
        weights = self.buffers.weights.numpy()
        for row, task, weight_row in zip(msg.rows, msg.tasks, msg.weight_rows, strict=True):
            policy = NumpyGaussianMlp(weights[weight_row], self.shapes, self.cfg.maml_nonlinearity)
            self.sample_row(msg.buffer, msg.stream, msg.iteration, row, task, policy)

    def sample_row(
        self, buffer: int, stream: int, iteration: int, row: int, task: dict, policy: NumpyGaussianMlp
    ) -> None:
        """Run one episode per env on `task` and write them into row `row` of episode buffer `buffer`."""
        obs_out, act_out = self.buffers.obs[buffer][row].numpy(), self.buffers.actions[buffer][row].numpy()
        rew_out, len_out = self.buffers.rewards[buffer][row].numpy(), self.buffers.lengths[buffer][row].numpy()
        E, T = len(self.envs), self.horizon
        noise = np.empty((E, T, act_out.shape[-1]), dtype=np.float32)
        obs = np.empty((E, obs_out.shape[-1]), dtype=np.float32)
        for e, env in enumerate(self.envs):
            seq = episode_seed(self.cfg.seed, stream, iteration, row, e)
            env_seed, noise_seed = seq.generate_state(2)
            noise[e] = np.random.default_rng(noise_seed).standard_normal(noise[e].shape, dtype=np.float32)
            task_family(env).set_task(task)
            obs[e] = env.reset(seed=int(env_seed))[0]
        rew_out.fill(0.0)
        is_alive = np.ones(E, dtype=bool)
        lengths = np.full(E, T, dtype=np.int64)
        for t in range(T):
            actions = (policy.mean(obs) + policy.std * noise[:, t]).astype(np.float32)
            obs_out[:, t] = obs  # finished episodes' rows are zeroed below
            act_out[:, t] = actions
            clipped = np.clip(actions, self.low, self.high)
            for e in np.flatnonzero(is_alive).tolist():
                next_obs, reward, terminated, truncated, _ = self.envs[e].step(clipped[e])
                rew_out[e, t] = reward
                obs[e] = next_obs
                if terminated or truncated:
                    is_alive[e] = False
                    lengths[e] = t + 1
            if not is_alive.any():
                break
        for e, n in enumerate(lengths.tolist()):
            obs_out[e, n:] = 0.0
            act_out[e, n:] = 0.0
        len_out[:] = lengths

    def on_hvp(self, msg: HvpRequest) -> None:
        """Write J_k F_k J_k v of each task row of `msg` into the hvp output (the meta-batch's products are built
        once per iteration, at its first request)."""
        if self.hvp_cache is None or self.hvp_cache[0] != (msg.iteration, msg.rows):
            self.hvp_cache = ((msg.iteration, msg.rows), self._task_hvps(msg.rows))
        v = self.buffers.hvp_in.clone()
        for row, product in zip(msg.rows, self.hvp_cache[1], strict=True):
            self.buffers.hvp_out[row] = product(v)

    def _task_hvps(self, rows: tuple[int, ...]) -> list:
        from appo.algorithms.maml import Episodes, MamlTrpo, make_policy, params_of, unflatten

        model = make_policy(self.cfg, self.envs[0].observation_space, self.envs[0].action_space)
        flat = self.buffers.weights[0].clone()
        with torch.no_grad():
            for p, value in zip(params_of(model).values(), unflatten(flat, params_of(model)).values(), strict=True):
                p.copy_(value)
        index = list(rows)

        def episodes(b: int) -> Episodes:
            lengths = self.buffers.lengths[b][index]
            mask = (torch.arange(self.horizon) < lengths.unsqueeze(-1)).float()
            return Episodes(
                self.buffers.obs[b][index], self.buffers.actions[b][index], self.buffers.rewards[b][index], mask
            )

        learner = MamlTrpo(self.cfg, model)
        return learner.task_hvps(learner.task_batches(episodes(0), episodes(1)))

    def close(self) -> None:
        for env in self.envs:
            env.close()


def sampler_worker_main(
    cfg: Any,
    worker_idx: int,
    inbox: Any,
    driver_queue: Any,
    buffers: EpisodeBuffers,
    shapes: ParamShapes,
    episodes: int,
) -> None:
    """The sampler worker process: serve SampleEpisodes until Stop."""
    from appo.processes import component_main

    class Queues:  # component_main reports a failure to `driver_queue`
        pass

    queues = Queues()
    queues.driver_queue = driver_queue  # type: ignore[attr-defined]

    def body() -> None:
        sampler = EpisodeSampler(cfg, episodes, buffers, shapes)
        try:
            while True:
                try:
                    msg = inbox.get(timeout=1.0)
                except queue.Empty:
                    continue
                if isinstance(msg, Stop):
                    return
                if isinstance(msg, HvpRequest):
                    sampler.on_hvp(msg)
                    driver_queue.put(HvpReady(worker_idx, msg.seq))
                    continue
                sampler.hvp_cache = None
                sampler.on_sample(msg)
                driver_queue.put(EpisodesReady(worker_idx, msg.buffer, msg.rows))
        finally:
            sampler.close()

    component_main(cfg, f"sampler{worker_idx}", queues, body)
