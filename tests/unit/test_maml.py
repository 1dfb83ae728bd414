"""MAML-TRPO's math (appo/maml/algorithm.py, appo/algorithms/common/trpo.py): the second-order
meta-gradient against finite
differences in float64, the TRPO step's accept/reject contract, the cheap KL Hessian-vector product against the
direct one, the baseline and GAE against plain loops, the actors' numpy policy against the torch one, and episodes
sampled on the engine's actor workers (in-process)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from appo.algorithms.common.returns import return_to_go
from appo.algorithms.common.trpo import conjugate_gradient, line_search
from appo.maml.algorithm import (
    Episodes,
    MamlPolicy,
    MamlTrpo,
    adapt,
    advantages,
    flatten,
    gae,
    params_of,
    unflatten,
)
from appo.models.categorical_mlp import MamlCategoricalPolicy
from appo.models.numpy_twins import NumpyCategoricalMlp, NumpyGaussianMlp

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_cfg(**overrides: object) -> SimpleNamespace:
    cfg = dict(gamma=0.99, gae_lambda=1.0, fast_lr=0.5, num_inner_steps=1, first_order=False, max_kl=1e-2)
    cfg |= dict(cg_iters=10, cg_damping=1e-5, ls_max_steps=15, ls_backtrack_ratio=0.8)
    return SimpleNamespace(**(cfg | overrides))


NUM_ACTIONS = 4  # the categorical learner's


def random_episodes(
    K: int, E: int, T: int, obs_dim: int, act_dim: int, seed: int, dtype=torch.float64, discrete: bool = False
) -> Episodes:
    """Random episodes; `discrete`: action indices 0..NUM_ACTIONS-1 (as floats [..., 1], as the buffers hold them)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 2, T + 1, (K, E), generator=g)
    mask = (torch.arange(T) < lengths.unsqueeze(-1)).to(dtype)
    obs = torch.randn(K, E, T, obs_dim, generator=g, dtype=dtype) * mask.unsqueeze(-1)
    if discrete:
        actions = torch.randint(0, NUM_ACTIONS, (K, E, T, 1), generator=g).to(dtype) * mask.unsqueeze(-1)
    else:
        actions = torch.randn(K, E, T, act_dim, generator=g, dtype=dtype) * mask.unsqueeze(-1)
    rewards = torch.randn(K, E, T, generator=g, dtype=dtype) * mask
    return Episodes(obs, actions, rewards, mask)


def tiny_learner(seed: int = 0, discrete: bool = False, **cfg: object) -> MamlTrpo:
    torch.manual_seed(seed)
    model = MamlCategoricalPolicy(3, NUM_ACTIONS, [5], "tanh") if discrete else MamlPolicy(3, 2, [5], "tanh", -0.3)
    return MamlTrpo(make_cfg(**cfg), model.double())


@pytest.mark.parametrize(("num_inner_steps", "discrete"), [(1, False), (2, False), (1, True)])
def test_second_order_meta_gradient_equals_finite_differences(num_inner_steps: int, discrete: bool) -> None:
    learner = tiny_learner(discrete=discrete, num_inner_steps=num_inner_steps, fast_lr=0.1)
    train, valid = (random_episodes(2, 3, 6, 3, 2, seed, discrete=discrete) for seed in (1, 2))
    batches = learner.task_batches(train, valid)
    like = params_of(learner.model)
    theta = flatten(like).detach().clone().requires_grad_()

    def surrogate(flat: torch.Tensor) -> torch.Tensor:
        return learner.outer_loss(unflatten(flat, like), batches, first_order=False)[0]

    assert torch.autograd.gradcheck(surrogate, (theta,), eps=1e-6, atol=1e-7, rtol=1e-5)
    # The same through the learner's own path (the model's parameters), and it is not the first-order gradient.
    _, grad = learner.meta_gradient(batches)
    expected = torch.autograd.grad(surrogate(theta), theta)[0]
    assert torch.allclose(grad, expected, atol=1e-12)
    first = torch.autograd.grad(learner.outer_loss(unflatten(theta, like), batches, True)[0], theta)[0]
    assert (first - expected).abs().max() > 1e-4 * expected.abs().max()


