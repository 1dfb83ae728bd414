"""`ActorCritic.act` in numpy (appo/models/actor_critic.py; appo/numpy_policy/ops.py says how twins are built):
observation normaliser (clipped), MLP encoder, optional GRU or LSTM cell (torch's `GRUCell` / `LSTMCell` equations,
state laid out as in `ActorCritic.core_step`: h for a GRU, concat([h, c]) for an LSTM), Gaussian (state-independent
log-std) or categorical head, value head (on the policy's features, or on its own MLP trunk with
`--separate_value_trunk`). Image models read their features from a convnet (appo/numpy_policy/conv.py), Dict models
from the Dict encoder (appo/numpy_policy/dict_encoder.py), in place of the MLP. The caller keeps the recurrent state
and resets it at episode ends, as for the torch path. `NumpyPolicyStack` acts for a population in one pass.

Description: {"kind": "actor_critic", "activation": "tanh" | "relu" | "elu", "core": None | "gru" | "lstm",
"obs_clip": float | None, "obs_epsilon": float}, and for an image model "encoder": the convnet's spec
(appo/numpy_policy/conv.py; without it the encoder is the MLP); everything else (layer sizes, the value trunk, the
normaliser, discrete or continuous actions) is read from the state's names and shapes. A Dict model's "encoder" is
the Dict encoder's spec (appo/numpy_policy/dict_encoder.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from appo.numpy_policy.dict_encoder import encoder_pass
from appo.numpy_policy.ops import (
    Layer,
    NumpyActOutput,
    NumpyPass,
    State,
    f32,
    gaussian_log_prob_const,
    mlp,
    run_layers,
    sample,
    sigmoid,
)


def core_weights(state: State, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A cell's (w_ih [F, G], b_ih [G], w_hh [H, G], b_hh [G]), G = 3H (GRU: r, z, n as torch has them) or 4H
    (LSTM: torch's i, f, g, o reordered to i, f, o, g so that one sigmoid covers three gates)."""
    w_ih, b_ih, w_hh, b_hh = (f32(state[f"core.{n}"]) for n in ("weight_ih", "bias_ih", "weight_hh", "bias_hh"))
    if kind == "lstm":
        H = w_hh.shape[1]
        order = np.concatenate([np.arange(0, 2 * H), np.arange(3 * H, 4 * H), np.arange(2 * H, 3 * H)])
        w_ih, b_ih, w_hh, b_hh = w_ih[order], b_ih[order], w_hh[order], b_hh[order]
    return w_ih.T.copy(), b_ih, w_hh.T.copy(), b_hh


