"""Where an env changes policy at a rollout's end (a population's redraw, a PBT or control-channel assignment), the
EnvRunner cuts its episode and resets the env (appo/sampling/env_runner.py `_cut_episode`). An episode that ended at
the rollout's last step on a lost life (info["episode_continues"]: the game goes on, as Atari's episodic life ends
learning episodes) is a game in progress: the new policy must get a new game, not the rest of this one, while an env
that keeps its policy plays its game on."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.envs.common.episode_end import EPISODE_CONTINUES
from appo.protocol.buffers import allocate_control, allocate_trajectories, numpy_views
from appo.protocol.messages import ActionsReady
from appo.sampling.env_runner import EnvRunner

T = 4  # the rollout; a life is lost every T steps, at each rollout's last step


class LivesGame(gym.Env):
    """A game of endless lives, one lost every T steps. The reset after a lost life goes on with the game (as
    envs/atari/atari.py's EpisodicLife); any other reset starts a new one. Observation: [game number, step in the
    game]."""

    observation_space = gym.spaces.Box(0, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.game, self.t, self.life_lost = 0, 0, False

    def _obs(self) -> np.ndarray:
        return np.array([self.game, self.t], np.float32)

    def reset(self, seed=None, options=None):
        if not self.life_lost:
            self.game, self.t = self.game + 1, 0
        self.life_lost = False
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.life_lost = self.t % T == 0
        return self._obs(), 1.0, self.life_lost, False, {EPISODE_CONTINUES: True} if self.life_lost else {}


def test_a_policy_switch_after_a_lost_life_starts_a_new_game_and_a_kept_policy_plays_on() -> None:
    cfg = Cfg(
        env="lives", num_policies=2, num_workers=1, num_envs_per_worker=2, worker_num_splits=1, rollout=T, batch_size=8
    )
    d = derive(cfg)
    views = numpy_views(allocate_trajectories(cfg, d, LivesGame.observation_space, LivesGame.action_space))
    runner = EnvRunner(cfg, d, 0, 0, views, lambda i: LivesGame(), numpy_views(allocate_control(cfg, d)))
    requests = runner.init(seed=0)
    runner.env_policy[:] = runner.next_policy[:] = runner.env_weights[:] = runner.next_weights[:] = 0
    for rollout in range(3):
        for t in range(T):
            if rollout == 1 and t == T - 1:  # env 0 is assigned policy 1 from the next rollout on
                runner.next_policy[0] = runner.next_weights[0] = 1
            out, first = [], requests[0].first_slot
            for r in requests:
                out += runner.on_actions(ActionsReady(0, 0, r.first_slot, r.t, 0, r.policy_id))
            requests = [m for m in out if type(m).__name__ == "InferenceRequest"]
            for m in out:
                if type(m).__name__ == "TrajectoryReady":
                    requests += runner.on_slots_released(m.group_idx, m.policy_id, m.incarnation)
        slots = first + np.arange(2)  # the rollout just handed over (the next one fills the other slot group)
        # every rollout ends on a lost life: terminal (nothing bootstraps past it), not a time limit
        assert views["dones"][slots, T - 1].tolist() == [1, 1] and views["truncated"][slots, T - 1].tolist() == [0, 0]
        if rollout == 1:
            assert runner.next_obs[0].tolist() == [2, 0], "the new policy starts a new game"
            assert runner.next_obs[1].tolist() == [1, 2 * T], "the env that kept its policy plays its game on"
            assert runner.ep_returns.tolist() == [0.0, 2 * T]
    assert runner.env_policy.tolist() == [1, 0] and runner.finished == []  # no game ended: none reported