@pytest.mark.parametrize(
    ("first_order", "num_inner_steps", "discrete"),
    [(False, 1, False), (True, 1, False), (False, 2, False), (False, 1, True)],
)
def test_kl_hessian_vector_product_equals_the_direct_one(
    first_order: bool, num_inner_steps: int, discrete: bool
) -> None:
    """The KL Hessian-vector product the TRPO step uses equals plain autograd's (at two inner steps the learner's
    own product is used: the helpers' assumes one step); Gaussian and categorical policies."""
    learner = tiny_learner(discrete=discrete, first_order=first_order, num_inner_steps=num_inner_steps, fast_lr=0.1)
    # Move the parameters away from those the old policy was computed with? No: TRPO's product is taken at them.
    train, valid = (random_episodes(3, 4, 7, 3, 2, seed, discrete=discrete) for seed in (3, 4))
    batches = learner.task_batches(train, valid)
    v = torch.randn(flatten(params_of(learner.model)).numel(), generator=torch.Generator().manual_seed(5)).double()
    fast, direct = learner.kl_hvp(batches)(v), learner.kl_hvp_autograd(batches)(v)
    assert torch.allclose(fast, direct, rtol=1e-9, atol=1e-12)
    assert float(torch.dot(v, fast)) > 0  # the KL's Hessian at its minimum is positive semi-definite


@pytest.mark.parametrize("discrete", [False, True])
def test_trpo_step_accepted_improves_within_the_bound(discrete: bool) -> None:
    learner = tiny_learner(discrete=discrete)
    train, valid = (random_episodes(2, 4, 8, 3, 2, seed, discrete=discrete) for seed in (6, 7))
    batches = learner.task_batches(train, valid)  # pi_old: the adapted policies of the parameters before the step
    before = flatten(params_of(learner.model)).detach().clone()
    stats = learner.step(train, valid)
    after = flatten(params_of(learner.model)).detach()
    assert stats.is_accepted
    assert stats.surrogate_after < stats.surrogate_before
    assert 0 < stats.kl <= learner.cfg.max_kl
    assert not torch.equal(before, after)
    # What the step reports is what the new parameters give.
    loss, kl = learner.outer_loss(unflatten(after.clone().requires_grad_(), params_of(learner.model)), batches, True)
    assert float(loss.detach()) == pytest.approx(stats.surrogate_after, abs=1e-12)
    assert float(kl.detach()) == pytest.approx(stats.kl, abs=1e-12)


@pytest.mark.parametrize("case", ["no_improvement", "kl_too_large"])
def test_trpo_step_rejected_leaves_every_parameter_bit_identical(case: str) -> None:
    train, valid = random_episodes(2, 4, 8, 3, 2, 6), random_episodes(2, 4, 8, 3, 2, 7)
    if case == "no_improvement":
        # No reward anywhere: every advantage is 0, the surrogate is flat and no step improves it.
        learner = tiny_learner()
        valid = valid._replace(rewards=torch.zeros_like(valid.rewards))
        train = train._replace(rewards=torch.zeros_like(train.rewards))
    else:
        # A bound far below what any step of the search reaches (the full step is scaled to 1e-2 nats first).
        learner = tiny_learner(ls_max_steps=3)
        learner.cfg.max_kl = 1e-2
        original = learner.outer_loss

        def stricter(params: dict, batches: list, first_order: bool) -> tuple[torch.Tensor, torch.Tensor]:
            loss, kl = original(params, batches, first_order)
            return loss, kl + 1.0  # every candidate's KL is over the bound

        learner.outer_loss = stricter  # type: ignore[method-assign]
    state = {k: v.clone() for k, v in learner.model.state_dict().items()}
    stats = learner.step(train, valid)
    assert not stats.is_accepted and stats.ls_steps == learner.cfg.ls_max_steps
    for name, value in learner.model.state_dict().items():
        assert torch.equal(value, state[name]), name


