"""MAML-TRPO (Finn et al. 2017, sec. 3.2 and 5.3, with TRPO as the meta-optimiser): the math, as functions of
explicit parameter dicts (torch.func.functional_call), and `MamlTrpo`, the learner's meta-step.

Data: a task's episodes are fixed-shape tensors `Episodes` ([E, T, ...], `mask` 1 on the steps taken), sampled by
the actor workers (appo/maml/actors.py); a meta-batch stacks K tasks' episodes. One meta-iteration, for
every task k:

    A_k       = normalised GAE on the train episodes, linear feature baseline fitted on them   (no gradient)
    theta'_k  = theta - fast_lr * grad_theta L_inner(theta; train_k)       (num_inner_steps times: `inner_step`)
    L_outer   = mean_k -mean_t[ pi_theta'_k(a|s) / pi_old_k(a|s) * A'_k ]  on the validation episodes
    KL        = mean_k mean_t KL(pi_old_k || pi_theta'_k)

and TRPO (appo/algorithms/common/trpo.py) steps theta on L_outer within KL <= max_kl. Second order by default:
theta'_k is
differentiated through the inner gradient (create_graph); `first_order` treats the inner gradient as a constant.
pi_old_k is the adapted policy that acted in the validation episodes, so at the current theta the ratio is 1.
The reference implementation is pytorch-maml-rl (tristandeleu), whose defaults these follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call

from appo.algorithms.base import Algorithm
from appo.algorithms.common.returns import return_to_go
from appo.algorithms.common.trpo import line_search, step_direction
from appo.config.algorithms.maml import inner_lr
from appo.models.categorical_mlp import MamlCategoricalPolicy
from appo.models.gaussian_mlp import MamlPolicy, make_policy  # noqa: F401 - the algorithm's model
from appo.utils.logging import log

Params = dict[str, Tensor]


def params_of(model: nn.Module) -> Params:
    return {name: p for name, p in model.named_parameters()}


def flatten(params: Params) -> Tensor:
    return torch.cat([p.reshape(-1) for p in params.values()])


def unflatten(flat: Tensor, like: Params) -> Params:
    out, i = {}, 0
    for name, p in like.items():
        out[name] = flat[i : i + p.numel()].view_as(p)
        i += p.numel()
    return out


class Episodes(NamedTuple):
    """Episodes of one task ([E, T, ...]) or of K tasks ([K, E, T, ...]); steps past an episode's end are padding
    (mask 0, rewards 0)."""

    obs: Tensor  # [..., T, obs_dim]
    actions: Tensor  # [..., T, act_dim], as sampled (before any clipping to the action box)
    rewards: Tensor  # [..., T]
    mask: Tensor  # [..., T] 1.0 on steps taken

    def task(self, k: int) -> Episodes:
        return Episodes(*(x[k] for x in self))

    def to(self, dtype: torch.dtype) -> Episodes:
        return Episodes(*(x.to(dtype) for x in self))


# --- the policy as a function of its parameters (Gaussian or categorical: the model reads its own output) ----
def distribution(model: nn.Module, params: Params, obs: Tensor) -> Tensor:
    """The parameters of pi_params(.|obs) [..., D] (a Gaussian's means and log-stds, a categorical's logits)."""
    return functional_call(model, params, (obs,))


def mean_in_order(vectors: list[Tensor] | Tensor) -> Tensor:
    """The mean of per-task vectors, summed in task order: the same bits wherever each vector was computed."""
    total = torch.zeros_like(vectors[0])
    for v in vectors:
        total += v
    return total / len(vectors)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


# --- advantages: linear feature baseline + GAE (no gradient) ----------------------------------------------
def baseline_features(obs: Tensor, mask: Tensor) -> Tensor:
    """rllab's linear-baseline features [E, T, 2 obs_dim + 4]: obs, obs^2, t/100, (t/100)^2, (t/100)^3, 1; zero
    on padding."""
    T = obs.shape[-2]
    o = obs.clamp(-10, 10)
    t = (torch.arange(T, dtype=obs.dtype) / 100.0).expand(obs.shape[:-1]).unsqueeze(-1)
    feats = torch.cat([o, o * o, t, t * t, t * t * t, torch.ones_like(t)], dim=-1)
    return feats * mask.unsqueeze(-1)


def fit_linear_baseline(features: Tensor, returns: Tensor, reg: float = 1e-5) -> Tensor:
    """Ridge-regression weights [F] of returns on features (over all steps; padding has zero features and
    returns). The regulariser grows tenfold while the solve fails or is not finite (as rllab's). After five
    failures the weights are zero (the baseline predicts 0: advantages are the plain returns' GAE), said in the log
    (the reference raises; a run keeps going)."""
    X = features.reshape(-1, features.shape[-1]).double()
    y = returns.reshape(-1).double()
    XtX, Xty = X.T @ X, X.T @ y
    eye = torch.eye(X.shape[1], dtype=X.dtype)
    for _ in range(5):
        try:
            w = torch.linalg.solve(XtX + reg * eye, Xty)
            if bool(torch.isfinite(w).all()):
                return w.to(features.dtype)
        except RuntimeError:  # singular
            pass
        reg *= 10
    log.warning(
        "MAML: the linear baseline could not be fitted (regulariser up to %g, features %s finite: %s); "
        "this batch's baseline is zero",
        reg / 10,
        tuple(X.shape),
        bool(torch.isfinite(X).all()),
    )
    return torch.zeros(X.shape[1], dtype=features.dtype)


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> Tensor:
    """Generalised advantage estimates [E, T]; the value after an episode's last step is 0 (as the references)."""
    values = values * mask
    next_values = torch.cat([values[..., 1:], torch.zeros_like(values[..., :1])], dim=-1)
    deltas = rewards + gamma * next_values - values
    adv = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[..., 0])
    for t in reversed(range(rewards.shape[-1])):
        running = deltas[..., t] + gamma * lam * running * mask[..., t]
        adv[..., t] = running * mask[..., t]
    return adv


def advantages(episodes: Episodes, gamma: float, lam: float) -> Tensor:
    """Normalised GAE of one task's episodes [E, T] with a linear baseline fitted on those episodes."""
    with torch.no_grad():
        feats = baseline_features(episodes.obs, episodes.mask)
        returns = return_to_go(episodes.rewards, gamma, episodes.mask)
        values = feats @ fit_linear_baseline(feats, returns)
        adv = gae(episodes.rewards, values, episodes.mask, gamma, lam)
        mean = masked_mean(adv, episodes.mask)
        std = masked_mean((adv - mean).pow(2), episodes.mask).sqrt()
        return (adv - mean) / (std + 1e-8) * episodes.mask


# --- the inner step and the outer objective ----------------------------------------------------------------
def inner_loss(model: nn.Module, params: Params, episodes: Episodes, adv: Tensor) -> Tensor:
    """Vanilla policy gradient loss -mean_t[log pi(a|s) A] over the steps taken."""
    dist = distribution(model, params, episodes.obs)
    return -masked_mean(model.log_prob(dist, episodes.actions) * adv, episodes.mask)


def inner_step(
    model: nn.Module, params: Params, episodes: Episodes, adv: Tensor, fast_lr: float, first_order: bool = False
) -> tuple[Params, tuple[Tensor, ...]]:
    """The adaptation rule, the one place it is written in torch: one step of gradient descent on `inner_loss`,
    theta' = params - fast_lr * grad; returns (theta', the gradient). Second order: the gradient keeps its graph, so
    theta' is a differentiable function of `params`. (The numpy twin, tested against `MamlTrpo.adapted`:
    appo/numpy_policy/maml_adapt.py.)"""
    with torch.enable_grad():
        loss = inner_loss(model, params, episodes, adv)
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=not first_order)
    return {name: p - fast_lr * g for (name, p), g in zip(params.items(), grads, strict=True)}, grads


