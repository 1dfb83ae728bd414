"""Classic baselines for the bandit and tabular-MDP families (the rows of RL^2's Tables 1 and 2). Numpy only.

Each function plays one trial of `n` pulls (bandits) or `n` episodes (MDPs) on every task of `tasks` (the dicts
of envs/meta/bandits.py or envs/meta/tabular_mdp.py, e.g. a run's held-out test tasks) and returns the mean total reward
per trial. All tasks are simulated at once, vectorised; the pulls, transitions and the policies' own draws come
from `np.random.default_rng(seed)`, so a call is deterministic. `gaussian=True` reads the tasks as
gaussian_bandit tasks (arm means 'mu{i}', pulls pay N(mu, 1)); otherwise Bernoulli ('p{i}').

Bandits:
- `bandit_random`: a uniformly random arm at every pull.
- `bandit_ucb1`: each arm once, then argmax of mean + c sqrt(ln t / n_i), t the pulls so far; c = sqrt(2) is
  Auer et al.'s (2002) UCB1 and the default. `tuned_ucb1_c` picks c on training tasks (the paper's UCB1 was
  tuned: its row is higher than c = sqrt(2) scores), to be evaluated on held-out ones.
- `bandit_thompson`: Thompson sampling; Bernoulli: Beta(1, 1) prior; Gaussian: N(0, 1) prior, known variance 1.
- `bandit_gittins`: Brezzi & Lai's (2002) closed-form approximation of the Gittins index of the posterior
  (Beta(1, 1) prior, or N(0, 1) with variance 1): index = mean + sd * psi(v / (c sigma^2)), c = ln(1 / gamma),
  with the discount gamma = 1 - 1 / (pulls left), the remaining horizon as the effective one (so the last pull
  is greedy), unless `discount` fixes it. Ties are broken by the lowest arm index in every policy.
Tabular MDPs (R[s, a] ~ N(1, 1), rewards N(R, 1), P[s, a] ~ Dirichlet(1), start in state 0, H steps):
- `mdp_random`: a uniformly random action at every step.
- `mdp_psrl`: posterior sampling (Osband et al. 2013): at the start of each episode draw R from its posterior
  under a N(1, 1) prior with known noise variance 1, and every row of P from Dirichlet(1 + counts); play the
  H-step optimal policy of the draw (finite-horizon value iteration).
- `mdp_planner`: certainty-equivalent planning: at the start of each episode play the H-step optimal policy of the
  posterior means (R under the N(1, 1) prior, P under Dirichlet(1 + counts)), plus `bonus` / sqrt(1 + visits) on
  R (0 by default: no optimism). A model-based agent that remembers every reward and transition of the trial.
- `mdp_oracle`: the H-step optimal policy of the true mean rewards and transitions, told the task (the ceiling)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from appo.envs.meta.tabular_mdp import mdp_arrays

Tasks = Sequence[Mapping[str, float]]


def arm_means(tasks: Tasks, gaussian: bool = False) -> NDArray[np.float64]:
    """(tasks, K) array of the arm means of bandit tasks."""
    prefix = "mu" if gaussian else "p"
    k = len(tasks[0])
    return np.array([[task[f"{prefix}{i}"] for i in range(k)] for task in tasks], dtype=np.float64)


def _play(tasks: Tasks, n: int, seed: int, gaussian: bool, choose) -> float:  # type: ignore[no-untyped-def]
    """Run `choose(t, counts, sums, rng) -> arms` for n pulls on every task; the mean total reward per trial."""
    means = arm_means(tasks, gaussian)
    rng = np.random.default_rng(seed)
    num, k = means.shape
    counts, sums = np.zeros((num, k)), np.zeros((num, k))
    rows = np.arange(num)
    total = np.zeros(num)
    for t in range(n):
        arms = choose(t, n, counts, sums, rng)
        mu = means[rows, arms]
        reward = mu + rng.standard_normal(num) if gaussian else (rng.random(num) < mu).astype(np.float64)
        counts[rows, arms] += 1.0
        sums[rows, arms] += reward
        total += reward
    return float(total.mean())


def bandit_random(tasks: Tasks, n: int, seed: int = 0, gaussian: bool = False) -> float:
    return _play(tasks, n, seed, gaussian, lambda t, n, c, s, rng: rng.integers(c.shape[1], size=c.shape[0]))


def bandit_ucb1(tasks: Tasks, n: int, seed: int = 0, gaussian: bool = False, c: float = 2.0**0.5) -> float:
    def choose(t: int, n: int, counts: NDArray, sums: NDArray, rng: np.random.Generator) -> NDArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            score = sums / counts + c * np.sqrt(np.log(max(t, 1)) / counts)
        return np.argmax(np.where(counts == 0, np.inf, score), axis=1)

    return _play(tasks, n, seed, gaussian, choose)


UCB1_GRID = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0, 2.0**0.5, 2.0)


def tuned_ucb1_c(train_tasks: Tasks, n: int, seed: int = 0, gaussian: bool = False) -> float:
    """The UCB1 constant of UCB1_GRID that scores best on `train_tasks` (never the tasks it is then judged on)."""
    scores = [bandit_ucb1(train_tasks, n, seed, gaussian, c) for c in UCB1_GRID]
    return UCB1_GRID[int(np.argmax(scores))]


def bandit_thompson(tasks: Tasks, n: int, seed: int = 0, gaussian: bool = False) -> float:
    def choose(t: int, n: int, counts: NDArray, sums: NDArray, rng: np.random.Generator) -> NDArray:
        if gaussian:
            draw = sums / (1.0 + counts) + rng.standard_normal(counts.shape) / np.sqrt(1.0 + counts)
        else:
            draw = rng.beta(1.0 + sums, 1.0 + counts - sums)
        return np.argmax(draw, axis=1)

    return _play(tasks, n, seed, gaussian, choose)


def brezzi_lai_psi(s: NDArray[np.float64]) -> NDArray[np.float64]:
    """Brezzi & Lai's (2002) psi, the standardised Gittins-index excess, piecewise in s = v / (c sigma^2)."""
    s = np.asarray(s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.sqrt(np.maximum(s, 1e-300))
        big = np.sqrt(
            np.maximum(
                2.0 * np.log(np.maximum(s, 15.0)) - np.log(np.log(np.maximum(s, 15.0))) - np.log(16.0 * np.pi), 0.0
            )
        )
        return np.select(
            [s <= 0.2, s <= 1.0, s <= 5.0, s <= 15.0],
            [np.sqrt(s / 2.0), 0.49 - 0.11 / root, 0.63 - 0.26 / root, 0.77 - 0.58 / root],
            big,
        )


def bandit_gittins(tasks: Tasks, n: int, seed: int = 0, gaussian: bool = False, discount: float | None = None) -> float:
    def choose(t: int, n: int, counts: NDArray, sums: NDArray, rng: np.random.Generator) -> NDArray:
        gamma = discount if discount is not None else 1.0 - 1.0 / (n - t)
        c = np.inf if gamma <= 0.0 else -np.log(gamma)
        if gaussian:  # posterior N(sums / (1 + counts), 1 / (1 + counts)), noise variance 1
            mean, var, noise = sums / (1.0 + counts), 1.0 / (1.0 + counts), 1.0
        else:  # Beta(1 + sums, 1 + failures): the arm's own variance p (1 - p) is its sigma^2
            mean = (1.0 + sums) / (2.0 + counts)
            var = mean * (1.0 - mean) / (3.0 + counts)
            noise = mean * (1.0 - mean)
        index = mean + np.sqrt(var) * brezzi_lai_psi(var / (c * noise))
        return np.argmax(index, axis=1)

    return _play(tasks, n, seed, gaussian, choose)


def _mdp_arrays(tasks: Tasks) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    pairs = [mdp_arrays(task) for task in tasks]
    return np.stack([r for r, _ in pairs]), np.stack([p for _, p in pairs])


def _run_episodes(rewards: NDArray, moves: NDArray, n: int, horizon: int, rng: np.random.Generator, policy) -> float:  # type: ignore[no-untyped-def]
    """n episodes of `horizon` steps on every task; `policy(visits, reward_sums, transitions, rng)` gives
    (num, H, S) actions for the episode, or None for uniformly random ones."""
    num, s_count, a_count = rewards.shape
    rows = np.arange(num)
    cumulative = np.cumsum(moves, axis=-1)
    cumulative /= cumulative[..., -1:]
    visits = np.zeros((num, s_count, a_count))
    reward_sums = np.zeros((num, s_count, a_count))
    transitions = np.zeros((num, s_count, a_count, s_count))
    total = np.zeros(num)
    for _ in range(n):
        actions = policy(visits, reward_sums, transitions, rng)
        state = np.zeros(num, dtype=np.int64)
        for h in range(horizon):
            a = actions[rows, h, state] if actions is not None else rng.integers(a_count, size=num)
            reward = rewards[rows, state, a] + rng.standard_normal(num)
            u = rng.random(num)[:, None]
            nxt = np.minimum((cumulative[rows, state, a] <= u).sum(axis=1), s_count - 1)
            visits[rows, state, a] += 1.0
            reward_sums[rows, state, a] += reward
            transitions[rows, state, a, nxt] += 1.0
            total += reward
            state = nxt
    return float(total.mean())


def mdp_random(tasks: Tasks, n: int, horizon: int = 10, seed: int = 0) -> float:
    rewards, moves = _mdp_arrays(tasks)
    rng = np.random.default_rng(seed)
    return _run_episodes(rewards, moves, n, horizon, rng, lambda *args: None)


def finite_horizon_policy(rewards: NDArray, moves: NDArray, horizon: int) -> NDArray[np.int64]:
    """Optimal (num, H, S) actions of MDPs with mean rewards (num, S, A) and transitions (num, S, A, S)."""
    num, s_count, _ = rewards.shape
    value = np.zeros((num, s_count))
    actions = np.zeros((num, horizon, s_count), dtype=np.int64)
    for h in reversed(range(horizon)):
        q = rewards + np.einsum("nsat,nt->nsa", moves, value)
        actions[:, h] = np.argmax(q, axis=2)
        value = q.max(axis=2)
    return actions


def mdp_psrl(tasks: Tasks, n: int, horizon: int = 10, seed: int = 0) -> float:
    rewards, moves = _mdp_arrays(tasks)
    rng = np.random.default_rng(seed)

    def policy(visits: NDArray, reward_sums: NDArray, transitions: NDArray, rng: np.random.Generator) -> NDArray:
        precision = 1.0 + visits  # prior N(1, 1), noise variance 1
        sampled_r = (1.0 + reward_sums) / precision + rng.standard_normal(visits.shape) / np.sqrt(precision)
        gammas = rng.standard_gamma(1.0 + transitions)
        sampled_p = gammas / gammas.sum(axis=-1, keepdims=True)
        return finite_horizon_policy(sampled_r, sampled_p, horizon)

    return _run_episodes(rewards, moves, n, horizon, rng, policy)


def mdp_planner(tasks: Tasks, n: int, horizon: int = 10, seed: int = 0, bonus: float = 0.0) -> float:
    rewards, moves = _mdp_arrays(tasks)
    rng = np.random.default_rng(seed)

    def policy(visits: NDArray, reward_sums: NDArray, transitions: NDArray, rng: np.random.Generator) -> NDArray:
        precision = 1.0 + visits
        mean_r = (1.0 + reward_sums) / precision + bonus / np.sqrt(precision)
        mean_p = (1.0 + transitions) / (1.0 + transitions).sum(axis=-1, keepdims=True)
        return finite_horizon_policy(mean_r, mean_p, horizon)

    return _run_episodes(rewards, moves, n, horizon, rng, policy)


def mdp_oracle(tasks: Tasks, n: int, horizon: int = 10, seed: int = 0) -> float:
    rewards, moves = _mdp_arrays(tasks)
    rng = np.random.default_rng(seed)
    best = finite_horizon_policy(rewards, moves, horizon)
    return _run_episodes(rewards, moves, n, horizon, rng, lambda *args: best)
