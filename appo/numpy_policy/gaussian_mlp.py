"""MAML's policy (`MamlPolicy`, appo/models/gaussian_mlp.py) in numpy: mean = MLP(obs), state-independent std, and
a = mean + std * noise, the noise given (an episodic run's `action_noise`: the same episode wherever it runs) or
drawn from its own generator. The arithmetic is fixed (contiguous float32 rows, x @ W.T + b per layer), so a row's
actions depend only on that row and on the shape of the batch it is computed in.
Description: {"kind": "maml_mlp", "distribution": "gaussian", "activation": "tanh" | "relu"}."""

from __future__ import annotations

import numpy as np

from appo.numpy_policy.ops import (
    NumpyActOutput,
    NumpyPass,
    State,
    f32,
    gaussian_log_prob_const,
    mlp,
    run_layers,
    sample,
)


class GaussianMlpPass(NumpyPass):
    kind = "maml_mlp"  # with CategoricalMlpPass: the description's "distribution" tells them apart
    takes_noise = True

    def load_state(self, state: State) -> None:
        """Copy the weights (call after every pull)."""
        self.layers = mlp(state, "mlp", self.description["activation"], last_linear=True)
        self.log_std = f32(state["log_std"])
        self.std = np.exp(self.log_std)
        self.log_prob_const = gaussian_log_prob_const(self.log_std)

    def mean(self, obs: np.ndarray) -> np.ndarray:
        return run_layers(self.layers, np.ascontiguousarray(obs, dtype=np.float32))

    def act(
        self,
        obs: np.ndarray,
        rnn_states: np.ndarray | None = None,
        deterministic: bool = False,
        noise: np.ndarray | None = None,
    ) -> NumpyActOutput:
        """Actions [B, A] as sampled (the env runner clips what the env sees; the mean with `deterministic`), their
        log-probs, zero values."""
        zeros = np.zeros(len(obs), np.float32)
        sampled = sample(self.rng, self.mean(obs), zeros, self.std, self.log_prob_const, deterministic, noise)
        return NumpyActOutput(*sampled, rnn_states)