def adapt(
    model: nn.Module,
    params: Params,
    episodes: Episodes,
    adv: Tensor,
    fast_lr: float,
    num_steps: int,
    first_order: bool = False,
) -> Params:
    """theta' after `num_steps` inner steps (`inner_step`) on the same episodes and advantages."""
    for _ in range(num_steps):
        params, _ = inner_step(model, params, episodes, adv, fast_lr, first_order)
    return params


class TaskBatch(NamedTuple):
    """What the outer step needs of one task, computed once per meta-iteration (no gradient)."""

    train: Episodes
    train_adv: Tensor
    valid: Episodes
    valid_adv: Tensor
    old_dist: Tensor  # the acting (adapted) policy's distribution on the validation observations
    old_log_probs: Tensor  # its log-probs of the validation actions


class MetaStats(NamedTuple):
    inner_loss: float
    surrogate_before: float
    surrogate_after: float
    kl: float
    ls_steps: int
    is_accepted: bool
    grad_norm: float


class MamlTrpo(Algorithm):
    """The meta-learner: adapted parameters for the samplers, and the TRPO meta-step. Its data arrives as whole
    meta-batches from the MAML driver (appo/maml/driver.py), not through the engine's batcher."""

    def __init__(self, cfg: Any, model: MamlPolicy | MamlCategoricalPolicy) -> None:
        self.cfg, self.model = cfg, model

    # --- the samplers' weights ---------------------------------------------------------------------------
    def adapted(
        self, train: Episodes, params: Params | None = None, num_steps: int | None = None, adv: Tensor | None = None
    ) -> Params:
        """theta'_k (detached) for one task's train episodes, from `params` (default: the meta-parameters);
        `adv`: their advantages when already computed."""
        cfg = self.cfg
        params = params if params is not None else params_of(self.model)
        params = {k: v.detach().requires_grad_() for k, v in params.items()}
        adv = advantages(train, cfg.gamma, cfg.gae_lambda) if adv is None else adv
        steps = cfg.num_inner_steps if num_steps is None else num_steps
        new = adapt(self.model, params, train, adv, inner_lr(cfg), steps, first_order=True)
        return {k: v.detach() for k, v in new.items()}

    # --- the outer step ----------------------------------------------------------------------------------
    def task_batches(self, train: Episodes, valid: Episodes) -> list[TaskBatch]:
        cfg, out = self.cfg, []
        for k in range(train.obs.shape[0]):
            tr, va = train.task(k), valid.task(k)
            tr_adv = advantages(tr, cfg.gamma, cfg.gae_lambda)
            acting = self.adapted(tr, adv=tr_adv)
            with torch.no_grad():
                dist = distribution(self.model, acting, va.obs)
                old_lp = self.model.log_prob(dist, va.actions)
            va_adv = advantages(va, cfg.gamma, cfg.gae_lambda)
            out.append(TaskBatch(tr, tr_adv, va, va_adv, dist, old_lp))
        return out

    def outer_loss(self, params: Params, batches: list[TaskBatch], first_order: bool) -> tuple[Tensor, Tensor]:
        """(surrogate, KL) averaged over the tasks, as functions of the meta-parameters `params`."""
        cfg, model = self.cfg, self.model
        losses, kls = [], []
        for b in batches:
            theta = adapt(model, params, b.train, b.train_adv, inner_lr(cfg), cfg.num_inner_steps, first_order)
            dist = distribution(model, theta, b.valid.obs)
            ratio = torch.exp(model.log_prob(dist, b.valid.actions) - b.old_log_probs)
            losses.append(-masked_mean(ratio * b.valid_adv, b.valid.mask))
            kls.append(masked_mean(model.kl(b.old_dist, dist), b.valid.mask))
        return torch.stack(losses).mean(), torch.stack(kls).mean()

    def meta_gradient(self, batches: list[TaskBatch]) -> tuple[Tensor, Tensor]:
        """(surrogate at the meta-parameters, its gradient as a flat vector)."""
        params = params_of(self.model)
        loss, _ = self.outer_loss(params, batches, self.cfg.first_order)
        grads = torch.autograd.grad(loss, list(params.values()))
        return loss.detach(), flatten(dict(zip(params, grads, strict=True)))

    @property
    def has_task_hvps(self) -> bool:
        """Whether the per-task products (`task_hvps`, the helper processes' too) are the KL's Hessian: they assume
        one inner step; with more, only the direct form (`kl_hvp_autograd`) is."""
        return self.cfg.num_inner_steps == 1

    def kl_hvp(self, batches: list[TaskBatch]) -> Callable[[Tensor], Tensor]:
        """v -> H v, H the Hessian of the mean KL at the meta-parameters: the tasks' products (`task_hvps`) summed
        in task order and divided by their number."""
        if not self.has_task_hvps:
            return self.kl_hvp_autograd(batches)
        products = self.task_hvps(batches)
        return lambda v: mean_in_order([hvp(v) for hvp in products])

    def task_hvps(self, batches: list[TaskBatch]) -> list[Callable[[Tensor], Tensor]]:
        """Per task k, v -> J_k F_k J_k v (one inner step). At the current parameters the KL and its gradient in
        theta'_k vanish, so the Hessian of task k's KL is exactly the Fisher F_k of pi_theta'_k carried back through
        the adaptation's Jacobian J_k = I - fast_lr * (Hessian of the inner loss), which is symmetric (first order:
        J_k = I). That avoids differentiating the KL's gradient through the second-order adaptation, about 2x
        cheaper per product; `kl_hvp_autograd` is the direct form. A task's product depends on its data alone, so
        helper processes can compute them (appo/maml/hvp_pool.py)."""
        cfg, params = self.cfg, params_of(self.model)
        names, leaves = list(params), list(params.values())

        def jacobian_product(g: Tensor | None, u: Tensor) -> Tensor:
            if g is None:
                return u
            hu = torch.autograd.grad(torch.dot(g, u), leaves, retain_graph=True)
            return u - inner_lr(cfg) * flatten(dict(zip(names, hu, strict=True)))

        def product(g: Tensor | None, g_kl: Tensor, theta: list[Tensor]) -> Callable[[Tensor], Tensor]:
            def hvp(v: Tensor) -> Tensor:
                jv = jacobian_product(g, v)
                fjv = torch.autograd.grad(torch.dot(g_kl, jv), theta, retain_graph=True)
                return jacobian_product(g, flatten(dict(zip(names, fjv, strict=True))))

            return hvp

        products = []
        for b in batches:
            adapted, g_inner = inner_step(self.model, params, b.train, b.train_adv, inner_lr(cfg), cfg.first_order)
            theta = {k: p.detach().requires_grad_() for k, p in adapted.items()}
            kl = masked_mean(self.model.kl(b.old_dist, distribution(self.model, theta, b.valid.obs)), b.valid.mask)
            g_kl = torch.autograd.grad(kl, list(theta.values()), create_graph=True)
            g = None if cfg.first_order else flatten(dict(zip(names, g_inner, strict=True)))
            products.append(product(g, flatten(dict(zip(names, g_kl, strict=True))), list(theta.values())))
        return products

    def kl_hvp_autograd(self, batches: list[TaskBatch]) -> Callable[[Tensor], Tensor]:
        """v -> H v by differentiating the KL's gradient (one graph, reused by every CG step)."""
        params = params_of(self.model)
        _, kl = self.outer_loss(params, batches, self.cfg.first_order)
        grads = torch.autograd.grad(kl, list(params.values()), create_graph=True)
        flat = flatten(dict(zip(params, grads, strict=True)))

        def hvp(v: Tensor) -> Tensor:
            hv = torch.autograd.grad(torch.dot(flat, v), list(params.values()), retain_graph=True)
            return flatten(dict(zip(params, hv, strict=True)))

        return hvp

    def step(self, train: Episodes, valid: Episodes, hvp: Callable[[Tensor], Tensor] | None = None) -> MetaStats:
        """One TRPO meta-step on a meta-batch ([K, E, T, ...] each); writes the parameters only when a step is
        accepted. `hvp`: the KL's Hessian-vector product computed elsewhere (the helper processes); default here."""
        cfg = self.cfg
        batches = self.task_batches(train, valid)
        with torch.no_grad():
            inner = float(
                np.mean([float(inner_loss(self.model, params_of(self.model), b.train, b.train_adv)) for b in batches])
            )
        loss_before, grad = self.meta_gradient(batches)
        hvp = self.kl_hvp(batches) if hvp is None else hvp
        full_step, _ = step_direction(grad, hvp, cfg.max_kl, cfg.cg_iters, cfg.cg_damping)
        params = params_of(self.model)
        theta = flatten(params).detach()

        def evaluate(candidate: Tensor) -> tuple[float, float]:
            leaf = candidate.detach().requires_grad_()  # the inner step differentiates; nothing else does
            loss, kl = self.outer_loss(unflatten(leaf, params), batches, first_order=True)
            return float(loss.detach()), float(kl.detach())

        result = line_search(
            evaluate, theta, full_step, float(loss_before), cfg.max_kl, cfg.ls_max_steps, cfg.ls_backtrack_ratio
        )
        if result.is_accepted:
            with torch.no_grad():
                for p, new in zip(params.values(), unflatten(result.params, params).values(), strict=True):
                    p.copy_(new)
        return MetaStats(
            inner,
            float(loss_before),
            result.loss,
            result.kl,
            result.steps,
            result.is_accepted,
            float(grad.norm()),
        )

    def state_dict(self) -> dict[str, Any]:
        return {}
