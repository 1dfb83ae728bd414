"""`CommandPolicy.act` (UDRL's and RCP's behaviour function, appo/models/command_policy.py) in numpy: the state's
layer (tanh or sigmoid) gated by the sigmoid of the command's, the relu trunk, a categorical or a Gaussian head
with a state-independent log-std; uniformly random actions while the weights have had no update (the warm-up:
bounded Box dims uniform in the box, unbounded ones N(0, 1), zero log-probs; Discrete uniform, log-prob -log n);
the mode when deterministic. Description: {"kind": "command_policy", "state_activation": "tanh" | "sigmoid"}.
The observation is the env's state followed by the scaled command (envs/common/reward_conditioning.py)."""

from __future__ import annotations

import numpy as np

from appo.numpy_policy.ops import (
    ACTIVATIONS,
    NumpyActOutput,
    NumpyPass,
    State,
    f32,
    gaussian_log_prob_const,
    linear,
    mlp,
    run_layers,
    sample,
    sigmoid,
)


class CommandPolicyPass(NumpyPass):
    kind = "command_policy"

    def load_state(self, state: State) -> None:
        """Copy the weights (call after every pull)."""
        self.state_layer = [linear(state, "state_layer")]
        self.command_layer = [linear(state, "command_layer")]
        self.state_dims = self.state_layer[0][0].shape[0]
        self.state_activation = ACTIVATIONS[self.description["state_activation"]]
        self.trunk = mlp(state, "trunk", "relu")
        self.head = [linear(state, "head")]
        self.command = f32(state["command"])  # unscaled (return, horizon): the learner's latest command
        self.is_discrete = "log_std" not in state
        self.is_warmup = int(state["updates"]) == 0
        if self.is_discrete:
            self.num_actions = self.head[0][0].shape[1]
        else:
            self.log_std = f32(state["log_std"])
            self.std = np.exp(self.log_std)
            self.log_prob_const = gaussian_log_prob_const(self.log_std)
            self.low, self.high = f32(state["low"]), f32(state["high"])

    def act(self, obs: np.ndarray, rnn_states: np.ndarray | None = None, deterministic: bool = False) -> NumpyActOutput:
        """Actions [B, A] or [B, 1], their log-probs [B], zero values, `rnn_states` passed through."""
        B = len(obs)
        zeros = np.zeros(B, dtype=np.float32)
        if self.is_warmup and not deterministic:
            if self.is_discrete:
                actions = self.rng.integers(self.num_actions, size=(B, 1), dtype=np.int64)
                return NumpyActOutput(actions, np.full(B, -np.log(self.num_actions), np.float32), zeros, rnn_states)
            bounded = np.isfinite(self.low) & np.isfinite(self.high)
            span = np.where(bounded, self.high - self.low, 0.0)
            uniform = np.where(bounded, self.low, 0.0) + span * self.rng.random((B, len(self.low)), dtype=np.float32)
            normal = self.rng.standard_normal((B, len(self.low)), dtype=np.float32)
            return NumpyActOutput(np.where(bounded, uniform, normal).astype(np.float32), zeros, zeros, rnn_states)
        x = obs.reshape(B, -1).astype(np.float32, copy=False)
        state, command = x[:, : self.state_dims], x[:, self.state_dims :]
        h = self.state_activation(run_layers(self.state_layer, state)) * sigmoid(
            run_layers(self.command_layer, command)
        )
        params = run_layers(self.head, run_layers(self.trunk, h))
        std = None if self.is_discrete else self.std
        const = 0.0 if self.is_discrete else self.log_prob_const
        return NumpyActOutput(*sample(self.rng, params, zeros, std, const, deterministic), rnn_states)
