"""PPO's diagnostics: the approximate KL between the behaviour policy and the weights before and after an
iteration's update, and the explained variance of the value targets by the values before it. The KL before is
read off the first minibatch's loss pass (it runs before any step, so costs nothing more); the KL after takes a
pass of its own over at most `KL_AFTER_STEPS` steps of that minibatch. Each learner rank sums its own part
(`kl_part`, `kl_sums`, `value_moments`), appo/learning/distributed.py sums the parts over the ranks, and
`read_diagnostics` reads the whole batch's figures from the totals."""

from __future__ import annotations

import torch
from torch import Tensor, nn

# The KL after the update is an estimate from this many steps of the first minibatch (whole trajectories: at least
# one): a diagnostic, not worth another full forward pass over a large minibatch.
KL_AFTER_STEPS = 256


@torch.no_grad()
def kl_part(log_probs: Tensor, old_log_probs: Tensor, name: str) -> dict[str, float]:
    """Sum and count of the k3 estimate of KL(behaviour || current) over the given steps' log-probs."""
    log_ratio = log_probs.detach() - old_log_probs
    kl = (log_ratio.exp() - 1.0) - log_ratio
    return {f"{name}_sum": float(kl.sum()), f"{name}_n": float(kl.numel())}


def after_probe(idx: Tensor, steps_per_index: int) -> Tensor:
    """The part of the first minibatch `idx` (single steps, or trajectories of `steps_per_index` steps) that the KL
    after the update is measured on."""
    return idx[: max(1, KL_AFTER_STEPS // steps_per_index)]


@torch.no_grad()
def kl_sums(
    model: nn.Module, b: dict[str, Tensor], idx: Tensor, is_per_step: bool, recurrence: int, name: str
) -> dict[str, float]:
    """Sum and count of the k3 estimate of KL(behaviour || current weights) over the minibatch `idx` (this
    rank's part), from the model itself (no DDP hooks, no normaliser updates); of the steps in a game only, where
    the batch says which (multi-agent)."""
    T = b["rewards"].shape[1]
    if idx.numel() == 0:
        return {f"{name}_sum": 0.0, f"{name}_n": 0.0}
    if is_per_step:
        n, t = idx // T, idx % T
        step = lambda key: b[key][n, t].unsqueeze(1)  # noqa: E731 - [n, 1, ...]
        out = model(step("obs"), step("actions"), step("rnn_states"), step("dones"), 1)
        old = b["log_probs"][n, t].unsqueeze(1)
        valid = b["valid"][n, t].unsqueeze(1) if "valid" in b else None
    else:
        obs, rnn = b["obs"][idx], b["rnn_states"][idx]
        out = model(obs[:, :T], b["actions"][idx], rnn[:, :T], b["dones"][idx], recurrence)
        old = b["log_probs"][idx]
        valid = b["valid"][idx] if "valid" in b else None
    if valid is not None:
        return kl_part(out.log_probs[valid > 0], old[valid > 0], name)
    return kl_part(out.log_probs, old, name)


def value_moments(adv: Tensor, returns: Tensor) -> dict[str, float]:
    """Sums for the explained variance of this iteration's value targets by the values before the update
    (GAE: the values are the targets minus the advantages), mergeable over ranks."""
    r, e = returns.double(), adv.double()  # e = returns - values
    return {"ev_n": float(r.numel()), "ev_r": float(r.sum()), "ev_rr": float((r * r).sum())} | {
        "ev_e": float(e.sum()),
        "ev_ee": float((e * e).sum()),
    }


def read_diagnostics(d: dict[str, float]) -> dict[str, float]:
    """approx_kl before and after the update, and the explained variance."""
    out = {}
    for name in ("kl_before", "kl_after"):
        if d.get(f"{name}_n", 0.0) > 0:
            out[f"approx_{name}"] = d[f"{name}_sum"] / d[f"{name}_n"]
    n = d.get("ev_n", 0.0)
    if n > 1:
        var_r = d["ev_rr"] / n - (d["ev_r"] / n) ** 2
        var_e = d["ev_ee"] / n - (d["ev_e"] / n) ** 2
        if var_r > 1e-12:
            out["explained_variance"] = 1.0 - var_e / var_r
    return out
