"""`SquashedGaussianActor.act` (SAC's actor, appo/models/squashed_gaussian.py) in numpy: relu trunk, mean and
log-std heads (the log-std clamped into its range as in torch), a = tanh(mean + std * noise) scaled to the env's
box, with the tanh-corrected log-prob. Uniform random actions while the weights have had no update (`updates == 0`:
the warm-up of --learning_starts); deterministic acting is tanh(mean). Description: {"kind": "squashed_gaussian"}.
"""

from __future__ import annotations

import numpy as np

from appo.numpy_policy.ops import NumpyActOutput, NumpyPass, State, f32, gaussian_log_prob, mlp, run_layers

# The Gaussian's log-std is the head's output clamped to this range, as in Haarnoja et al.'s code and
# Stable-Baselines3. With nn.Linear's initialisation it starts near 0 (std 1: tanh(u) spread over most of [-1, 1]).
# A tanh-rescaled head (cleanrl's, [-5, 2]) gives the log-std about 2.9x the clamp's gradient at the start: it and
# the exact tanh correction (without TANH_EPS) are the two ways an update would differ from Stable-Baselines3's.
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
TANH_EPS = 1e-6  # in the tanh correction (squashed_log_prob)


class SquashedGaussianPass(NumpyPass):
    kind = "squashed_gaussian"

    def load_state(self, state: State) -> None:
        """Copy the weights (call after every pull)."""
        self.layers = mlp(state, "trunk", "relu")
        # Both heads as one matmul: [mean | raw log-std].
        self.head_w = np.concatenate([f32(state["mean_head.weight"]).T, f32(state["log_std_head.weight"]).T], axis=1)
        self.head_b = np.concatenate([f32(state["mean_head.bias"]), f32(state["log_std_head.bias"])])
        self.scale, self.bias = f32(state["action_scale"]), f32(state["action_bias"])
        self.is_warmup = int(state["updates"]) == 0

    def act(self, obs: np.ndarray, rnn_states: np.ndarray | None = None, deterministic: bool = False) -> NumpyActOutput:
        """Env-scale actions [B, A], log-probs of their [-1, 1] form [B], zero values, `rnn_states` passed through."""
        x = run_layers(self.layers, obs.reshape(len(obs), -1).astype(np.float32, copy=False))
        out = x @ self.head_w + self.head_b
        A = len(self.scale)
        mean = out[:, :A]
        if deterministic:
            a, log_probs = np.tanh(mean), np.zeros(len(obs), dtype=np.float32)
        elif self.is_warmup:
            a = self.rng.uniform(-1.0, 1.0, mean.shape).astype(np.float32)
            log_probs = np.full(len(obs), -A * np.log(2.0), dtype=np.float32)
        else:
            log_std = np.clip(out[:, A:], LOG_STD_MIN, LOG_STD_MAX)
            noise = self.rng.standard_normal(mean.shape, dtype=np.float32)
            u = mean + np.exp(log_std) * noise
            a = np.tanh(u)
            gaussian = gaussian_log_prob(noise, log_std)
            log_det = np.log(1.0 - np.square(a) + TANH_EPS).sum(-1)
            log_probs = gaussian - log_det
        actions = (a * self.scale + self.bias).astype(np.float32)
        return NumpyActOutput(actions, log_probs.astype(np.float32), np.zeros(len(obs), np.float32), rnn_states)
