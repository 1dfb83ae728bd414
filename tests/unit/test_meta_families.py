"""The bandit, gaussian_bandit and tabular_mdp families (envs/meta/bandits.py, envs/meta/tabular_mdp.py) and their
baselines (envs/meta/meta_baselines.py): seeded disjoint splits, rewards that follow the task, RL^2 trials of n pulls,
the flags reaching the env, and baselines that rank as they should."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from appo.config.cfg import parse_cfg
from appo.config.verify import verify
from appo.envs import make_env, make_run_env
from appo.envs.meta import meta_baselines as mb
from appo.envs.meta.tabular_mdp import mdp_arrays, mdp_keys
from appo.envs.meta.tasks import task_split
from appo.envs.presets import env_preset

NAMES = ("bandit", "gaussian_bandit", "tabular_mdp")


@pytest.mark.parametrize("name", NAMES)
def test_env_checker(name: str) -> None:
    check_env(make_env(name).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("name", NAMES)
def test_splits_are_seeded_and_disjoint(name: str) -> None:
    env = make_env(name)
    train, test = task_split(env, 20, 30, seed=3)
    assert (train, test) == task_split(env, 20, 30, seed=3)
    assert task_split(env, 20, 30, seed=4)[1] != test
    keys = {tuple(sorted(t.items())) for t in train}
    assert len(keys) == 20 and not keys & {tuple(sorted(t.items())) for t in test}


def test_bandit_pays_the_task() -> None:
    env = make_env("bandit", task={"p0": 1.0, "p1": 0.0, "p2": 0.0, "p3": 0.0, "p4": 0.0})
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(0)
    assert obs.tolist() == [0.0] and reward == 1.0 and terminated and info["regret"] == 0.0  # one pull, then done
    assert env.step(1)[1] == 0.0
    env.unwrapped.set_task({f"p{i}": 0.3 for i in range(5)})
    rewards = [env.step(2)[1] for _ in range(4000)]
    assert abs(np.mean(rewards) - 0.3) < 0.03
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        env.unwrapped.set_task({f"p{i}": 1.5 for i in range(5)})


def test_gaussian_bandit_pays_the_mean_plus_unit_noise() -> None:
    env = make_env("gaussian_bandit", num_arms=3, task={"mu0": -2.0, "mu1": 0.5, "mu2": 3.0})
    env.reset(seed=1)
    rewards = np.array([env.step(2)[1] for _ in range(4000)])
    assert abs(rewards.mean() - 3.0) < 0.06 and abs(rewards.std() - 1.0) < 0.05
    means = np.array([list(t.values()) for t in env.unwrapped.sample_tasks(2000, np.random.default_rng(0))])
    assert means.shape == (2000, 3) and abs(means.mean()) < 0.05 and abs(means.std() - 1.0) < 0.05


def _chain_task(num_states: int = 3, num_actions: int = 2) -> dict[str, float]:
    """Action 0 pays 5 and moves s -> s + 1 (the last state stays); action 1 pays -1 and stays."""
    task = dict.fromkeys(mdp_keys(num_states, num_actions), 0.0)
    for s in range(num_states):
        task[f"r_{s}_0"], task[f"r_{s}_1"] = 5.0, -1.0
        task[f"p_{s}_0_{min(s + 1, num_states - 1)}"] = 1.0
        task[f"p_{s}_1_{s}"] = 1.0
    return task


def test_tabular_mdp_follows_the_task() -> None:
    task = _chain_task()
    rewards, moves = mdp_arrays(task)
    assert rewards.shape == (3, 2) and moves.shape == (3, 2, 3) and np.allclose(moves.sum(-1), 1.0)
    env = make_env("tabular_mdp", num_states=3, num_actions=2, episode_steps=4, task=task)
    obs, info = env.reset(seed=0)
    assert obs.tolist() == [1.0, 0.0, 0.0] and info["state"] == 0
    states, total = [], []
    for _ in range(4):
        obs, reward, terminated, truncated, info = env.step(0)
        states.append(info["state"])
        total.append(reward)
    assert states == [1, 2, 2, 2] and obs.tolist() == [0.0, 0.0, 1.0] and terminated  # the horizon ends the task
    assert abs(np.mean(total) - 5.0) < 3.0  # N(5, 1) noise on each
    sampled = env.unwrapped.sample_tasks(300, np.random.default_rng(0))
    r = np.stack([mdp_arrays(t)[0] for t in sampled])
    p = np.stack([mdp_arrays(t)[1] for t in sampled])
    assert abs(r.mean() - 1.0) < 0.05 and abs(r.std() - 1.0) < 0.05 and np.allclose(p.sum(-1), 1.0)
    assert abs(p.mean() - 1 / 3) < 0.01 and abs(p.var() - 2 / 36) < 0.005  # Dirichlet(1, 1, 1) marginals


def test_flags_reach_the_env_and_are_checked(tmp_path) -> None:
    base = [f"--train_dir={tmp_path}", "--task_schedule=per_trial", "--task_visibility=hidden"]
    cfg = parse_cfg(["--env=bandit", "--num_arms=7", "--episodes_per_trial=10", *base])
    env = make_run_env(cfg)
    assert env.action_space.n == 7 and env.observation_space.shape == (1 + 7 + 2,)
    obs, _ = env.reset(seed=0)
    pulls = 0
    while True:  # one trial: 10 one-step episodes, the previous pull in the observation
        obs, reward, terminated, truncated, info = env.step(pulls % 7)
        pulls += 1
        assert obs[1 + (pulls - 1) % 7] == 1.0 and obs[-2] == reward and obs[-1] == 1.0
        if terminated or truncated:
            break
    assert pulls == 10 and info["trial"]["lengths"] == [1] * 10 and terminated
    assert make_run_env(cfg, split="test").reset(seed=0)[0].shape == (10,)
    cfg = parse_cfg(["--env=tabular_mdp", "--mdp_states=4", "--mdp_actions=3", "--mdp_episode_steps=6", *base])
    env = make_run_env(cfg)
    assert env.action_space.n == 3 and env.observation_space.shape == (4 + 3 + 2,)
    env.reset(seed=0)
    steps = 0
    while not any(env.step(0)[2:4]):
        steps += 1
    assert steps + 1 == 6 * cfg.episodes_per_trial
    for name in NAMES:  # the presets make them meta-RL families with the paper's n=10 trials
        assert env_preset(name)["task_schedule"] == "per_trial" and env_preset(name)["episodes_per_trial"] == 10
    errors = verify(parse_cfg(["--env=bandit", "--num_arms=1", "--mdp_states=0", f"--train_dir={tmp_path}"]))
    assert "--num_arms=1: a bandit needs at least 2 arms" in errors and "--mdp_states=0: must be > 0" in errors


def test_a_long_bandit_trial_gets_a_slot_of_its_own(tmp_path) -> None:
    def cfg(*flags: str):
        return parse_cfg(["--env=bandit", f"--train_dir={tmp_path}", *flags])

    assert (cfg().rollout, cfg().batch_size) == (20, 640)  # n = 10: two trials a slot, as measured
    long = cfg("--episodes_per_trial=100")
    assert (long.rollout, long.batch_size, long.num_batches_per_epoch) == (100, 1600, 4)
    assert cfg("--episodes_per_trial=100", "--rollout=50").rollout == 50  # a flag still wins
    assert cfg("--episodes_per_trial=100", "--algo=maml_trpo").rollout != 100  # the preset is PPO's


def test_bandit_baselines_rank_as_expected() -> None:
    _, tasks = task_split(make_env("bandit"), 0, 200, seed=0)
    random = mb.bandit_random(tasks, 100, seed=0)
    assert 47 < random < 53 and mb.bandit_random(tasks, 100, seed=0) == random
    for baseline in (mb.bandit_ucb1, mb.bandit_thompson, mb.bandit_gittins):
        assert baseline(tasks, 100, seed=0) > random + 10
    assert mb.bandit_gittins(tasks, 100, seed=0) > mb.bandit_random(tasks, 100, seed=0) + 20
    best = float(mb.arm_means(tasks).max(axis=1).mean()) * 100
    assert mb.bandit_gittins(tasks, 100, seed=0) < best
    _, gauss = task_split(make_env("gaussian_bandit"), 0, 200, seed=0)
    assert mb.bandit_thompson(gauss, 50, gaussian=True) > mb.bandit_random(gauss, 50, gaussian=True) + 20
    assert mb.bandit_gittins(gauss, 50, gaussian=True) > mb.bandit_random(gauss, 50, gaussian=True) + 20
    # Brezzi & Lai's psi by hand at a point of each piece; it grows with s past 0.2 (its pieces jump at 0.2 and 15)
    s = np.array([0.1, 0.5, 2.0, 10.0, 100.0])
    by_hand = [0.05**0.5, 0.49 - 0.11 / 0.5**0.5, 0.63 - 0.26 / 2**0.5, 0.77 - 0.58 / 10**0.5]
    by_hand.append((2 * np.log(100) - np.log(np.log(100)) - np.log(16 * np.pi)) ** 0.5)
    assert np.allclose(mb.brezzi_lai_psi(s), by_hand)
    assert np.all(np.diff(mb.brezzi_lai_psi(np.linspace(0.21, 200, 2000))) > -0.1)


def test_mdp_baselines_rank_as_expected() -> None:
    _, tasks = task_split(make_env("tabular_mdp"), 0, 100, seed=0)
    random = mb.mdp_random(tasks, 10)
    assert 90 < random < 110
    psrl = mb.mdp_psrl(tasks, 10)
    assert psrl > random + 20
    # Planning on the posterior means with the whole trial remembered beats PSRL's draws over 10 episodes; the
    # oracle told the task is the ceiling of both.
    planner, oracle = mb.mdp_planner(tasks, 10), mb.mdp_oracle(tasks, 10)
    assert psrl + 5 < planner < oracle - 40
    # On a known deterministic chain the H-step optimum is action 0 everywhere (5 a step).
    rewards, moves = mdp_arrays(_chain_task())
    policy = mb.finite_horizon_policy(rewards[None], moves[None], 4)
    assert policy.shape == (1, 4, 3) and np.all(policy == 0)


def test_tasks_of_many_values_get_short_buckets():
    """Per-task statistics (episode_by_task/ tags) label a bandit's or an MDP's task by its mean value, not by
    hundreds of keys; a task of a few values keeps its rounded values."""
    from appo.envs.meta.wrappers import task_bucket

    mdp = {f"r_{s}_{a}": 1.2 for s in range(10) for a in range(5)}
    assert task_bucket(mdp) == "mean_of_50=+1.0"
    assert task_bucket({"p0": 0.2, "p1": 0.9, "p2": 0.4, "p3": 0.1, "p4": 0.7}) == "mean_of_5=+0.5"
    assert task_bucket({"goal_x": 0.3, "goal_y": -1.2}) == "goal_x=+0.5,goal_y=-1.0"


def test_the_envs_of_a_run_share_one_task_split():
    """Every env of an actor worker and its task assigner read the same train task list (10,000 tabular MDP
    tasks drawn for each of 64 envs held 3.5 GB per worker); a run of another size or seed gets its own."""
    from appo.envs import make_task_assigner

    cfg = parse_cfg(["--env=tabular_mdp", "--num_train_tasks=50", "--mdp_states=4"])
    envs = [make_run_env(cfg, env_idx=i) for i in range(3)]
    assigners = [make_task_assigner(cfg, env, i) for i, env in enumerate(envs)]
    assert all(a.tasks is assigners[0].tasks for a in assigners)
    assert assigners[0].tasks == task_split(make_env("tabular_mdp", num_states=4), 50, cfg.num_test_tasks, cfg.seed)[0]
    other = parse_cfg(["--env=tabular_mdp", "--num_train_tasks=50", "--mdp_states=5"])
    tasks = make_task_assigner(other, make_run_env(other), 0).tasks
    assert len(tasks[0]) != len(assigners[0].tasks[0])  # 5 states: more values per task


def test_ucb1_tuned_on_training_tasks_scores_higher_on_held_out_ones() -> None:
    """The paper's UCB1 was tuned: c chosen on a run's training tasks (never the held-out ones it is judged on)
    lifts n=100, k=5 from about 67 (c = sqrt 2) to the paper's 78."""
    from appo.envs.meta import meta_baselines as mb

    train, test = task_split(make_env("bandit", num_arms=5), 300, 300, 0)
    c = mb.tuned_ucb1_c(train, 100, 0)
    tuned, untuned = mb.bandit_ucb1(test, 100, 0, c=c), mb.bandit_ucb1(test, 100, 0)
    assert c < 2**0.5 and tuned > untuned + 5.0, (c, tuned, untuned)
    assert tuned > 75.0, tuned
