"""Upside-Down RL's pieces: the best-K episode buffer, relabelling, the exploration command, the command wrapper
and the sparse-reward wrapper, the command-conditioned policy, one iteration on hand-made trajectories, its
checkpoint round trip and its flag checks."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.algorithms.base import NonFiniteGuard
from appo.algorithms.reward_conditioned.udrl import UDRL, BestEpisodes, exploration_command, relabel, stitch
from appo.config.cfg import make_cfg
from appo.config.derive import derive
from appo.config.verify import verify
from appo.envs import make_run_env
from appo.envs.common.reward_conditioning import CommandObservation, SparseReward
from appo.models.registry import make_model
from appo.protocol import episode_ids
from appo.protocol.buffers import allocate_control
from tests.support.chain_env import ChainEnv

CHAIN = "tests.support.chain_env:ChainEnv"


# Small networks: one torch thread is faster than two fighting over a busy machine (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def udrl_cfg(**overrides):
    base = {"algo": "udrl", "env": CHAIN, "num_workers": 1, "num_envs_per_worker": 2, "rollout": 8}
    return make_cfg(base | overrides)


def episode(rewards: list[float], state_dims: int = 2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    L = len(rewards)
    states = torch.arange(L * state_dims, dtype=torch.float32).reshape(L, state_dims)
    return states, torch.zeros(L, 1, dtype=torch.int64), torch.tensor(rewards, dtype=torch.float32)


def test_best_episodes_keeps_exactly_the_k_best_returns():
    rng = np.random.default_rng(0)
    buffer = BestEpisodes(10)
    returns = []
    for _ in range(60):
        rewards = rng.normal(size=int(rng.integers(1, 6))).tolist()
        returns.append(float(np.sum(np.asarray(rewards, dtype=np.float32), dtype=np.float64)))
        buffer.add(*episode(rewards))
    assert len(buffer) == 10
    np.testing.assert_allclose(buffer.returns(), sorted(returns, reverse=True)[:10], rtol=0, atol=1e-5)
    assert not buffer.add(*episode([min(returns) - 1.0]))  # worse than all ten: refused
    assert buffer.add(*episode([max(returns) + 1.0]))  # better: kept first, the worst dropped
    assert buffer.returns()[0] == pytest.approx(max(returns) + 1.0) and len(buffer) == 10


def test_relabelling_a_hand_made_episode():
    rtg, horizon = relabel(torch.tensor([1.0, 0.0, 2.0, 3.0]))
    assert rtg.tolist() == [6.0, 5.0, 5.0, 3.0]
    assert horizon.tolist() == [4.0, 3.0, 2.0, 1.0]
    buffer = BestEpisodes(5)
    buffer.add(*episode([1.0, 0.0, 2.0, 3.0]))
    states, actions, rewards = episode([5.0, -1.0])
    buffer.add(states + 100, actions, rewards)
    flat = buffer.flat()
    assert flat["return_to_go"].tolist() == [6.0, 5.0, 5.0, 3.0, 4.0, -1.0]  # the better episode first
    assert flat["horizon"].tolist() == [4.0, 3.0, 2.0, 1.0, 2.0, 1.0]
    torch.manual_seed(0)
    sample = buffer.sample(200)
    # Every sample is one whole row (state, action, command) of one step, not a mix of two.
    rows = {
        tuple(r)
        for r in torch.cat([flat["states"], flat["return_to_go"][:, None], flat["horizon"][:, None]], 1).tolist()
    }
    drawn = torch.cat([sample["states"], sample["return_to_go"][:, None], sample["horizon"][:, None]], 1).tolist()
    assert all(tuple(r) in rows for r in drawn)
    assert {4.0, -1.0, 6.0, 3.0} <= set(sample["return_to_go"].tolist())


def test_exploration_command_from_the_best_episodes():
    returns, lengths = np.array([10.0, 20.0, 30.0]), np.array([100, 200, 300])
    std = float(np.std(returns))
    assert exploration_command(returns, lengths, 320.0, 0.0) == (20.0, 200.0)
    assert exploration_command(returns, lengths, 320.0, 1.0) == pytest.approx((20.0 + std, 200.0))
    assert exploration_command(returns, lengths, 25.0, 1.0) == (25.0, 200.0)  # capped


def test_sparse_reward_pays_the_sum_at_the_last_step():
    dense = gym.make("CartPole-v1")
    sparse = SparseReward(gym.make("CartPole-v1"))
    for env in (dense, sparse):
        env.reset(seed=3)
        env.action_space.seed(3)
    totals, rewards = [], []
    for env in (dense, sparse):
        total, done, got = 0.0, False, []
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + reward, terminated or truncated
            got.append(reward)
        totals.append(total)
        rewards.append(got)
    assert totals[0] == totals[1] > 1
    assert rewards[1][:-1] == [0.0] * (len(rewards[1]) - 1) and rewards[1][-1] == totals[0]


def test_command_wrapper_appends_and_updates_the_command():
    env = CommandObservation(ChainEnv(), [0.5, 0.1])
    assert env.observation_space.shape == (4,)
    obs, _ = env.reset(options={"command": [3.0, 2.0]})
    np.testing.assert_allclose(obs[2:], [1.5, 0.2])
    obs, *_ = env.step(1)  # reward 1: return-to-go 2, horizon 1
    np.testing.assert_allclose(obs[2:], [1.0, 0.1])
    obs, *_ = env.step(1)  # the horizon stays at least 1
    np.testing.assert_allclose(obs[2:], [0.5, 0.1])
    env.set_default_command([7.0, 0.0])
    obs, _ = env.reset()
    np.testing.assert_allclose(obs[2:], [3.5, 0.1])


def test_the_command_alone_changes_the_policy_output():
    cfg = udrl_cfg()
    env = make_run_env(cfg)
    torch.manual_seed(0)
    model = make_model(cfg, env.observation_space, env.action_space)
    model.updates.fill_(1)
    state = torch.tensor([[0.3, 0.1]])
    low = torch.cat([state, torch.tensor([[0.05, 0.1]])], dim=1)
    high = torch.cat([state, torch.tensor([[0.2, 0.1]])], dim=1)
    assert not torch.allclose(model(low), model(high))
    assert torch.allclose(model(low), model(low.clone()))


def test_box_actions_get_a_gaussian_policy_and_uniform_warm_up():
    cfg = udrl_cfg(env="Pendulum-v1")
    env = make_run_env(cfg)
    model = make_model(cfg, env.observation_space, env.action_space)
    obs = torch.zeros(64, 5)
    warm = model.act(obs, torch.zeros(64, 1)).actions
    assert warm.shape == (64, 1) and float(warm.min()) >= -2.0 and float(warm.max()) <= 2.0 and warm.std() > 0.5
    model.updates.fill_(1)
    assert torch.equal(model.act(obs, torch.zeros(64, 1), True).actions, model(obs))


def chain_batch(rights: list[list[int]], episode_base: int = 0, command=(5.0, 10.0)) -> dict[str, torch.Tensor]:
    """Trajectories [N, 10] of whole chain episodes (one per row), as actor workers write them."""
    N = len(rights)
    actions = torch.tensor(rights, dtype=torch.int64).unsqueeze(-1)
    rewards = actions[..., 0].float()
    rtg = command[0] - torch.cat([torch.zeros(N, 1), rewards.cumsum(1)], dim=1)
    t = torch.arange(11, dtype=torch.float32).expand(N, 11)
    state = torch.stack([t / 10, torch.cat([torch.zeros(N, 1), rewards.cumsum(1)], dim=1) / 10], dim=-1)
    command_obs = torch.stack([rtg * 0.025, (command[1] - t).clamp(min=1) * 0.01], dim=-1)
    dones = torch.zeros(N, 10)
    dones[:, -1] = 1
    return {
        "obs": torch.cat([state, command_obs], dim=-1),
        "actions": actions,
        "rewards": rewards,
        "dones": dones,
        # Row n: env n's episode number `episode_base`, as an actor worker numbers them
        "episode_ids": torch.from_numpy(episode_ids.pack(np.arange(N), 0, np.full(N, episode_base)))
        .unsqueeze(1)
        .expand(N, 10)
        .clone(),
    }


def make_udrl(**overrides) -> tuple[UDRL, dict[str, torch.Tensor]]:
    cfg = udrl_cfg(**overrides)
    env = make_run_env(cfg)
    model = make_model(cfg, env.observation_space, env.action_space)
    algo = UDRL(cfg, derive(cfg), model, "cpu", NonFiniteGuard(0))
    control = allocate_control(cfg, derive(cfg))
    algo.control = control
    return algo, control


def test_an_iteration_trains_on_stitched_episodes_and_writes_the_command():
    torch.manual_seed(0)
    algo, control = make_udrl(udrl_warmup_episodes=6, udrl_updates_per_iteration=30, batch_size=64, udrl_last_few=3)
    rng = np.random.default_rng(0)
    rights = rng.integers(0, 2, size=(6, 10)).tolist()
    # Each episode arrives in two trajectories of 5 steps: the first half must wait for the second.
    batch = chain_batch(rights)
    first = {k: (v[:, :6] if k == "obs" else v[:, :5]) for k, v in batch.items()}
    first["dones"] = torch.zeros(6, 5)
    second = {k: (v[:, 5:] if k == "obs" else v[:, 5:]) for k, v in batch.items()}
    assert algo.update(first, 0) == {} and len(algo.buffer) == 0 and len(algo.partial) == 6
    assert torch.isnan(control["commands"]).all()
    stats = algo.update(second, 0)
    assert len(algo.buffer) == 6 and not algo.partial and algo.iterations == 1
    assert sorted(algo.buffer.returns().tolist()) == sorted(float(sum(r)) for r in rights)
    assert algo.buffer.flat()["states"].shape == (60, 2)  # the state, without the command the actors appended
    assert int(algo.model.updates) == 30 and math.isfinite(stats["loss"])
    top3 = np.sort([sum(r) for r in rights])[::-1][:3]
    assert top3.mean() <= stats["udrl/command_return"] <= top3.mean() + top3.std() + 1e-6
    assert stats["udrl/command_horizon"] == 10.0 and stats["udrl/buffer_top_return"] == pytest.approx(top3.mean())
    # The actors explore with the drawn command; the model keeps the command without the draw (the greedy
    # evaluations', the engine evaluator's and enjoy.py's).
    torch.testing.assert_close(
        control["commands"][0], torch.tensor([stats["udrl/command_return"], 10.0], dtype=torch.float32)
    )
    torch.testing.assert_close(algo.model.command, torch.tensor([top3.mean(), 10.0], dtype=torch.float32))
    assert torch.equal(control["commands"][0], control["commands"][-1])


def buffer_nll(algo: UDRL) -> float:
    flat = algo.buffer.flat()
    commands = torch.stack([flat["return_to_go"], flat["horizon"]], -1) * torch.tensor(algo.cfg.command_scale)
    with torch.no_grad():
        dist = algo.model.distribution(torch.cat([flat["states"], commands], -1))
        return float(-dist.log_prob(flat["actions"].reshape(-1)).mean())


def test_updates_lower_the_loss_on_a_fixed_buffer():
    torch.manual_seed(1)
    algo, _ = make_udrl(
        udrl_warmup_episodes=11,
        udrl_updates_per_iteration=100,
        batch_size=128,
        command_scale=[0.3, 0.1],
        learning_rate=3e-3,
    )
    # Right for the first k steps, k = 0..10: the action is a function of the command (right iff return-to-go > 0).
    rights = [[int(t < k) for t in range(10)] for k in range(11)]
    algo.ingest(chain_batch(rights))
    before = buffer_nll(algo)
    stats = algo.iteration()
    after = buffer_nll(algo)
    assert before > 0.6 and after < 0.5 * before, (before, after, stats["loss"])


def test_checkpoint_round_trip_keeps_buffer_command_and_optimizer():
    torch.manual_seed(2)
    algo, _ = make_udrl(udrl_warmup_episodes=8, udrl_updates_per_iteration=5, batch_size=32)
    algo.update(chain_batch(np.random.default_rng(2).integers(0, 2, size=(8, 10)).tolist()), 0)
    algo.update(chain_batch([[1] * 10], episode_base=100), 0)  # one more: not yet the next iteration
    state, replay, model_state = algo.state_dict(), algo.replay_state(), algo.model.state_dict()
    fresh, control = make_udrl(udrl_warmup_episodes=8)
    fresh.model.load_state_dict(model_state)
    fresh.load_state_dict(state)
    fresh.load_replay_state(replay)
    assert fresh.buffer.returns().tolist() == algo.buffer.returns().tolist()
    for key in ("states", "actions", "return_to_go", "horizon"):
        assert torch.equal(fresh.buffer.flat()[key], algo.buffer.flat()[key])
    assert (fresh.episodes, fresh.since_iteration, fresh.iterations) == (9, 1, 1)
    torch.testing.assert_close(control["commands"][0], algo.model.command)  # written again on resume
    assert fresh.optimizer.state_dict()["state"][0]["step"] == algo.optimizer.state_dict()["state"][0]["step"]


@pytest.mark.parametrize(
    ("overrides", "flag"),
    [
        ({"command_scale": [0.1]}, "--command_scale"),
        ({"udrl_last_few": 600}, "--udrl_last_few"),
        ({"udrl_buffer_episodes": 0}, "--udrl_buffer_episodes"),
        ({"num_policies": 2}, "--num_policies"),
        ({"use_rnn": True}, "--use_rnn"),
        ({"reward_scale": 0.1}, "--reward_scale"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(overrides, flag):
    errors = verify(udrl_cfg(**overrides))
    assert any(line.startswith(flag) for line in errors), errors


def test_a_negative_command_cap_is_valid():
    assert verify(udrl_cfg(max_command_return=-50.0)) == []  # envs with negative returns (Pendulum)
    assert verify(udrl_cfg(max_command_return=math.inf)) == []  # the default: no cap (CartPole asks for 500)
    assert any(e.startswith("--max_command_return") for e in verify(udrl_cfg(max_command_return=math.nan)))


def test_a_restarted_workers_episode_is_not_spliced_onto_the_dead_workers():
    """Regression: a restarted actor worker numbered its episodes from 0 again, so its first episode on an env took
    the id of the dead worker's unfinished one there: stitch joined the two, and the dead one's steps were never
    freed otherwise. Ids carry the worker's incarnation, and an env's new episode ends the wait of its older one."""
    whole = chain_batch([[1] * 10])
    first_half = {k: (v[:, :6] if k == "obs" else v[:, :5]) for k, v in whole.items()}
    first_half["dones"] = torch.zeros(1, 5)
    partial: dict = {}
    assert stitch(first_half, 2, partial) == [] and len(partial) == 1  # the worker dies here, mid-episode
    restarted = chain_batch([[0] * 10])  # the new incarnation's first episode on the same env
    restarted["episode_ids"] = torch.from_numpy(episode_ids.pack(np.zeros(1, np.int64), 1, np.zeros(1, np.int64)))
    restarted["episode_ids"] = restarted["episode_ids"].unsqueeze(1).expand(1, 10).clone()
    assert int(restarted["episode_ids"][0, 0]) != int(whole["episode_ids"][0, 0])
    (states, actions, rewards), *more = stitch(restarted, 2, partial)
    assert not more and len(rewards) == 10 and float(rewards.sum()) == 0.0  # its own 10 steps, nothing spliced
    assert partial == {}  # the dead worker's 5 steps are gone


def test_relabelling_ragged_episodes_against_a_slow_loop_from_the_paper():
    """UDRL's hindsight commands (Srivastava et al. 2019, algorithm 2): step t of an episode of length L is labelled
    with the return it went on to get, sum_{k >= t} r_k, and the steps it had left, L - t."""
    rng = np.random.default_rng(5)
    for length in (1, 3, 17):
        rewards = rng.normal(size=length).round(2)
        rtg, horizon = relabel(torch.tensor(rewards, dtype=torch.float64))
        assert rtg.tolist() == pytest.approx([sum(rewards[t:]) for t in range(length)])
        assert horizon.tolist() == [float(length - t) for t in range(length)]
