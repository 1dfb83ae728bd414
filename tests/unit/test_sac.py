"""SAC's math and its replay: the squashed log-prob against a change-of-variables reference, the Polyak update,
the temperature loss's gradient sign, the ring buffer, trajectories -> transitions, the numpy actor against
torch's, and one update's bookkeeping (replay ratio, warm-up, checkpoint state)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.algorithms.base import NonFiniteGuard
from appo.algorithms.sac.algorithm import SAC, alpha_loss
from appo.algorithms.sac.replay import Replay, transitions
from appo.config.cfg import merge_cfg
from appo.config.derive import derive
from appo.config.verify import verify
from appo.models.numpy_twins import NumpySquashedGaussian, make_numpy_policy
from appo.models.registry import make_model
from appo.models.squashed_gaussian import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    SquashedGaussianActor,
    polyak_update,
    squashed_log_prob,
)

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
BOX = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


# Small networks: one torch thread is faster than two fighting over a busy machine (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sac_cfg(**overrides):
    base = {"algo": "sac", "env": "Pendulum-v1", "actor_mlp_layers": [16, 16], "critic_mlp_layers": [16, 16]}
    return merge_cfg(base | overrides, None)


def test_squashed_log_prob_is_the_change_of_variables():
    """log p(a) = log N(u) - log |det da/du| with a = tanh(u); the Jacobian here comes from autograd, not from the
    formula under test. Away from saturation the 1e-6 in the correction is invisible; at saturation it caps the
    correction at log(1e-6) per dimension, however far u goes."""
    torch.manual_seed(0)
    mean, log_std = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64) * 0.5
    u = (mean + log_std.exp() * torch.randn(5, 3, dtype=torch.float64)).clamp(-2.5, 2.5)
    got = squashed_log_prob(u, mean, log_std)
    for i in range(5):
        jac = torch.autograd.functional.jacobian(torch.tanh, u[i])
        gaussian = torch.distributions.Normal(mean[i], log_std[i].exp()).log_prob(u[i]).sum()
        reference = gaussian - torch.logdet(jac)
        torch.testing.assert_close(got[i], reference, rtol=0.0, atol=3e-4)  # 3 dimensions, |u| <= 2.5
        assert got[i] != reference  # the epsilon is there
    # Saturated: tanh'(12) ~ 1.5e-10, tanh'(30) ~ 3.5e-26; both corrections are log(1e-6) within 2e-4, so
    # moving u from 12 to 30 changes the log-prob by the Gaussian's change alone (the exact one would add ~36).
    far = u.clone()
    far[0, 0] = 12.0
    farther = far.clone()
    farther[0, 0] = 30.0
    gaussian_gap = torch.distributions.Normal(mean[0, 0], log_std[0, 0].exp()).log_prob(
        torch.tensor([12.0, 30.0], dtype=torch.float64)
    )
    step = squashed_log_prob(farther, mean, log_std)[0] - squashed_log_prob(far, mean, log_std)[0]
    torch.testing.assert_close(step, gaussian_gap[1] - gaussian_gap[0], rtol=0.0, atol=2e-4)


def test_squashed_log_prob_matches_torch_tanh_transform():
    torch.manual_seed(1)
    mean, log_std = torch.randn(64, 2), torch.randn(64, 2) * 0.3
    u = mean + log_std.exp() * torch.randn(64, 2)
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()), [torch.distributions.TanhTransform()]
    )
    # Away from saturation (|u| < 3, where the correction's epsilon is below 1e-4 per dimension).
    keep = u.abs().max(dim=1).values < 3.0
    assert keep.sum() > 50
    expected = dist.log_prob(torch.tanh(u)).sum(-1)
    torch.testing.assert_close(squashed_log_prob(u, mean, log_std)[keep], expected[keep], rtol=1e-3, atol=1e-3)


def test_polyak_update():
    target = [torch.tensor([1.0, 2.0]), torch.tensor([[4.0]])]
    online = [torch.tensor([3.0, -2.0]), torch.tensor([[0.0]])]
    polyak_update(target, online, 0.25)
    # 0.25 * online + 0.75 * target
    torch.testing.assert_close(target[0], torch.tensor([1.5, 1.0]))
    torch.testing.assert_close(target[1], torch.tensor([[3.0]]))
    assert online[0].tolist() == [3.0, -2.0]  # the online weights are untouched
    polyak_update(target, online, 1.0)
    torch.testing.assert_close(target[0], online[0])


@pytest.mark.parametrize(("entropy", "alpha_rises"), [(-3.0, True), (1.0, False)])
def test_alpha_loss_gradient_sign(entropy, alpha_rises):
    """Target entropy -1: a policy less random than that (entropy -3) must raise alpha, a more random one lower it."""
    log_alpha = torch.zeros((), requires_grad=True)
    log_probs = torch.full((8,), -entropy)
    alpha_loss(log_alpha, log_probs, target_entropy=-1.0).backward()
    # d loss / d log_alpha = -(mean log-prob + target) = entropy - target
    assert log_alpha.grad.item() == pytest.approx(entropy + 1.0)
    optimizer = torch.optim.SGD([log_alpha], lr=0.1)
    optimizer.step()
    assert (log_alpha.item() > 0) == alpha_rises


def _rows(start: int, n: int) -> dict[str, torch.Tensor]:
    """Transitions whose every field encodes their index, so any mix-up shows."""
    k = torch.arange(start, start + n, dtype=torch.float32)
    return {
        "obs": k[:, None].expand(n, 3).clone(),
        "actions": -k[:, None].expand(n, 2).clone(),
        "rewards": k * 10,
        "next_obs": (k + 0.5)[:, None].expand(n, 3).clone(),
        "terminated": (k % 2),
    }


def _consistent(rows: dict[str, torch.Tensor]) -> torch.Tensor:
    k = rows["obs"][:, 0]
    return (
        (rows["obs"] == k[:, None]).all(1)
        & (rows["actions"] == -k[:, None]).all(1)
        & (rows["rewards"] == k * 10)
        & (rows["next_obs"] == (k + 0.5)[:, None]).all(1)
        & (rows["terminated"] == k % 2)
    )


def test_replay_wraps_around_and_samples_only_filled_rows():
    replay = Replay(10, (3,), 2)
    replay.add(_rows(0, 4))
    assert (replay.pos, replay.size) == (4, 4)
    sample = replay.sample(500, torch.Generator().manual_seed(0))
    assert set(sample["obs"][:, 0].tolist()) == {0.0, 1.0, 2.0, 3.0}  # never an unwritten row
    assert bool(_consistent(sample).all())
    replay.add(_rows(4, 9))  # 13 rows into 10: rows 10..12 overwrite 0..2
    assert (replay.pos, replay.size) == (3, 10)
    assert replay.data["obs"][:, 0].tolist() == [10, 11, 12, 3, 4, 5, 6, 7, 8, 9]
    sample = replay.sample(2000, torch.Generator().manual_seed(1))
    assert set(sample["obs"][:, 0].tolist()) == set(range(3, 13))
    assert bool(_consistent(sample).all())
    replay.add(_rows(100, 25))  # more than the capacity at once: the newest 10 remain
    assert sorted(replay.data["obs"][:, 0].tolist()) == list(range(115, 125))


def test_replay_state_round_trip_keeps_order_and_fits_a_smaller_ring():
    replay = Replay(10, (3,), 2)
    replay.add(_rows(0, 13))
    state = replay.state_dict()
    assert state["rows"]["obs"][:, 0].tolist() == list(range(3, 13))  # oldest first
    again = Replay(10, (3,), 2)
    again.load_state_dict(state)
    for key in again.data:
        torch.testing.assert_close(again.data[key][again.pos - 1], replay.data[key][replay.pos - 1])
    small = Replay(4, (3,), 2)
    small.load_state_dict(state)
    assert sorted(small.data["obs"][:, 0].tolist()) == [9, 10, 11, 12]
    partial = Replay(10, (3,), 2)
    partial.add(_rows(0, 2))
    assert partial.state_dict()["rows"]["obs"].untyped_storage().nbytes() == 2 * 3 * 4  # no hidden storage


def test_transitions_take_final_obs_at_episode_ends_and_bootstrap_truncations():
    N, T = 2, 3
    obs = torch.arange(N * (T + 1), dtype=torch.float32).reshape(N, T + 1, 1)
    final = torch.full((N, T, 1), -42.42)
    final[0, 1] = 100.0  # env 0 ended at t=1 (terminated), env 1 at t=2 (time limit)
    final[1, 2] = 200.0
    dones = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    truncated = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    batch = {
        "obs": obs,
        "actions": torch.zeros(N, T, 1),
        "rewards": torch.arange(N * T, dtype=torch.float32).reshape(N, T),
        "dones": dones,
        "truncated": truncated,
        "final_obs": final,
        "step_failed": torch.zeros(N, T),
    }
    rows = transitions(batch)
    assert rows["obs"][:, 0].tolist() == [0, 1, 2, 4, 5, 6]
    assert rows["next_obs"][:, 0].tolist() == [1, 100, 3, 5, 6, 200]
    assert rows["terminated"].tolist() == [0, 1, 0, 0, 0, 0]  # the time limit is not a termination
    assert rows["rewards"].tolist() == [0, 1, 2, 3, 4, 5]


def test_numpy_actor_matches_torch():
    cfg = sac_cfg()
    model = make_model(cfg, OBS, BOX)
    assert type(model) is SquashedGaussianActor
    fast = make_numpy_policy(model, "cpu", seed=0)
    assert type(fast) is NumpySquashedGaussian
    assert make_numpy_policy(model, "cuda", seed=0) is None  # GPU policy workers keep torch
    obs = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    # Before the first update: uniform over the box, in both paths.
    warm = fast.act(obs).actions
    assert warm.shape == (6, 2) and np.all(warm >= BOX.low) and np.all(warm <= BOX.high)
    model.updates.fill_(1)
    fast.load(model)
    expected = model.act(torch.from_numpy(obs), torch.zeros(6, 1), deterministic=True).actions.numpy()
    np.testing.assert_allclose(fast.act(obs, deterministic=True).actions, expected, rtol=1e-5, atol=1e-5)
    # Sampled: every action inside the box, and its log-prob the torch formula's for the same pre-squash draw.
    out = fast.act(obs)
    assert np.all(out.actions >= BOX.low) and np.all(out.actions <= BOX.high)
    mean, log_std = model(torch.from_numpy(obs))
    a = model.to_unit(torch.from_numpy(out.actions)).double().clamp(-1 + 1e-6, 1 - 1e-6)
    u = torch.atanh(a)
    reference = squashed_log_prob(u, mean.double(), log_std.double()).float()
    np.testing.assert_allclose(out.log_probs, reference.detach().numpy(), rtol=1e-3, atol=1e-3)


def test_a_fresh_actor_starts_with_a_standard_deviation_near_one():
    # As the SAC authors' code and Stable-Baselines3 start: an unsquashed head near 0 (std 1).
    torch.manual_seed(0)
    model = make_model(sac_cfg(actor_mlp_layers=[256, 256]), OBS, BOX)
    _, log_std = model(torch.randn(512, 3))
    assert log_std.mean().abs() < 0.2 and log_std.abs().max() < 1.0


def test_the_log_std_is_clamped_in_both_actors():
    """Far outside [LOG_STD_MIN, LOG_STD_MAX] the log-std sits at the bound, in torch and in the numpy actor."""
    model = make_model(sac_cfg(), OBS, BOX)
    with torch.no_grad():
        model.log_std_head.weight.zero_()
        model.log_std_head.bias.copy_(torch.tensor([50.0, -50.0]))
    model.updates.fill_(1)
    obs = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    mean, log_std = model(torch.from_numpy(obs))
    assert torch.equal(log_std, torch.tensor([[LOG_STD_MAX, LOG_STD_MIN]]).expand(4, 2))
    out = make_numpy_policy(model, "cpu", seed=0).act(obs)
    # Dimension 1's std is e^-20: its action is the mean's squash to float precision.
    np.testing.assert_allclose(
        model.to_unit(torch.from_numpy(out.actions))[:, 1], torch.tanh(mean[:, 1]).detach(), atol=1e-5
    )
    assert np.all(np.isfinite(out.log_probs))
    np.testing.assert_array_less(-out.log_probs, 0.0)  # dimension 1's density is huge: log-prob >> 0


def test_discrete_actions_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^--algo=sac: needs a 1-D continuous \(Box\) action space"):
        make_model(sac_cfg(), OBS, gym.spaces.Discrete(3))


def _batch(n: int = 2, T: int = 64) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "obs": torch.randn(n, T + 1, 3, generator=g),
        "actions": torch.rand(n, T, 2, generator=g) * torch.tensor([4.0, 1.0]) - torch.tensor([2.0, 0.0]),
        "rewards": torch.randn(n, T, generator=g),
        "dones": torch.zeros(n, T),
        "truncated": torch.zeros(n, T),
        "final_obs": torch.full((n, T, 3), -42.42),
        "step_failed": torch.zeros(n, T),
    }


def test_update_holds_the_replay_ratio_after_learning_starts():
    cfg = sac_cfg(learning_starts=100, updates_per_env_step=0.5, batch_size=32, publish_every_updates=4)
    model = make_model(cfg, OBS, BOX)
    sac = SAC(cfg, derive(cfg), model, "cpu", NonFiniteGuard(0))
    published = []
    sac.publish = lambda: published.append(sac.updates)
    stats = sac.update(_batch(1), 64)  # 64 steps: still warming up
    assert sac.updates == 0 and int(model.updates) == 0 and "q_loss" not in stats
    stats = sac.update(_batch(2), 192)  # 192 steps in all: (192 - 100) * 0.5 = 46 updates owed
    assert sac.updates == 46 and int(model.updates) == 46
    assert published == [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44]
    assert stats["updates_per_env_step"] == pytest.approx(0.5)
    assert {"q1", "q_loss", "actor_loss", "alpha", "entropy"} <= set(stats)
    assert sac.replay.size == 192


def test_updates_lower_the_critic_loss_and_state_round_trips():
    torch.manual_seed(0)
    # gamma 0: the critics regress on the rewards; a few dozen updates per call keep the test short.
    cfg = sac_cfg(learning_starts=0, batch_size=128, gamma=0.0, updates_per_env_step=0.125, critic_lr=3e-3)
    model = make_model(cfg, OBS, BOX)
    sac = SAC(cfg, derive(cfg), model, "cpu", NonFiniteGuard(0))
    sac.update(_batch(4), 256)
    fixed = sac.replay.sample(128, torch.Generator().manual_seed(3))

    def critic_loss() -> float:
        with torch.no_grad():
            q = sac.critic(fixed["obs"], fixed["actions"])
            return float((q - fixed["rewards"]).square().mean())

    before = critic_loss()
    for _ in range(3):
        sac.update(_batch(4), 256)
    assert critic_loss() < before
    state = {"model": model.state_dict(), **sac.state_dict()}
    clone_model = make_model(cfg, OBS, BOX)
    clone = SAC(cfg, derive(cfg), clone_model, "cpu", NonFiniteGuard(0))
    clone_model.load_state_dict(state["model"])
    clone.load_state_dict(state)
    assert clone.updates == sac.updates and clone.env_steps == sac.env_steps and int(clone_model.updates) > 0
    assert clone.log_alpha.item() == sac.log_alpha.item()
    for a, b in zip(clone.critic_target.parameters(), sac.critic_target.parameters(), strict=True):
        assert torch.equal(a, b)
    assert (
        clone.critic_optimizer.state_dict()["state"][0]["step"] == sac.critic_optimizer.state_dict()["state"][0]["step"]
    )


def test_verify_names_each_bad_flag():
    errors = verify(sac_cfg(tau=0.0, target_entropy="high", replay_size=0, with_pbt=True, num_policies=2))
    assert "--tau=0.0: must be in (0, 1]" in errors
    assert "--target_entropy=high: must be auto or a number (e.g. -6)" in errors
    assert "--replay_size=0: must be > 0" in errors
    assert any(e.startswith("--with_pbt: not supported with --algo=sac") for e in errors)
    assert all("\n" not in e for e in errors)
    assert verify(sac_cfg()) == []


def test_sac_defaults_sit_above_presets_and_below_flags():
    cfg = merge_cfg({"algo": "sac", "env": "HalfCheetah-v5"}, None)
    assert (cfg.batch_size, cfg.max_grad_norm, cfg.async_rl) == (256, 0.0, True)  # not the PPO preset's
    assert merge_cfg({"algo": "sac", "batch_size": 512}, None).batch_size == 512
    assert merge_cfg({"env": "HalfCheetah-v5"}, None).batch_size == 1024  # PPO keeps its preset
    assert math.isclose(merge_cfg({"algo": "sac", "train_for_env_steps": 6000}, None).train_for_env_steps, 6000)


class SkipsTheActorStep(NonFiniteGuard):
    """A guard that finds every step of the actor's optimizer non-finite: what the real guard does when the
    actor's loss or gradient is NaN while the critics' are fine."""

    actor_optimizer = None

    def step(self, loss, params, optimizer, max_norm):
        if optimizer is self.actor_optimizer:
            optimizer.zero_grad(set_to_none=True)
            self.skipped += 1
            return float("nan")
        return super().step(loss, params, optimizer, max_norm)


def test_a_skipped_actor_step_still_counts_the_critic_step_and_moves_its_targets():
    """Regression: when the actor's step was non-finite, the critic step that had happened was neither counted nor
    followed by the Polyak update of its targets."""
    cfg = sac_cfg(learning_starts=0, updates_per_env_step=0.25, batch_size=32)
    sac = SAC(cfg, derive(cfg), make_model(cfg, OBS, BOX), "cpu", SkipsTheActorStep(0))
    sac.guard.actor_optimizer = sac.actor_optimizer
    actor_before = [p.detach().clone() for p in sac.actor.parameters()]
    target_before = [p.detach().clone() for p in sac.critic_target.parameters()]
    stats = sac.update(_batch(2), 128)  # 32 updates owed
    assert sac.updates == 32 and sac.guard.skipped == 32
    assert all(torch.equal(a, b) for a, b in zip(actor_before, sac.actor.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(target_before, sac.critic_target.parameters(), strict=True))
    assert "q_loss" in stats and "actor_loss" not in stats and math.isfinite(stats["q_loss"])


def test_a_step_whose_env_raised_is_not_a_transition():
    """Regression: the env runner cuts an episode whose env raised; the replay stored (s, a, 0, s, not terminal) for
    that step, a transition that never happened. The runner marks it (step_failed; final_obs NaN) and it is left
    out."""
    batch = {
        "obs": torch.arange(8, dtype=torch.float32).reshape(2, 4, 1),
        "actions": torch.zeros(2, 3, 1),
        "rewards": torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]]),
        "dones": torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
        "truncated": torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
        "final_obs": torch.zeros(2, 3, 1),
        "step_failed": torch.zeros(2, 3),
    }
    batch["final_obs"][0, 1] = float("nan")  # env 0's step t=1 raised
    batch["step_failed"][0, 1] = 1.0
    rows = transitions(batch)
    assert rows["obs"][:, 0].tolist() == [0, 2, 4, 5, 6] and rows["next_obs"][:, 0].tolist() == [1, 3, 5, 6, 7]
    assert len(rows["rewards"]) == len(rows["terminated"]) == len(rows["actions"]) == 5
