"""PPO's diagnostics from summed parts: each rank sums its own, appo/learning/distributed.py sums them over the
ranks, and this reads the whole batch's figures from the totals."""

from __future__ import annotations


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
