"""MAML's policy for discrete actions (`MamlCategoricalPolicy`, appo/models/categorical_mlp.py) in numpy: logits =
MLP(obs), an action drawn by Gumbel-max, argmax(log_softmax(logits) - log(noise)) with standard-exponential `noise`,
the noise given (an episodic run's `action_noise`: the same episode wherever it runs) or drawn from its own
generator, as the engine's categorical heads draw (appo/inference/ops.py `sample`). The arithmetic is fixed
(contiguous float32 rows, x @ W.T + b per layer), so a row's action depends only on that row.
Description: {"kind": "maml_categorical_mlp", "activation": "tanh" | "relu"}."""

from __future__ import annotations

import numpy as np

from appo.inference.ops import NumpyActOutput, NumpyPass, State, mlp, run_layers


class CategoricalMlpPass(NumpyPass):
    kind = "maml_categorical_mlp"
    takes_noise = True

    def load_state(self, state: State) -> None:
        """Copy the weights (call after every pull)."""
        self.layers = mlp(state, "mlp", self.description["activation"], last_linear=True)

    def log_probs(self, obs: np.ndarray) -> np.ndarray:
        """log pi(.|obs) [B, n]."""
        logits = run_layers(self.layers, np.ascontiguousarray(obs, dtype=np.float32))
        logits = logits - logits.max(axis=-1, keepdims=True)
        return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))

    def act(
        self,
        obs: np.ndarray,
        rnn_states: np.ndarray | None = None,
        deterministic: bool = False,
        noise: np.ndarray | None = None,
    ) -> NumpyActOutput:
        """Actions [B, 1] int64 (the most likely with `deterministic`), their log-probs, zero values."""
        log_p = self.log_probs(obs)
        if deterministic:
            actions = log_p.argmax(axis=-1)
        else:
            if noise is None:
                noise = self.rng.standard_exponential(log_p.shape, dtype=np.float32)
            actions = (log_p - np.log(np.maximum(noise, 1e-38))).argmax(axis=-1)
        chosen = np.take_along_axis(log_p, actions[:, None], axis=-1)[:, 0].astype(np.float32)
        values = np.zeros(len(obs), np.float32)
        return NumpyActOutput(actions[:, None].astype(np.int64), chosen, values, rnn_states)