def core_step(
    kind: str, x: np.ndarray, state: np.ndarray, w_ih: np.ndarray, b_ih: np.ndarray, w_hh: np.ndarray, b_hh: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One step of the cell `kind` ("gru" or "lstm"): x [..., F] and state [..., S] (S = H, or 2H for the LSTM's
    concat([h, c])) -> (features h' [..., H], next state [..., S]). Weights as `core_weights` gives them, or stacked
    [K, F, G] / [K, 1, G] against x [K, rows, F]. Each step is written as torch's CPU cell computes it, so that the
    float32 results agree to rounding."""
    H = w_hh.shape[-2]
    if kind == "gru":
        gi = np.matmul(x, w_ih) + b_ih
        gh = np.matmul(state, w_hh) + b_hh
        rz = sigmoid(gi[..., : 2 * H] + gh[..., : 2 * H])
        n = np.tanh(gi[..., 2 * H :] + rz[..., :H] * gh[..., 2 * H :])
        h = n + rz[..., H:] * (state - n)  # = (1 - z) * n + z * h
        return h, h
    h, c = state[..., :H], state[..., H:]
    gates = (np.matmul(x, w_ih) + b_ih) + (np.matmul(h, w_hh) + b_hh)
    ifo = sigmoid(gates[..., : 3 * H])
    c = ifo[..., H : 2 * H] * c + ifo[..., :H] * np.tanh(gates[..., 3 * H :])
    h = ifo[..., 2 * H :] * np.tanh(c)
    return h, np.concatenate([h, c], axis=-1)


class ActorCriticPass(NumpyPass):
    kind = "actor_critic"

    @property
    def state_size(self) -> int:
        if self.core is None:
            return 0
        H = self.core[2].shape[0]
        return 2 * H if self.core_kind == "lstm" else H

    def load_state(self, state: State) -> None:
        """Copy the weights (call after every pull)."""
        d = self.description
        if "obs_normalizer.mean" in state:
            self.obs_mean = f32(state["obs_normalizer.mean"])
            var = np.asarray(state["obs_normalizer.var"], dtype=np.float64)
            self.obs_std = np.sqrt(var + d["obs_epsilon"]).astype(np.float32)
            self.obs_clip = d["obs_clip"]
        else:
            self.obs_mean = self.obs_std = self.obs_clip = None
        # An image or Dict model's encoder (the value trunk's too, when it has its own): its features come from it.
        spec = d.get("encoder")
        # (A Dict encoder normalises its vector keys with the model's statistics; convnets ignore `normalize`.)
        normalize = self.normalize if self.obs_mean is not None else None
        self.trunk = encoder_pass(state, "encoder", spec, normalize) if spec else None
        separate = any(k.startswith("value_encoder.") for k in state)
        self.value_trunk = encoder_pass(state, "value_encoder", spec, normalize) if spec and separate else None
        self.layers = mlp(state, "encoder", d["activation"]) if self.trunk is None else []
        # None without a core; else "gru" or "lstm" and the cell's weights (see core_weights).
        self.core_kind = d["core"]
        self.core = core_weights(state, self.core_kind) if self.core_kind is not None else None
        # Empty for the shared trunk: the value head then reads the policy's features.
        self.value_layers = mlp(state, "value_encoder", d["activation"]) if self.trunk is None else []
        self.separate_value_trunk = bool(self.value_layers) or self.value_trunk is not None
        self.policy_w, self.policy_b = f32(state["policy_head.weight"]).T.copy(), f32(state["policy_head.bias"])
        if "value_head.weight" in state:
            self.value_w, self.value_b = f32(state["value_head.weight"])[0].copy(), float(state["value_head.bias"][0])
        else:  # a centralised value (--value_input): the learner's alone; acting gives zero values
            self.value_w, self.value_b = np.zeros(self.policy_w.shape[0], dtype=np.float32), 0.0
        self.is_discrete = "log_std" not in state
        if not self.is_discrete:
            self.log_std = f32(state["log_std"])
            self.std = np.exp(self.log_std)
            self.log_prob_const = gaussian_log_prob_const(self.log_std)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """x [B, D] float32 standardised with the model's running statistics (`--normalize_input`), clipped."""
        x = (x - self.obs_mean.reshape(-1)) / self.obs_std.reshape(-1)
        return np.clip(x, -self.obs_clip, self.obs_clip) if self.obs_clip is not None else x

    def act(self, obs: np.ndarray, rnn_states: np.ndarray | None = None, deterministic: bool = False) -> NumpyActOutput:
        """`ActorCritic.act` for B envs: obs [B, *obs_shape], rnn_states [B, S] (the states before this step;
        required with a core, ignored and passed through without one). `deterministic` takes the mode (the mean,
        or the most likely action) instead of a sample. See NumpyActOutput for what comes back."""
        if self.trunk is not None:
            h = self.trunk(obs)
        else:
            x = obs.reshape(len(obs), -1).astype(np.float32, copy=False)
            if self.obs_mean is not None:
                x = self.normalize(x)
            h = run_layers(self.layers, x)
        value_features = h
        if self.separate_value_trunk:  # (never with a core)
            value_features = self.value_trunk(obs) if self.value_trunk is not None else run_layers(self.value_layers, x)
        if self.core is not None:
            if rnn_states is None:
                raise ValueError("ActorCriticPass.act: a recurrent model needs rnn_states")
            h, rnn_states = core_step(self.core_kind, h, rnn_states.astype(np.float32, copy=False), *self.core)
            value_features = h
        params = h @ self.policy_w + self.policy_b
        values = value_features @ self.value_w + self.value_b
        if self.is_discrete:
            return NumpyActOutput(*sample(self.rng, params, values, None, 0.0, deterministic), rnn_states)
        return NumpyActOutput(
            *sample(self.rng, params, values, self.std, self.log_prob_const, deterministic), rnn_states
        )


class NumpyPolicyStack:
    """Several policies of one architecture (a population) acting in one pass: each env's observation and
    recurrent state go through its own policy's weights. Envs are laid out as [policy, row] with zero rows for
    padding, so every layer (and the recurrent cell's matmuls) is one batched matmul over the stacked weights
    instead of one small forward pass per policy present in the batch. Call `restack` after any member's weights
    changed.

    Members are ActorCriticPass instances; `restack` checks that they share one architecture (layer shapes,
    activations, normalisation, recurrent cell, value trunk, action type), since the stacked pass applies the
    first member's structure to all of them and would otherwise compute something else for the others.
    ValueError when they do not."""

    def __init__(self, members: list[ActorCriticPass], seed: int) -> None:
        if not members or not all(isinstance(m, ActorCriticPass) for m in members):
            raise ValueError("NumpyPolicyStack needs one or more ActorCriticPass members")
        self.members = members
        self.rng = np.random.default_rng(seed)
        self.restack()

    def restack(self) -> None:
        ms = self.members
        first = ms[0]
        signature = _architecture(first)
        for k, m in enumerate(ms[1:], start=1):
            if _architecture(m) != signature:
                raise ValueError(f"NumpyPolicyStack: member {k} has another architecture than member 0")
        self.normalized = first.obs_mean is not None
        if self.normalized:
            self.obs_mean = np.stack([m.obs_mean.reshape(-1) for m in ms])
            self.obs_std = np.stack([m.obs_std.reshape(-1) for m in ms])
            self.obs_clip = first.obs_clip
        self.trunks = first.trunk is not None  # convnets, Dict encoders: each member's own pass (`_member_features`)
        self.layers = _stack_layers([m.layers for m in ms])
        self.core_kind = first.core_kind
        if self.core_kind is not None:
            w_ih, b_ih, w_hh, b_hh = (np.stack(part) for part in zip(*(m.core for m in ms), strict=True))
            # w_ih [K, F, G], b_ih [K, 1, G], w_hh [K, H, G], b_hh [K, 1, G]
            self.core = (w_ih, b_ih[:, None, :], w_hh, b_hh[:, None, :])
        self.separate_value_trunk = first.separate_value_trunk
        if self.separate_value_trunk:
            self.value_layers = _stack_layers([m.value_layers for m in ms])
            self.head_w = np.stack([m.policy_w for m in ms])  # [K, F, P]
            self.head_b = np.stack([m.policy_b for m in ms])[:, None, :]  # [K, 1, P]
            self.value_w = np.stack([m.value_w for m in ms])[:, :, None]  # [K, F, 1]
            self.value_b = np.array([m.value_b for m in ms], dtype=np.float32)[:, None, None]  # [K, 1, 1]
        else:
            # Policy and value heads as one matmul: the last column is the value.
            self.head_w = np.stack([np.concatenate([m.policy_w, m.value_w[:, None]], axis=1) for m in ms])
            self.head_b = np.stack([np.append(m.policy_b, np.float32(m.value_b)) for m in ms])[:, None, :]
        self.is_discrete = first.is_discrete
        if not self.is_discrete:
            self.std = np.stack([m.std for m in ms])
            self.log_prob_const = np.array([m.log_prob_const for m in ms])

    def act(
        self,
        obs: np.ndarray,
        owner: np.ndarray,
        rnn_states: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> NumpyActOutput:
        """As ActorCriticPass.act, env i acting with member owner[i] (owner [B] int): obs [B, *obs_shape],
        rnn_states [B, S] or None as there."""
        n, k = len(obs), len(self.members)
        counts = np.bincount(owner, minlength=k)
        if counts.max() == n:  # one policy: the plain pass
            return self.members[int(owner[0])].act(obs, rnn_states, deterministic)
        rows = int(counts.max())
        order = np.argsort(owner, kind="stable")
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n) - (np.cumsum(counts) - counts)[owner[order]]
        pos = owner * rows + rank
        if self.trunks:
            # Each member's convnets on its own envs (a convnet's cost is in its many rows, not in the calls).
            h = self._member_features(obs, owner, pos, k * rows, "trunk").reshape(k, rows, -1)
        else:
            x = obs.reshape(n, -1).astype(np.float32, copy=False)
            if self.normalized:
                x = (x - self.obs_mean[owner]) / self.obs_std[owner]
                if self.obs_clip is not None:
                    x = np.clip(x, -self.obs_clip, self.obs_clip)
            padded = np.zeros((k * rows, x.shape[1]), dtype=np.float32)
            padded[pos] = x
            padded = padded.reshape(k, rows, -1)
            h = run_layers(self.layers, padded)
        if self.core_kind is not None:
            if rnn_states is None:
                raise ValueError("NumpyPolicyStack.act: a recurrent model needs rnn_states")
            # Zero states in the padding rows: they are computed and dropped, like their observations.
            state = np.zeros((k * rows, rnn_states.shape[1]), dtype=np.float32)
            state[pos] = rnn_states
            h, state = core_step(self.core_kind, h, state.reshape(k, rows, -1), *self.core)
            rnn_states = state.reshape(k * rows, -1)[pos]
        out = (np.matmul(h, self.head_w) + self.head_b).reshape(k * rows, -1)[pos]
        if self.separate_value_trunk:
            params = out
            if self.trunks:
                trunk = self._member_features(obs, owner, pos, k * rows, "value_trunk").reshape(k, rows, -1)
            else:
                trunk = run_layers(self.value_layers, padded)
            values = (np.matmul(trunk, self.value_w) + self.value_b).reshape(-1)[pos]
        else:
            params, values = out[:, :-1], out[:, -1]
        if self.is_discrete:
            return NumpyActOutput(*sample(self.rng, params, values, None, 0.0, deterministic), rnn_states)
        sampled = sample(self.rng, params, values, self.std[owner], self.log_prob_const[owner], deterministic)
        return NumpyActOutput(*sampled, rnn_states)

    def _member_features(self, obs: np.ndarray, owner: np.ndarray, pos: np.ndarray, size: int, name: str) -> np.ndarray:
        """The features [size, F] of each env's observation through its member's encoder pass `name` ("trunk" or
        "value_trunk": a convnet or a Dict encoder), at the env's row `pos` of the [policy, row] layout; zeros in
        the padding rows."""
        out: np.ndarray | None = None
        for member in np.unique(owner):
            rows = owner == member
            features = getattr(self.members[int(member)], name)(obs[rows])
            if out is None:
                out = np.zeros((size, features.shape[1]), dtype=np.float32)
            out[pos[rows]] = features
        return out


def _architecture(m: ActorCriticPass) -> tuple[Any, ...]:
    """What must agree between members of a stack: everything but the weights' values."""

    def shapes(layers: list[Layer]) -> list[tuple[Any, ...]]:
        return [(w.shape, activation) for w, _, activation in layers]

    return (
        m.obs_mean is not None,
        m.obs_clip,
        None if m.obs_mean is None else m.obs_mean.size,
        m.description.get("encoder"),
        shapes(m.layers),
        m.core_kind,
        None if m.core is None else [w.shape for w in m.core],
        m.separate_value_trunk,
        shapes(m.value_layers),
        m.policy_w.shape,
        m.is_discrete,
    )


def _stack_layers(per_member: list[list[Layer]]) -> list[Layer]:
    """One MLP's layers of K members as stacked weights [K, in, out], biases [K, 1, out] and the activation."""
    stacked = []
    for i, (_, _, activation) in enumerate(per_member[0]):
        w = np.stack([layers[i][0] for layers in per_member])
        b = np.stack([layers[i][1] for layers in per_member])[:, None, :]
        stacked.append((w, b, activation))
    return stacked
