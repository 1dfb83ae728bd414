"""Observations keep their dtype through the engine (appo/protocol/buffers.py obs_dtype): the trajectory tensors,
their poison, the final_obs marker of steps that never happened (step_failed, since uint8 has no NaN), SAC's replay
and its saved file, MAML's episode buffers, the Ray actors' private tensors and the evaluation loop."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.algorithms.sac.replay import Replay, transitions
from appo.config.cfg import Cfg, merge_cfg
from appo.config.derive import derive
from appo.protocol.buffers import (
    POISON,
    allocate_control,
    allocate_trajectories,
    numpy_views,
    obs_dtype,
    poison_value,
    shared_bytes,
    trajectory_spec,
)
from appo.protocol.messages import ActionsReady
from appo.sampling.env_runner import EnvRunner

FRAMES = gym.spaces.Box(0, 255, (4, 6, 6), np.uint8)
DISCRETE = gym.spaces.Discrete(3)


@pytest.mark.parametrize(
    ("dtype", "stored"),
    [
        (np.uint8, np.uint8),
        (np.float32, np.float32),
        (np.float64, np.float32),
        (np.float16, np.float32),
        (np.bool_, np.float32),  # not uint8: the models read uint8 as pixels and scale it
        (np.int16, np.int16),
        (np.int64, np.int64),
        (np.uint16, np.int32),
        (np.uint32, np.int64),
    ],
)
def test_the_trajectory_tensors_take_the_observations_dtype(dtype, stored) -> None:
    space = gym.spaces.Box(0, 1, (3,), dtype)
    cfg = merge_cfg({"algo": "sac", "env": "Pendulum-v1"}, None)
    spec = trajectory_spec(cfg, space, gym.spaces.Box(-1, 1, (1,), np.float32))
    assert obs_dtype(space) == np.dtype(stored)
    for name in ("obs", "final_obs"):
        assert spec[name].dtype == torch.from_numpy(np.zeros(0, stored)).dtype, name
    assert spec["step_failed"].dtype == torch.float32  # final_obs comes with its marker


def test_uint8_frames_are_poisoned_white_and_take_a_quarter_of_float32s_memory() -> None:
    cfg = Cfg(num_workers=1, num_envs_per_worker=2, rollout=4, batch_size=8)
    d = derive(cfg)
    bufs = allocate_trajectories(cfg, d, FRAMES, DISCRETE)
    assert bufs["obs"].dtype == torch.uint8 and bool((bufs["obs"] == 255).all())
    assert poison_value(torch.uint8) == 255 and poison_value(torch.int64) == -1 and poison_value(np.float32) == POISON
    as_floats = gym.spaces.Box(0, 255, FRAMES.shape, np.float32)
    obs_bytes = d.num_slots * (cfg.rollout + 1) * int(np.prod(FRAMES.shape))
    assert shared_bytes(cfg, d, as_floats, DISCRETE) - shared_bytes(cfg, d, FRAMES, DISCRETE) == 3 * obs_bytes


class RaisingFramesEnv(gym.Env):
    """uint8 frames filled with the env's step count; the first episode of env 0 raises at its third step; episodes
    end by a time limit after 3 steps."""

    observation_space = FRAMES
    action_space = DISCRETE

    def __init__(self, index: int) -> None:
        self.index, self.t, self.episodes = index, 0, 0

    def frame(self) -> np.ndarray:
        return np.full(FRAMES.shape, 10 * self.index + self.t, np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.episodes = 0, self.episodes + 1
        return self.frame(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.index == 0 and self.episodes == 1 and self.t == 2:
            raise RuntimeError("test env: raised on purpose")
        self.t += 1
        return self.frame(), 1.0, False, self.t >= 3, {}


def test_a_step_whose_env_raised_is_marked_for_integer_observations() -> None:
    """uint8 has no NaN: the runner marks the step in step_failed (final_obs there holds the poison, 255), and
    SAC's replay leaves that step out while it keeps the final frames of the episodes that ended, as uint8."""
    flags = {"num_workers": 1, "num_envs_per_worker": 2, "worker_num_splits": 1, "rollout": 4, "batch_size": 8}
    cfg = merge_cfg({"algo": "sac", "env": "Pendulum-v1", **flags}, None)
    d = derive(cfg)
    bufs = allocate_trajectories(cfg, d, FRAMES, DISCRETE)
    views = numpy_views(bufs)
    runner = EnvRunner(cfg, d, 0, 0, views, RaisingFramesEnv, numpy_views(allocate_control(cfg, d)))
    requests = runner.init(seed=0)
    first = requests[0].first_slot
    for t in range(cfg.rollout):
        views["actions"][first : first + 2, t] = 0
        runner.on_actions(ActionsReady(0, 0, first, t, 0, 0))
    slots = slice(first, first + 2)
    assert bufs["step_failed"][slots].tolist() == [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    assert bufs["dones"][slots].tolist() == [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0]]
    final = bufs["final_obs"][slots]
    assert final.dtype == torch.uint8
    assert bool((final[0, 2] == 255).all())  # the step that never happened: no observation
    assert bool((final[1, 2] == 13).all())  # env 1's episode ended by its time limit: its last frame
    assert bool((bufs["obs"][first, 3] == 0).all())  # env 0 rebuilt: its new episode's first frame
    rows = transitions({k: v[slots] for k, v in bufs.items()})
    assert rows["obs"].dtype == rows["next_obs"].dtype == torch.uint8
    assert len(rows["rewards"]) == 2 * cfg.rollout - 1  # every step but the one that raised


