"""The actor-critic's `act` in numpy, for policy workers and acting actor workers on the CPU.

For the few envs of one request batch, torch's per-operator dispatch dominates a forward pass of a small MLP
(about 200 us for 8 HalfCheetah envs here, against about 50 us for the same arithmetic in numpy). This is the
same function of the same weights, re-read after every weight pull: observation normaliser (clipped),
MLP encoder, optional GRU or LSTM cell (torch's `GRUCell` / `LSTMCell` equations, state laid out as in
`ActorCritic.core_step`: h for a GRU, concat([h, c]) for an LSTM), Gaussian (state-independent log-std) or
categorical head, value head (on the policy's features, or on its own MLP trunk with `--separate_value_trunk`).
Sampling uses its own seeded numpy generator. The caller keeps the recurrent state (the shared `rnn_states`
buffer) and resets it at episode ends, as for the torch path.

Only exactly `ActorCritic` with exactly a `GRUCell` or `LSTMCell` core (or none) is supported
(`NumpyPolicy.supports`): a subclass or another registered model may compute anything, and running it as this
network would act with a different policy than the one being trained without any error. SAC's
`SquashedGaussianActor` has its own numpy pass (`NumpySquashedGaussian`), and so do MAML's `MamlPolicy`
(`NumpyGaussianMlp`) and UDRL's and RCP's `CommandPolicy` (`NumpyCommandPolicy`); `make_numpy_policy` picks the one
that fits. Other models and GPU policy workers keep the torch path.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from appo.model import ActorCritic
from appo.squashed_gaussian import LOG_STD_MAX, LOG_STD_MIN, TANH_EPS, SquashedGaussianActor

HALF_LOG_2PI = 0.5 * float(np.log(2.0 * np.pi))
_ACTIVATIONS = {
    torch.nn.Tanh: np.tanh,
    torch.nn.ReLU: lambda x: np.maximum(x, 0.0),
    torch.nn.ELU: lambda x: np.where(x > 0.0, x, np.expm1(np.minimum(x, 0.0))),
}


# The recurrent cells the numpy pass computes, by the name `_core_step` knows them under.
_CORES: dict[type[torch.nn.Module], str] = {torch.nn.GRUCell: "gru", torch.nn.LSTMCell: "lstm"}


class NumpyActOutput(NamedTuple):
    """What `NumpyPolicy.act` returns: `ActOutput` of the torch model, in numpy."""

    actions: np.ndarray  # [B, A] float32 (Box) or [B, 1] int64 (Discrete)
    log_probs: np.ndarray  # [B] float32
    values: np.ndarray  # [B] float32, normalised units
    rnn_states: np.ndarray | None  # [B, S] float32, the states after this step (without a core: those given)


def _f32(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function of float32 x, elementwise. 1 / (1 + exp(-x)) overflows (with a warning) below about -88;
    this identity is the same function, bounded everywhere, and within 1e-7 of it in absolute terms."""
    return 0.5 * np.tanh(0.5 * x) + 0.5


def _mlp_unsupported(mlp: torch.nn.Module | None, name: str) -> str | None:
    """Why `mlp` is not a plain alternation of Linear and an activation known here, or None when it is."""
    modules = list(mlp) if isinstance(mlp, torch.nn.Sequential) else None
    if modules is None or len(modules) % 2:
        return f"{name} is not a Sequential of Linear + activation pairs"
    for linear, activation in zip(modules[::2], modules[1::2], strict=True):
        if type(linear) is not torch.nn.Linear or linear.bias is None or type(activation) not in _ACTIVATIONS:
            return f"{name} has {type(linear).__name__} + {type(activation).__name__}, not Linear + a known activation"
    return None