def test_line_search_returns_the_start_itself_when_nothing_is_accepted() -> None:
    start = torch.tensor([1.0, 2.0])
    result = line_search(lambda p: (float(p.sum()), 1.0), start, torch.tensor([1.0, 1.0]), 10.0, max_kl=0.5)
    assert result.params is start and not result.is_accepted and result.steps == 15
    # With the KL within the bound the first improving candidate (the full step) is taken.
    result = line_search(lambda p: (float(p.sum()), 0.1), start, torch.tensor([1.0, 1.0]), 10.0, max_kl=0.5)
    assert result.is_accepted and result.steps == 1 and torch.equal(result.params, torch.tensor([0.0, 1.0]))
    # Backtracking: only candidates within 0.3 of the start are allowed; 0.8^k <= 0.3 first at k = 6 (0.262).
    result = line_search(lambda p: (-1.0, float((p - start).abs().max())), start, torch.ones(2), 0.0, 0.3, 15, 0.8)
    assert result.is_accepted and result.steps == 7


def test_conjugate_gradient_solves_a_positive_definite_system() -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 6, generator=g, dtype=torch.float64)
    H = a @ a.T + 0.5 * torch.eye(6, dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64)
    x = conjugate_gradient(lambda v: H @ v, b, iters=6)
    assert torch.allclose(H @ x, b, atol=1e-8)


