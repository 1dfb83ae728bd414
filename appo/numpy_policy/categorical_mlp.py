"""MAML's policy for discrete actions (`MamlCategoricalPolicy`, appo/models/categorical_mlp.py) in numpy: logits =
MLP(obs), an action drawn by Gumbel-max as the engine's categorical heads draw (appo/numpy_policy/ops.py `sample`), its
standard-exponential noise given (an episodic run's `action_noise`: the same episode wherever it runs) or drawn
from its own generator. The arithmetic is fixed (contiguous float32 rows, x @ W.T + b per layer), so a row's action
depends only on that row. Description: {"kind": "maml_mlp", "distribution": "categorical", "activation": "tanh" |
"relu"}."""

from __future__ import annotations

import numpy as np

from appo.numpy_policy.ops import NumpyActOutput, NumpyPass, State, log_softmax, mlp, run_layers, sample


class CategoricalMlpPass(NumpyPass):
    kind = "maml_mlp"  # with GaussianMlpPass: the description's "distribution" tells them apart
    takes_noise = True

    def load_state(self, state: State) -> None:
        """Copy the weights (call after every pull)."""
        self.layers = mlp(state, "mlp", self.description["activation"], last_linear=True)

    def log_probs(self, obs: np.ndarray) -> np.ndarray:
        """log pi(.|obs) [B, n]."""
        return log_softmax(run_layers(self.layers, np.ascontiguousarray(obs, dtype=np.float32)))

    def act(
        self,
        obs: np.ndarray,
        rnn_states: np.ndarray | None = None,
        deterministic: bool = False,
        noise: np.ndarray | None = None,
    ) -> NumpyActOutput:
        """Actions [B, 1] int64 (the most likely with `deterministic`), their log-probs, zero values."""
        logits = run_layers(self.layers, np.ascontiguousarray(obs, dtype=np.float32))
        zeros = np.zeros(len(obs), np.float32)
        return NumpyActOutput(*sample(self.rng, logits, zeros, None, 0.0, deterministic, noise), rnn_states)