def _model_unsupported(model: torch.nn.Module) -> str | None:
    """Why the numpy pass cannot compute `model`'s `act`, or None when it can. Device aside (see `supports`)."""
    if type(model) is not ActorCritic:
        # Exactly the class: a subclass may override any piece of the forward pass.
        return f"{type(model).__qualname__} is not ActorCritic"
    core = model.core
    if core is not None:
        kind = _CORES.get(type(core))  # exactly the class, as for the model
        if kind is None:
            return f"the recurrent core is {type(core).__qualname__}, not GRUCell or LSTMCell"
        if not core.bias:
            return "the recurrent core has no biases"
        if (kind == "lstm") != (model.rnn_type == "lstm"):
            # core_step splits the state into (h, c) by rnn_type, not by the cell's class.
            return f"the core is {type(core).__qualname__} but rnn_type is {model.rnn_type!r}"
    return _mlp_unsupported(model.encoder, "the encoder") or (
        _mlp_unsupported(model.value_encoder, "the value trunk") if model.value_encoder is not None else None
    )


def _mlp_layers(mlp: torch.nn.Sequential) -> list[tuple[np.ndarray, np.ndarray, Any]]:
    """(weight [in, out], bias [out], activation) per Linear + activation pair of a supported MLP."""
    modules = list(mlp)
    return [
        (_f32(linear.weight).T.copy(), _f32(linear.bias), _ACTIVATIONS[type(activation)])
        for linear, activation in zip(modules[::2], modules[1::2], strict=True)
    ]


def _run(layers: list[tuple[np.ndarray, np.ndarray, Any]], x: np.ndarray) -> np.ndarray:
    """An MLP's layers applied to x [..., in] (weights [in, out] or stacked [K, in, out] against x [K, rows, in]); a
    layer whose activation is None is linear."""
    for w, b, activation in layers:
        x = np.matmul(x, w) + b
        if activation is not None:
            x = activation(x)
    return x