def test_gae_and_returns_against_plain_loops() -> None:
    ep = random_episodes(1, 3, 9, 2, 1, 11).task(0)
    gamma, lam = 0.9, 0.7
    values = torch.randn(3, 9, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    adv, ret = gae(ep.rewards, values, ep.mask, gamma, lam), return_to_go(ep.rewards, gamma, ep.mask)
    for e in range(3):
        n = int(ep.mask[e].sum())
        r, v = ep.rewards[e, :n].tolist(), values[e, :n].tolist() + [0.0]  # 0 after the episode's last step
        running_adv = running_ret = 0.0
        for t in reversed(range(n)):
            running_adv = r[t] + gamma * v[t + 1] - v[t] + gamma * lam * running_adv
            running_ret = r[t] + gamma * running_ret
            assert adv[e, t] == pytest.approx(running_adv, abs=1e-12)
            assert ret[e, t] == pytest.approx(running_ret, abs=1e-12)
        assert torch.all(adv[e, n:] == 0) and torch.all(ret[e, n:] == 0)


def test_advantages_are_normalised_over_the_steps_taken() -> None:
    ep = random_episodes(1, 4, 10, 2, 1, 12).task(0)
    adv = advantages(ep, 0.99, 1.0)
    taken = adv[ep.mask > 0]
    assert float(taken.mean()) == pytest.approx(0.0, abs=1e-9)
    assert float(taken.std(unbiased=False)) == pytest.approx(1.0, abs=1e-6)
    assert torch.all(adv[ep.mask == 0] == 0)


def test_adaptation_is_one_policy_gradient_step() -> None:
    learner = tiny_learner()
    ep = random_episodes(1, 3, 6, 3, 2, 13).task(0)
    adv = advantages(ep, 0.99, 1.0)
    params = {k: v.detach().requires_grad_() for k, v in params_of(learner.model).items()}
    adapted = adapt(learner.model, params, ep, adv, 0.5, 1)
    mean, log_std = torch.func.functional_call(learner.model, params, (ep.obs,)).chunk(2, dim=-1)
    loss = -(torch.distributions.Normal(mean, log_std.exp()).log_prob(ep.actions).sum(-1) * adv * ep.mask).sum()
    grads = torch.autograd.grad(loss / ep.mask.sum(), list(params.values()))
    for (name, p), g in zip(params.items(), grads, strict=True):
        assert torch.allclose(adapted[name], p - 0.5 * g, atol=1e-12), name


def test_numpy_policy_equals_the_torch_policy() -> None:
    torch.manual_seed(0)
    for nonlinearity in ("tanh", "relu"):
        model = MamlPolicy(4, 3, [7, 5], nonlinearity, -0.5)
        policy = NumpyGaussianMlp(model, seed=0)
        obs = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
        noise = np.random.default_rng(1).standard_normal((6, 3)).astype(np.float32)
        mean, log_std = model(torch.from_numpy(obs)).chunk(2, dim=-1)
        np.testing.assert_allclose(policy.mean(obs), mean.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(policy.std, log_std[0].exp().detach().numpy(), rtol=1e-6)
        actions, log_probs, _, _ = policy.act(obs, noise=noise)
        expected = mean + log_std.exp() * torch.from_numpy(noise)
        np.testing.assert_allclose(actions, expected.detach().numpy(), rtol=1e-5, atol=1e-6)
        normal = torch.distributions.Normal(mean, log_std.exp())
        reference = normal.log_prob(torch.from_numpy(actions)).sum(-1).detach().numpy()
        np.testing.assert_allclose(log_probs, reference, rtol=1e-4, atol=1e-4)
        # A row's actions do not depend on the other rows of its batch (the episodes are the same wherever run).
        # Only on the batch's shape: BLAS may take another kernel for another row count, so the shape is kept.
        others = obs.copy()
        others[1:] = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
        np.testing.assert_array_equal(policy.act(others, noise=noise)[0][0], actions[0])


def test_numpy_categorical_policy_equals_the_torch_policy() -> None:
    """The actors' categorical twin: its log-probs are the torch policy's, a given exponential noise gives
    Gumbel-max's action (the same episodes wherever they run), and its draws follow the policy's probabilities."""
    torch.manual_seed(0)
    model = MamlCategoricalPolicy(4, 5, [7, 5], "relu")
    policy = NumpyCategoricalMlp(model, seed=0)
    obs = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    noise = np.random.default_rng(1).standard_exponential((6, 5)).astype(np.float32)
    logits = model(torch.from_numpy(obs)).detach()
    actions, log_probs, _, _ = policy.act(obs, noise=noise)
    expected = (torch.log_softmax(logits, -1) - torch.from_numpy(noise).log()).argmax(-1)
    np.testing.assert_array_equal(actions[:, 0], expected.numpy())
    reference = MamlCategoricalPolicy.log_prob(logits, torch.from_numpy(actions).double()).numpy()
    np.testing.assert_allclose(log_probs, reference, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(policy.act(obs, deterministic=True)[0][:, 0], logits.argmax(-1).numpy())
    one = np.repeat(obs[:1], 20000, axis=0)
    counts = np.bincount(policy.act(one)[0][:, 0], minlength=5) / len(one)
    np.testing.assert_allclose(counts, torch.softmax(logits[0], -1).numpy(), atol=0.015)
    reference_kl = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=logits[:3]), torch.distributions.Categorical(logits=logits[3:])
    )
    assert torch.allclose(MamlCategoricalPolicy.kl(logits[:3], logits[3:]), reference_kl, atol=1e-6)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--fast_batch_size=0", "--fast_batch_size=0: must be > 0"),
        ("--ls_backtrack_ratio=1.5", "--ls_backtrack_ratio=1.5: must be in (0, 1)"),
        ("--maml_nonlinearity=sigmoid", "--maml_nonlinearity=sigmoid: must be one of tanh, relu"),
        ("--use_rnn=True", "--use_rnn=True: --algo=maml_trpo has a feed-forward policy only"),
        ("--actor_inference=False", "--actor_inference=False: --algo=maml_trpo acts in the actor workers"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(flag: str, message: str, tmp_path: object) -> None:
    from appo.config.cfg import parse_cfg
    from appo.config.verify import verify

    errors = verify(parse_cfg(["--algo=maml_trpo", "--env=navigation2d", f"--train_dir={tmp_path}", flag]))
    assert len(errors) == 1 and errors[0].startswith(message), errors


def test_ray_backend_is_accepted_with_its_own_checks(tmp_path: object) -> None:
    # --backend=ray runs the task rollouts on Ray actors (appo/maml/ray_actors.py); the Ray flags' checks apply.
    from appo.config.cfg import parse_cfg
    from appo.config.verify import verify

    base = ["--algo=maml_trpo", "--env=navigation2d", f"--train_dir={tmp_path}", "--backend=ray"]
    assert verify(parse_cfg(base)) == []
    errors = verify(parse_cfg([*base, "--serial_mode=True"]))
    assert len(errors) == 1 and errors[0].startswith("--backend=ray: --serial_mode"), errors


def test_defaults_follow_the_references() -> None:
    from appo.config.algorithms.maml import inner_lr, meta_batch_size
    from appo.config.cfg import parse_cfg

    nav = parse_cfg(["--algo=maml_trpo", "--env=navigation2d"])
    cheetah = parse_cfg(["--algo=maml_trpo", "--env=half_cheetah_dir"])
    assert (meta_batch_size(nav), meta_batch_size(cheetah)) == (20, 40)
    assert (nav.fast_batch_size, inner_lr(nav), nav.gamma, nav.gae_lambda, nav.max_kl) == (20, 0.1, 0.99, 1.0, 0.01)
    assert (nav.task_schedule, nav.use_rnn) == ("none", False)  # the meta-RL preset's schedule and memory are off


def test_a_baseline_that_cannot_be_fitted_is_zero_and_said_in_the_log():
    """Regression: after five failed solves the linear baseline returned zero weights silently."""
    import logging

    from appo.maml.algorithm import fit_linear_baseline
    from appo.utils.logging import log

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    log.addHandler(handler)
    try:
        w = fit_linear_baseline(torch.full((2, 3, 4), float("nan")), torch.ones(2, 3))
    finally:
        log.removeHandler(handler)
    assert torch.equal(w, torch.zeros(4))
    assert any("linear baseline could not be fitted" in r.getMessage() for r in records)


def test_means_weigh_each_step_not_each_episode_as_documented() -> None:
    """MAML's means are over the steps taken (each step the same), where pytorch-maml-rl weighs each episode the
    same; on ragged episodes they differ. Kept deliberately: the reference's weighting made seed 0 of
    benchmarks/maml_navigation.py unstable (docs/algorithms.md)."""
    from appo.maml.algorithm import masked_mean

    torch.manual_seed(3)
    mask = torch.zeros(5, 9)
    lengths = [9, 2, 5, 1, 7]
    for e, length in enumerate(lengths):
        mask[e, :length] = 1.0
    x = torch.randn(5, 9)
    per_step = sum(float(x[e, :length].sum()) for e, length in enumerate(lengths)) / sum(lengths)
    per_episode = sum(float(x[e, :length].mean()) for e, length in enumerate(lengths)) / len(lengths)
    assert float(masked_mean(x, mask)) == pytest.approx(per_step)
    assert abs(per_step - per_episode) > 0.05


def test_more_inner_steps_as_typed_spread_the_one_step_size() -> None:
    """--num_inner_steps=N without --fast_lr takes N steps of 0.1 / N (two steps of 0.1 drifted on navigation2d);
    a typed --fast_lr is taken as it is."""
    from appo.config.algorithms.maml import inner_lr
    from appo.config.cfg import parse_cfg

    base = ["--algo=maml_trpo", "--env=navigation2d"]
    assert inner_lr(parse_cfg(base)) == 0.1
    assert inner_lr(parse_cfg([*base, "--num_inner_steps=2"])) == 0.05
    assert inner_lr(parse_cfg([*base, "--num_inner_steps=4", "--fast_lr=0.3"])) == 0.3
    train = random_episodes(2, 3, 6, 3, 2, seed=5)
    as_typed = tiny_learner(num_inner_steps=2, fast_lr=0.0).adapted(train.task(0))
    halved = tiny_learner(num_inner_steps=2, fast_lr=0.05).adapted(train.task(0))
    doubled = tiny_learner(num_inner_steps=2, fast_lr=0.1).adapted(train.task(0))
    assert all(torch.equal(as_typed[k], halved[k]) for k in as_typed)
    assert not all(torch.equal(as_typed[k], doubled[k]) for k in as_typed)
