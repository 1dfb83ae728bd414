"""MAML's adaptation step in numpy (appo/maml/algorithm.py `MamlTrpo.adapted`, first order): from the
meta-parameters, `num_inner_steps` steps of gradient descent with step `fast_lr` on the vanilla policy-gradient
loss -mean_t[log pi(a_t|s_t) A_t] over one task's episodes, A the normalised GAE with rllab's linear feature
baseline fitted on those episodes. The gradient of the Gaussian or categorical MLP is written out by hand
(backpropagation through tanh or relu layers, and a Gaussian's log-std), in float64; `Policy.adapt`
(appo/numpy_policy/policy.py) calls it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Episode = dict[str, Any]  # {"obs": [T, obs_dim], "actions": [T, act_dim] as sampled, "rewards": [T]}


def pad(episodes: list[Episode]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(obs [E, T, D], actions [E, T, A], rewards [E, T], mask [E, T]) with zero padding after each end."""
    if not episodes:
        raise ValueError("adapt: no episodes")
    T = max(len(e["rewards"]) for e in episodes)
    first = episodes[0]
    obs = np.zeros((len(episodes), T, np.asarray(first["obs"]).shape[-1]))
    actions = np.zeros((len(episodes), T, np.asarray(first["actions"]).shape[-1]))
    rewards, mask = np.zeros((len(episodes), T)), np.zeros((len(episodes), T))
    for i, e in enumerate(episodes):
        n = len(e["rewards"])
        obs[i, :n], actions[i, :n], rewards[i, :n], mask[i, :n] = e["obs"][:n], e["actions"][:n], e["rewards"], 1.0
    return obs, actions, rewards, mask


def advantages(obs: np.ndarray, rewards: np.ndarray, mask: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """Normalised GAE [E, T] with a linear feature baseline (obs, obs^2, t/100 up to cubed, 1) fitted by ridge
    regression on the discounted returns (the regulariser x10 while the solve fails, up to five times; then zero)."""
    E, T = rewards.shape
    o = np.clip(obs, -10, 10)
    t = np.broadcast_to((np.arange(T) / 100.0)[None, :, None], (E, T, 1))
    feats = np.concatenate([o, o * o, t, t * t, t * t * t, np.ones_like(t)], axis=-1) * mask[..., None]
    returns = np.zeros_like(rewards)
    running = np.zeros(E)
    for k in range(T - 1, -1, -1):
        running = rewards[:, k] + gamma * running * mask[:, k]
        returns[:, k] = running * mask[:, k]
    X, y = feats.reshape(-1, feats.shape[-1]), returns.reshape(-1)
    weights, reg = np.zeros(X.shape[1]), 1e-5
    for _ in range(5):
        try:
            w = np.linalg.solve(X.T @ X + reg * np.eye(X.shape[1]), X.T @ y)
            if np.isfinite(w).all():
                weights = w
                break
        except np.linalg.LinAlgError:
            pass
        reg *= 10
    values = (feats @ weights) * mask
    next_values = np.concatenate([values[:, 1:], np.zeros((E, 1))], axis=1)
    deltas = rewards + gamma * next_values - values
    adv, running = np.zeros_like(rewards), np.zeros(E)
    for k in range(T - 1, -1, -1):
        running = deltas[:, k] + gamma * lam * running * mask[:, k]
        adv[:, k] = running * mask[:, k]
    count = max(mask.sum(), 1.0)
    mean = (adv * mask).sum() / count
    std = np.sqrt((((adv - mean) ** 2) * mask).sum() / count)
    return (adv - mean) / (std + 1e-8) * mask


def _layers(state: dict[str, np.ndarray]) -> list[str]:
    names, i = [], 0
    while f"mlp.{i}.weight" in state:
        names.append(f"mlp.{i}")
        i += 2
    return names


def inner_gradients(
    state: dict[str, np.ndarray],
    activation: str,
    obs: np.ndarray,
    actions: np.ndarray,
    adv: np.ndarray,
    mask: np.ndarray,
) -> dict[str, np.ndarray]:
    """d/d(state) of -sum_t mask_t log pi(a_t|s_t) adv_t / sum_t mask_t for the Gaussian or categorical MLP
    `state` (MAML's policies: a state with `log_std` is Gaussian)."""
    layers = _layers(state)
    x = obs.reshape(-1, obs.shape[-1])
    inputs, outputs = [], []
    for k, name in enumerate(layers):
        inputs.append(x)
        z = x @ state[f"{name}.weight"].T + state[f"{name}.bias"]
        if k < len(layers) - 1:
            z = np.tanh(z) if activation == "tanh" else np.maximum(z, 0.0)
        outputs.append(z)
        x = z
    weight = (mask * adv).reshape(-1, 1) / max(mask.sum(), 1.0)
    if "log_std" in state:  # Gaussian: x is the mean
        mean, log_std = x, state["log_std"].astype(np.float64)
        a = actions.reshape(mean.shape)
        scaled = (a - mean) / np.exp(2.0 * log_std)
        grads = {"log_std": -(weight * ((a - mean) * scaled - 1.0)).sum(0)}
        g = -weight * scaled  # dL/dmean
    else:  # categorical: x is the logits, d log pi(a) / d logits = onehot(a) - softmax(logits)
        p = np.exp(x - x.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        onehot = np.eye(x.shape[-1])[actions.reshape(-1).astype(np.int64)]
        grads, g = {}, -weight * (onehot - p)
    for k in range(len(layers) - 1, -1, -1):
        name = layers[k]
        grads[f"{name}.weight"] = g.T @ inputs[k]
        grads[f"{name}.bias"] = g.sum(0)
        if k > 0:
            g = g @ state[f"{name}.weight"]
            h = outputs[k - 1]
            g = g * (1.0 - h * h) if activation == "tanh" else g * (h > 0.0)
    return grads


def adapt(
    state: dict[str, np.ndarray],
    activation: str,
    episodes: list[Episode],
    fast_lr: float,
    steps: int,
    gamma: float,
    lam: float,
) -> dict[str, np.ndarray]:
    """The state after `steps` inner steps on `episodes` (the same episodes and advantages each step)."""
    obs, actions, rewards, mask = pad(episodes)
    adv = advantages(obs, rewards, mask, gamma, lam)
    params = {k: np.asarray(v, dtype=np.float64) for k, v in state.items()}
    for _ in range(steps):
        grads = inner_gradients(params, activation, obs, actions, adv, mask)
        params = {k: v - fast_lr * grads[k] if k in grads else v for k, v in params.items()}
    return {k: v.astype(np.asarray(state[k]).dtype) for k, v in params.items()}