def _core_weights(core: torch.nn.Module) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A supported cell's (w_ih [F, G], b_ih [G], w_hh [H, G], b_hh [G]), G = 3H (GRU: r, z, n as torch has
    them) or 4H (LSTM: torch's i, f, g, o reordered to i, f, o, g so that one sigmoid covers three gates)."""
    w_ih, b_ih, w_hh, b_hh = (_f32(p) for p in (core.weight_ih, core.bias_ih, core.weight_hh, core.bias_hh))
    if type(core) is torch.nn.LSTMCell:
        H = core.hidden_size
        order = np.concatenate([np.arange(0, 2 * H), np.arange(3 * H, 4 * H), np.arange(2 * H, 3 * H)])
        w_ih, b_ih, w_hh, b_hh = w_ih[order], b_ih[order], w_hh[order], b_hh[order]
    return w_ih.T.copy(), b_ih, w_hh.T.copy(), b_hh


def _core_step(
    kind: str, x: np.ndarray, state: np.ndarray, w_ih: np.ndarray, b_ih: np.ndarray, w_hh: np.ndarray, b_hh: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One step of the cell `kind` ("gru" or "lstm"): x [..., F] and state [..., S] (S = H, or 2H for the LSTM's
    concat([h, c])) -> (features h' [..., H], next state [..., S]). Weights as `_core_weights` gives them, or stacked
    [K, F, G] / [K, 1, G] against x [K, rows, F]. Each step is written as torch's CPU cell computes it, so that the
    float32 results agree to rounding."""
    H = w_hh.shape[-2]
    if kind == "gru":
        gi = np.matmul(x, w_ih) + b_ih
        gh = np.matmul(state, w_hh) + b_hh
        rz = _sigmoid(gi[..., : 2 * H] + gh[..., : 2 * H])
        n = np.tanh(gi[..., 2 * H :] + rz[..., :H] * gh[..., 2 * H :])
        h = n + rz[..., H:] * (state - n)  # = (1 - z) * n + z * h
        return h, h
    h, c = state[..., :H], state[..., H:]
    gates = (np.matmul(x, w_ih) + b_ih) + (np.matmul(h, w_hh) + b_hh)
    ifo = _sigmoid(gates[..., : 3 * H])
    c = ifo[..., H : 2 * H] * c + ifo[..., :H] * np.tanh(gates[..., 3 * H :])
    h = ifo[..., 2 * H :] * np.tanh(c)
    return h, np.concatenate([h, c], axis=-1)


class NumpyPolicy:
    def __init__(self, model: ActorCritic, seed: int) -> None:
        """Raises ValueError for a model that `supports` rejects (device aside)."""
        self.rng = np.random.default_rng(seed)
        self.load(model)

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        """Whether the policy worker on `device` should act with this numpy pass for `model`: exactly an
        `ActorCritic` (not a subclass), with exactly a GRUCell or LSTMCell core or none, with MLPs of known
        activations, on the CPU."""
        return torch.device(device).type == "cpu" and _model_unsupported(model) is None

    def load(self, model: ActorCritic) -> None:
        """Copy the weights (call after every pull). ValueError for a model the numpy pass does not compute."""
        reason = _model_unsupported(model)
        if reason is not None:
            raise ValueError(f"NumpyPolicy cannot run this model: {reason}")
        norm = model.obs_normalizer
        self.obs_mean = _f32(norm.mean) if norm is not None else None
        self.obs_std = np.sqrt(norm.var.double().numpy() + norm.epsilon).astype(np.float32) if norm else None
        self.obs_clip = norm.clip if norm is not None else None
        self.layers = _mlp_layers(model.encoder)
        # None without a core; else "gru" or "lstm" and the cell's weights (see _core_weights).
        self.core_kind = _CORES[type(model.core)] if model.core is not None else None
        self.core = _core_weights(model.core) if model.core is not None else None
        # Empty for the shared trunk: the value head then reads the policy's features.
        self.value_layers = _mlp_layers(model.value_encoder) if model.value_encoder is not None else []
        self.separate_value_trunk = model.value_encoder is not None
        self.policy_w, self.policy_b = _f32(model.policy_head.weight).T.copy(), _f32(model.policy_head.bias)
        self.value_w, self.value_b = _f32(model.value_head.weight)[0].copy(), float(model.value_head.bias.detach()[0])
        self.is_discrete = model.is_discrete
        if not self.is_discrete:
            self.log_std = _f32(model.log_std)
            self.std = np.exp(self.log_std)
            self.log_prob_const = float(self.log_std.sum()) + HALF_LOG_2PI * self.log_std.size

    def act(self, obs: np.ndarray, rnn_states: np.ndarray | None = None, deterministic: bool = False) -> NumpyActOutput:
        """`ActorCritic.act` for B envs: obs [B, *obs_shape], rnn_states [B, S] (the states before this step;
        required with a core, ignored and passed through without one). `deterministic` takes the mode (the mean,
        or the most likely action) instead of a sample. See NumpyActOutput for what comes back."""
        x = obs.reshape(len(obs), -1).astype(np.float32, copy=False)
        if self.obs_mean is not None:
            x = (x - self.obs_mean.reshape(-1)) / self.obs_std.reshape(-1)
            if self.obs_clip is not None:
                x = np.clip(x, -self.obs_clip, self.obs_clip)
        h = _run(self.layers, x)
        if self.core is not None:
            if rnn_states is None:
                raise ValueError("NumpyPolicy.act: a recurrent model needs rnn_states")
            h, rnn_states = _core_step(self.core_kind, h, rnn_states.astype(np.float32, copy=False), *self.core)
        params = h @ self.policy_w + self.policy_b
        values = (_run(self.value_layers, x) if self.separate_value_trunk else h) @ self.value_w + self.value_b
        if self.is_discrete:
            return NumpyActOutput(*_sample(self.rng, params, values, None, 0.0, deterministic), rnn_states)
        return NumpyActOutput(
            *_sample(self.rng, params, values, self.std, self.log_prob_const, deterministic), rnn_states
        )


class NumpyPolicyStack:
    """Several policies of one architecture (a population) acting in one pass: each env's observation and
    recurrent state go through its own policy's weights. Envs are laid out as [policy, row] with zero rows for
    padding, so every layer (and the recurrent cell's matmuls) is one batched matmul over the stacked weights
    instead of one small forward pass per policy present in the batch. Call `restack` after any member's weights
    changed.

    Members are NumpyPolicy instances, so each one's model was checked when it loaded; `restack` checks besides
    that they share one architecture (layer shapes, activations, normalisation, recurrent cell, value trunk,
    action type), since the stacked pass applies the first member's structure to all of them and would otherwise
    compute something else for the others. ValueError when they do not."""

    def __init__(self, members: list[NumpyPolicy], seed: int) -> None:
        if not members or not all(type(m) is NumpyPolicy for m in members):
            raise ValueError("NumpyPolicyStack needs one or more NumpyPolicy members")
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
        """As NumpyPolicy.act, env i acting with member owner[i] (owner [B] int): obs [B, *obs_shape],
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
        x = obs.reshape(n, -1).astype(np.float32, copy=False)
        if self.normalized:
            x = (x - self.obs_mean[owner]) / self.obs_std[owner]
            if self.obs_clip is not None:
                x = np.clip(x, -self.obs_clip, self.obs_clip)
        padded = np.zeros((k * rows, x.shape[1]), dtype=np.float32)
        padded[pos] = x
        padded = padded.reshape(k, rows, -1)
        h = _run(self.layers, padded)
        if self.core_kind is not None:
            if rnn_states is None:
                raise ValueError("NumpyPolicyStack.act: a recurrent model needs rnn_states")
            # Zero states in the padding rows: they are computed and dropped, like their observations.
            state = np.zeros((k * rows, rnn_states.shape[1]), dtype=np.float32)
            state[pos] = rnn_states
            h, state = _core_step(self.core_kind, h, state.reshape(k, rows, -1), *self.core)
            rnn_states = state.reshape(k * rows, -1)[pos]
        out = (np.matmul(h, self.head_w) + self.head_b).reshape(k * rows, -1)[pos]
        if self.separate_value_trunk:
            params = out
            values = (np.matmul(_run(self.value_layers, padded), self.value_w) + self.value_b).reshape(-1)[pos]
        else:
            params, values = out[:, :-1], out[:, -1]
        if self.is_discrete:
            return NumpyActOutput(*_sample(self.rng, params, values, None, 0.0, deterministic), rnn_states)
        sampled = _sample(self.rng, params, values, self.std[owner], self.log_prob_const[owner], deterministic)
        return NumpyActOutput(*sampled, rnn_states)


def _architecture(m: NumpyPolicy) -> tuple[Any, ...]:
    """What must agree between members of a stack: everything but the weights' values."""

    def mlp(layers: list[tuple[np.ndarray, np.ndarray, Any]]) -> list[tuple[Any, ...]]:
        return [(w.shape, activation) for w, _, activation in layers]

    return (
        m.obs_mean is not None,
        m.obs_clip,
        None if m.obs_mean is None else m.obs_mean.size,
        mlp(m.layers),
        m.core_kind,
        None if m.core is None else [w.shape for w in m.core],
        m.separate_value_trunk,
        mlp(m.value_layers),
        m.policy_w.shape,
        m.is_discrete,
    )


def _stack_layers(
    per_member: list[list[tuple[np.ndarray, np.ndarray, Any]]],
) -> list[tuple[np.ndarray, np.ndarray, Any]]:
    """One MLP's layers of K members as stacked weights [K, in, out], biases [K, 1, out] and the activation."""
    stacked = []
    for i, (_, _, activation) in enumerate(per_member[0]):
        w = np.stack([layers[i][0] for layers in per_member])
        b = np.stack([layers[i][1] for layers in per_member])[:, None, :]
        stacked.append((w, b, activation))
    return stacked


def _sample(
    rng: np.random.Generator,
    params: np.ndarray,
    values: np.ndarray,
    std: np.ndarray | None,
    log_prob_const: Any,
    deterministic: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(actions, log-probs [B], values [B]) from the head's output params [B, P]: Gaussian around `params` with
    `std` (per env [B, P] or shared [P]), or categorical over logits `params` when `std` is None (Gumbel-max).
    `deterministic`: the mode (the mean, the most likely action), with no draw from `rng`."""
    if std is None:
        logits = params - params.max(axis=-1, keepdims=True)
        logits = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        if deterministic:
            actions = logits.argmax(axis=-1)
        else:
            gumbel = -np.log(np.maximum(rng.standard_exponential(logits.shape, dtype=np.float32), 1e-38))
            actions = (logits + gumbel).argmax(axis=-1)
        log_probs = np.take_along_axis(logits, actions[:, None], axis=-1)[:, 0]
        return actions[:, None].astype(np.int64), log_probs.astype(np.float32), values.astype(np.float32)
    if deterministic:
        noise = np.zeros(params.shape, dtype=np.float32)
    else:
        noise = rng.standard_normal(params.shape, dtype=np.float32)
    actions = params + std * noise
    log_probs = -0.5 * np.square(noise).sum(axis=-1) - log_prob_const
    return actions.astype(np.float32), log_probs.astype(np.float32), values.astype(np.float32)


class _NumpyPass:
    """A numpy pass of one model class (below): its own seeded generator for sampling, the weights copied by `load`
    (again after every pull)."""

    def __init__(self, model: torch.nn.Module, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.load(model)

    def load(self, model: torch.nn.Module) -> None:
        raise NotImplementedError


def _on_cpu_exactly(model: torch.nn.Module, device: str | torch.device, cls: type) -> bool:
    """Whether `model` is exactly a `cls` (a subclass may compute anything) and acts on the CPU."""
    return torch.device(device).type == "cpu" and type(model) is cls


class NumpySquashedGaussian(_NumpyPass):
    """`SquashedGaussianActor.act` in numpy (SAC's actor): relu trunk, mean and log-std heads (the log-std squashed
    into its range as in torch), a = tanh(mean + std * noise) scaled to the env's box, with the tanh-corrected
    log-prob. Uniform random actions while the weights have had no update (`updates == 0`: the warm-up of
    --learning_starts); deterministic acting is tanh(mean). Same interface as NumpyPolicy."""

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        return _on_cpu_exactly(model, device, SquashedGaussianActor) and _mlp_unsupported(model.trunk, "") is None

    def load(self, model: SquashedGaussianActor) -> None:
        """Copy the weights (call after every pull)."""
        if not self.supports(model, "cpu"):
            raise ValueError(f"NumpySquashedGaussian cannot run {type(model).__qualname__}")
        self.layers = _mlp_layers(model.trunk)
        # Both heads as one matmul: [mean | raw log-std].
        self.head_w = np.concatenate([_f32(model.mean_head.weight).T, _f32(model.log_std_head.weight).T], axis=1)
        self.head_b = np.concatenate([_f32(model.mean_head.bias), _f32(model.log_std_head.bias)])
        self.scale, self.bias = _f32(model.action_scale), _f32(model.action_bias)
        self.is_warmup = int(model.updates) == 0

    def act(self, obs: np.ndarray, rnn_states: np.ndarray | None = None, deterministic: bool = False) -> NumpyActOutput:
        """Env-scale actions [B, A], log-probs of their [-1, 1] form [B], zero values, `rnn_states` passed through."""
        x = _run(self.layers, obs.reshape(len(obs), -1).astype(np.float32, copy=False))
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
            gaussian = (-0.5 * np.square(noise) - log_std - HALF_LOG_2PI).sum(-1)
            log_det = np.log(1.0 - np.square(a) + TANH_EPS).sum(-1)
            log_probs = gaussian - log_det
        actions = (a * self.scale + self.bias).astype(np.float32)
        return NumpyActOutput(actions, log_probs.astype(np.float32), np.zeros(len(obs), np.float32), rnn_states)


class NumpyGaussianMlp(_NumpyPass):
    """MAML's policy (appo/algorithms/maml.py `MamlPolicy`) in numpy: mean = MLP(obs), state-independent std, and
    a = mean + std * noise, the noise given (an episodic run's `action_noise`: the same episode wherever it runs) or
    drawn from its own generator. The arithmetic is fixed (contiguous float32 rows, x @ W.T + b per layer), so a
    row's actions depend only on that row and on the shape of the batch it is computed in."""

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        from appo.algorithms.maml import MamlPolicy

        if not _on_cpu_exactly(model, device, MamlPolicy):
            return False
        modules = list(model.mlp)
        return _mlp_unsupported(torch.nn.Sequential(*modules[:-1]), "") is None and type(modules[-1]) is torch.nn.Linear

    def load(self, model: torch.nn.Module) -> None:
        """Copy the weights (call after every pull)."""
        if not self.supports(model, "cpu"):
            raise ValueError(f"NumpyGaussianMlp cannot run {type(model).__qualname__}")
        modules = list(model.mlp)
        self.layers = [
            (_f32(m.weight).T.copy(), _f32(m.bias), _ACTIVATIONS[type(a)] if a is not None else None)
            for m, a in zip(modules[::2], [*modules[1::2], None], strict=True)
        ]
        self.log_std = _f32(model.log_std)
        self.std = np.exp(self.log_std)

    def mean(self, obs: np.ndarray) -> np.ndarray:
        return _run(self.layers, np.ascontiguousarray(obs, dtype=np.float32))

    def act(
        self,
        obs: np.ndarray,
        rnn_states: np.ndarray | None = None,
        deterministic: bool = False,
        noise: np.ndarray | None = None,
    ) -> NumpyActOutput:
        """Actions [B, A] as sampled (the env runner clips what the env sees), their log-probs, zero values."""
        mean = self.mean(obs)
        if deterministic:
            return NumpyActOutput(mean, np.zeros(len(obs), np.float32), np.zeros(len(obs), np.float32), rnn_states)
        if noise is None:
            noise = self.rng.standard_normal(mean.shape, dtype=np.float32)
        actions = (mean + self.std * noise).astype(np.float32)
        log_probs = (-0.5 * np.square(noise) - self.log_std - HALF_LOG_2PI).sum(-1).astype(np.float32)
        return NumpyActOutput(actions, log_probs, np.zeros(len(obs), np.float32), rnn_states)


class NumpyCommandPolicy(_NumpyPass):
    """`CommandPolicy.act` in numpy (UDRL's and RCP's behaviour function, appo/command_policy.py): the state's layer
    (tanh or sigmoid) gated by the sigmoid of the command's, the relu trunk, a categorical or a Gaussian head with a
    state-independent log-std; uniformly random actions while the weights have had no update (the warm-up: bounded
    Box dims uniform in the box, unbounded ones N(0, 1), zero log-probs; Discrete uniform, log-prob -log n); the
    mode when deterministic. Same interface as NumpyPolicy."""

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        from appo.command_policy import CommandPolicy

        if not _on_cpu_exactly(model, device, CommandPolicy):
            return False
        return len(model.trunk) == 0 or _mlp_unsupported(model.trunk, "the trunk") is None

    def load(self, model: torch.nn.Module) -> None:
        """Copy the weights (call after every pull)."""
        if not self.supports(model, "cpu"):
            raise ValueError(f"NumpyCommandPolicy cannot run {type(model).__qualname__}")
        self.state_dims = model.state_dims
        self.state_layer = [(_f32(model.state_layer.weight).T.copy(), _f32(model.state_layer.bias), None)]
        self.command_layer = [(_f32(model.command_layer.weight).T.copy(), _f32(model.command_layer.bias), None)]
        self.state_activation = np.tanh if model.state_activation is torch.tanh else _sigmoid
        self.trunk = _mlp_layers(model.trunk) if len(model.trunk) else []
        self.head = [(_f32(model.head.weight).T.copy(), _f32(model.head.bias), None)]
        self.is_discrete = model.is_discrete
        self.is_warmup = int(model.updates) == 0
        if self.is_discrete:
            self.num_actions = model.num_actions
        else:
            self.log_std = _f32(model.log_std)
            self.std = np.exp(self.log_std)
            self.log_prob_const = float(self.log_std.sum()) + HALF_LOG_2PI * self.log_std.size
            self.low, self.high = _f32(model.low), _f32(model.high)

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
        h = self.state_activation(_run(self.state_layer, state)) * _sigmoid(_run(self.command_layer, command))
        params = _run(self.head, _run(self.trunk, h))
        std = None if self.is_discrete else self.std
        const = 0.0 if self.is_discrete else self.log_prob_const
        return NumpyActOutput(*_sample(self.rng, params, zeros, std, const, deterministic), rnn_states)


FastPolicy = NumpyPolicy | NumpySquashedGaussian | NumpyGaussianMlp | NumpyCommandPolicy


def make_numpy_policy(model: torch.nn.Module, device: str | torch.device, seed: int) -> FastPolicy | None:
    """The numpy pass that computes `model`'s act on `device`, or None (then the torch path acts)."""
    for cls in (NumpyPolicy, NumpySquashedGaussian, NumpyGaussianMlp, NumpyCommandPolicy):
        if cls.supports(model, device):
            return cls(model, seed)  # type: ignore[arg-type]
    return None