def frame_rows(start: int, n: int) -> dict[str, torch.Tensor]:
    """Transitions of uint8 frames, every frame different (random bytes) and its index in the first byte."""
    g = torch.Generator().manual_seed(start)
    obs = torch.randint(0, 256, (n, *FRAMES.shape), dtype=torch.uint8, generator=g)
    obs.view(n, -1)[:, 0] = torch.arange(start, start + n) % 256
    k = torch.arange(start, start + n, dtype=torch.float32)
    return {"obs": obs, "actions": k[:, None], "rewards": k, "next_obs": 255 - obs, "terminated": k % 2}


def test_sacs_replay_of_uint8_frames_stores_uint8_and_samples_them_back_identical(tmp_path) -> None:
    from appo.learning.checkpoint import load_checkpoint, save_snapshot

    replay = Replay(50, FRAMES.shape, 1, obs_dtype=torch.uint8)
    rows = frame_rows(0, 40)
    replay.add(rows)
    assert replay.data["obs"].dtype == replay.data["next_obs"].dtype == torch.uint8
    assert replay.data["rewards"].dtype == torch.float32
    sample = replay.sample(200, torch.Generator().manual_seed(0))
    assert sample["obs"].dtype == torch.uint8
    index = sample["rewards"].long()  # the rewards name the rows drawn
    assert torch.equal(sample["obs"], rows["obs"][index]) and torch.equal(sample["next_obs"], rows["next_obs"][index])
    replay.add(frame_rows(40, 30))  # wraps around: the newest 50 of 70 remain
    path = save_snapshot(replay.state_dict(), tmp_path / "replay.pth")
    state = load_checkpoint(path)
    assert state["rows"]["obs"].dtype == torch.uint8
    again = Replay(50, FRAMES.shape, 1, obs_dtype=torch.uint8)
    again.load_state_dict(state)
    order = again.data["rewards"].long()
    assert sorted(order.tolist()) == list(range(20, 70))
    assert torch.equal(again.data["obs"][(order >= 20) & (order < 40)], rows["obs"][20:])  # bit for bit
    floats = Replay(50, FRAMES.shape, 1)  # the same rows kept as float32 take four times the bytes on disk
    floats.load_state_dict(state)
    float_path = save_snapshot(floats.state_dict(), tmp_path / "floats.pth")
    assert float_path.stat().st_size > 3 * path.stat().st_size


def test_sac_keeps_a_replay_of_uint8_frames_and_trains_on_it() -> None:
    from appo.algorithms.base import NonFiniteGuard
    from appo.algorithms.sac.algorithm import SAC
    from appo.models.registry import make_model

    flags = {"actor_mlp_layers": [8], "critic_mlp_layers": [8], "batch_size": 16, "learning_starts": 0}
    cfg = merge_cfg({"algo": "sac", "env": "Pendulum-v1", **flags}, None)
    box = gym.spaces.Box(-1, 1, (1,), np.float32)
    readings = gym.spaces.Box(0, 255, (12,), np.uint8)  # bytes, not an image: SAC's networks are MLPs
    sac = SAC(cfg, derive(cfg), make_model(cfg, readings, box), "cpu", NonFiniteGuard(0))
    assert sac.replay.data["obs"].dtype == torch.uint8
    n, T = 2, 16
    g = torch.Generator().manual_seed(0)
    batch = {
        "obs": torch.randint(0, 256, (n, T + 1, *readings.shape), dtype=torch.uint8, generator=g),
        "actions": torch.rand(n, T, 1, generator=g) * 2 - 1,
        "rewards": torch.randn(n, T, generator=g),
        "dones": torch.zeros(n, T),
        "truncated": torch.zeros(n, T),
        "final_obs": torch.full((n, T, *readings.shape), 255, dtype=torch.uint8),
        "step_failed": torch.zeros(n, T),
    }
    stats = sac.update(batch, n * T)
    assert sac.replay.size == n * T and "q_loss" in stats
    assert torch.equal(sac.replay.data["obs"][: n * T], batch["obs"][:, :T].reshape(n * T, *readings.shape))


def test_mamls_episode_buffers_keep_uint8_and_hand_over_floats() -> None:
    from appo.maml.buffers import allocate_buffers

    buffers = allocate_buffers(2, 3, 5, 4, 1, 10, np.dtype(np.uint8))
    assert buffers.obs[0].dtype == torch.uint8
    buffers.obs[0][1] = torch.arange(3 * 5 * 4).reshape(3, 5, 4).to(torch.uint8)
    episodes = buffers.episodes(0, [1])
    assert episodes.obs.dtype == torch.float32 and episodes.obs[0, 2, 4, 3].item() == 59.0


def test_ray_actors_private_tensors_are_poisoned_in_their_own_dtype() -> None:
    from appo.backends.ray.actors import private_trajectories

    cfg = Cfg(num_workers=2, num_envs_per_worker=2, rollout=4, batch_size=8)
    d = derive(cfg)
    bufs = private_trajectories(cfg, d, (FRAMES, DISCRETE), 1)
    assert bufs["obs"].dtype == torch.uint8
    mine = bufs["obs"][d.num_slots // 2 :]
    assert bool((mine == 255).all()) and bool((bufs["obs"][: d.num_slots // 2] == 0).all())


def test_evaluations_feed_the_model_the_dtype_training_stored() -> None:
    from appo.models.actor_critic import ActOutput
    from appo.sampling.evaluator import run_episode

    seen: list[torch.dtype] = []

    class Recorder(torch.nn.Module):
        def act(self, obs: torch.Tensor, rnn: torch.Tensor, deterministic: bool = False) -> ActOutput:
            seen.append(obs.dtype)
            zero = torch.zeros(len(obs))
            return ActOutput(torch.zeros(len(obs), 1, dtype=torch.int64), zero, zero, rnn)

    total, length, _ = run_episode(RaisingFramesEnv(1), Recorder(), 1, seed=0)
    assert length == 3 and total == 3.0 and seen == [torch.uint8] * 3
