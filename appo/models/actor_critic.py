"""The actor-critic: observation normaliser -> encoder -> optional GRU/LSTM core -> policy and value heads
(optionally the value head reads its own trunk, `--separate_value_trunk`). The encoder is chosen by the observation
space and `--encoder` (appo/models/encoders.py): an MLP for vectors, a convnet for images (then no normaliser: the
encoder scales uint8 pixels itself; with the separate trunk the value head gets its own convnet of the same kind),
a multi-input encoder for Dict spaces, which `act` and `forward` then take as dicts of tensors. A centralised value
(--value_input=team|state, multi-agent runs: envs/multi_agent/team_value.py) is an MLP of its own over the team input
that the learner passes beside the observations (`team`); the model then has no value head on the policy's side, so
acting (policy workers, the numpy twin, exports) computes no value (zeros) and carries only the policy. Policy workers
call `act` on one step of many envs; the learner calls the module itself (`forward`) on whole
trajectories, so DDP's hooks and `torch.func.functional_call` see the whole computation. The return
normaliser lives here too, so weights, normalisers and all travel together (to policy workers through
appo.protocol.param_sync, to disk through appo.learning.checkpoint).

Registered as model kind "actor_critic" (appo/models/registry.py); its numpy twin: appo/models/numpy_twins.py."""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from appo.config.cfg import Cfg
from appo.config.trunk import value_trunk_errors
from appo.envs.common.packed_obs import PackedObsSpace
from appo.envs.multi_agent.team_value import team_space_of
from appo.models.distributions import Categorical, DiagGaussian
from appo.models.encoders import (
    ImageEncoder,
    MultiInputEncoder,
    build_mlp,
    encoder_kind,
    make_encoder,
    unpack_obs,
)
from appo.models.normalize import RunningMeanStd
from appo.models.registry import register_model

__all__ = ["ActOutput", "ActorCritic", "EvalOutput", "build_mlp"]  # build_mlp: its old home, for other models
Obs = Tensor | dict[str, Tensor]  # a Dict observation space's observations come as a dict of tensors


class ActOutput(NamedTuple):
    actions: Tensor  # [B, A] float (Box) or [B, 1] int64 (Discrete)
    log_probs: Tensor  # [B]
    values: Tensor  # [B], normalised units
    rnn_states: Tensor  # [B, H], the state after this step


class EvalOutput(NamedTuple):
    log_probs: Tensor  # [N, T]
    entropy: Tensor  # [N, T]
    values: Tensor  # [N, T], normalised units
    dist: DiagGaussian | Categorical  # over the N * T steps, flattened


@register_model("actor_critic")
class ActorCritic(nn.Module):
    def __init__(self, cfg: Cfg, obs_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        if errors := value_trunk_errors(cfg):
            raise ValueError(errors[0])
        self.team_space = team_space_of(obs_space)  # a centralised value's input (None: the value is local)
        self.is_discrete = isinstance(action_space, gym.spaces.Discrete)
        self.use_rnn = cfg.use_rnn
        self.rnn_type = cfg.rnn_type
        # Dict observations come packed into one uint8 array (appo/envs/packed_obs.py): the encoders are those of
        # the Dict space, and `encoder_input` unpacks what they read.
        self.packed_layout = obs_space.layout if isinstance(obs_space, PackedObsSpace) else None
        if self.packed_layout is not None:
            obs_space = obs_space.dict_space
        # "mlp", an image encoder's name or "dict" (appo/models/encoders.py); only the MLP reads normalised input.
        self.encoder_kind = encoder_kind(cfg, obs_space)
        flat = self.encoder_kind == "mlp"
        if cfg.separate_value_trunk and cfg.value_mlp_layers and not flat:
            raise ValueError(
                "--value_mlp_layers: sizes an MLP value trunk; with image or Dict observations the separate value "
                "trunk is an encoder like the policy's"
            )
        encoder, size = make_encoder(cfg, obs_space)
        # --normalize_input: what an MLP reads, the observations (flat) or a Dict model's vector keys (images are
        # scaled by their convnets). Registered before the encoder, as ever: the state dict's order is unchanged.
        normalized = tuple(obs_space.shape) if flat else (getattr(encoder, "vector_size", 0),)
        self.obs_normalizer = RunningMeanStd(normalized) if cfg.normalize_input and all(normalized) else None
        self.returns_normalizer = RunningMeanStd(()) if cfg.normalize_returns else None
        self.encoder = encoder
        self.core: nn.Module | None = None
        if cfg.use_rnn:
            cell = nn.GRUCell if cfg.rnn_type == "gru" else nn.LSTMCell
            self.core = cell(size, cfg.rnn_size)
            size = cfg.rnn_size
        if self.is_discrete:
            self.policy_head = nn.Linear(size, int(action_space.n))
            self.log_std = None
        else:
            action_dim = int(np.prod(action_space.shape))
            self.policy_head = nn.Linear(size, action_dim)
            self.log_std = nn.Parameter(torch.full((action_dim,), cfg.initial_log_std))
        # The action box (plain arrays, not state: checkpoints are unchanged), for losses that keep the Gaussian's
        # mean inside it; None for discrete or unbounded actions.
        self.action_bounds: tuple[np.ndarray, np.ndarray] | None = None
        if not self.is_discrete and np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high)):
            bounds = (action_space.low.reshape(-1), action_space.high.reshape(-1))
            self.action_bounds = tuple(b.astype(np.float32) for b in bounds)  # type: ignore[assignment]
        # With the separate trunk the value head reads that trunk's features (no core: see the check above), as wide
        # as the policy's unless --value_mlp_layers sizes it.
        value_layers = (cfg.value_mlp_layers or cfg.encoder_mlp_layers) if cfg.separate_value_trunk else []
        value_size = size
        if cfg.separate_value_trunk:  # (an image or Dict model's trunk is an encoder of the policy's kind)
            value_size = (value_layers[-1] if value_layers else size) if flat else self.encoder.out_size
        self.value_head = nn.Linear(value_size, 1) if self.team_space is None else None
        # Small initial policy outputs (the default gain) keep the first actions near the centre of the action range.
        nn.init.orthogonal_(self.policy_head.weight, gain=cfg.policy_init_gain)
        nn.init.zeros_(self.policy_head.bias)
        # Built last and only when asked for, so that without it the parameters, their names and the draws
        # from the seeded generator are exactly those of models (and checkpoints) from before the option.
        self.value_encoder: nn.Module | None = None
        if cfg.separate_value_trunk:
            self.value_encoder = make_encoder(cfg, obs_space, value_layers)[0]
        # The centralised value: its input's normaliser, an MLP as wide as --value_mlp_layers (or the policy's), a
        # head. Built last, so a local-value model's parameters and seeded draws stay what they were.
        self.team_normalizer: RunningMeanStd | None = None
        self.team_encoder: nn.Module | None = None
        self.team_value_head: nn.Module | None = None
        if self.team_space is not None:
            width = int(self.team_space.shape[0])
            self.team_normalizer = RunningMeanStd((width,)) if cfg.normalize_input else None
            layers = list(cfg.value_mlp_layers or cfg.encoder_mlp_layers)
            self.team_encoder, team_size = build_mlp(width, layers, cfg.nonlinearity)
            self.team_value_head = nn.Linear(team_size, 1)
        if cfg.normalize_images:
            for _, encoder in self.image_encoders():
                encoder.normalize_pixels()

    # --- pieces -----------------------------------------------------------------------------------
    def normalize_obs(self, obs: Tensor) -> Tensor:
        obs = obs.float()
        return self.obs_normalizer.normalize(obs) if self.obs_normalizer is not None else obs

    def encoder_input(self, obs: Obs, lead: int) -> Obs:
        """What the encoders read of obs [*lead dims, *obs_shape]: the MLP the normalised observations flattened after
        the `lead` dims; a Dict encoder the dict of keys, its vector keys normalised; image encoders the
        observations as they come (they cast and scale themselves)."""
        if self.encoder_kind == "dict":
            parts = self._dict(obs)
            if self.obs_normalizer is None:
                return parts
            return self.encoder.with_vectors(parts, self.obs_normalizer.normalize(self.encoder.vectors(parts)))
        return self.normalize_obs(obs).flatten(lead) if self.encoder_kind == "mlp" else obs

    def normalizer_input(self, obs: Tensor) -> Tensor:
        """What `obs_normalizer` tracks of obs [*lead, *obs_shape]: the observations, or a Dict model's vector keys
        flattened and concatenated ([*lead, vector_size])."""
        return self.encoder.vectors(self._dict(obs)) if self.encoder_kind == "dict" else obs

    def image_encoders(self) -> list[tuple[str | None, ImageEncoder]]:
        """Every convnet of the model with the observation key it reads (None: the observation is the image)."""
        found: list[tuple[str | None, ImageEncoder]] = []
        for encoder in (self.encoder, self.value_encoder):
            if isinstance(encoder, ImageEncoder):
                found.append((None, encoder))
            elif isinstance(encoder, MultiInputEncoder):
                found += [(key, encoder.images[key]) for key in encoder.image_keys]
        return found

    def pixel_batches(self, obs: Tensor, most: int = 128) -> list[tuple[RunningMeanStd, Tensor]]:
        """(a convnet's pixel normaliser, the pixels [n, *its image shape] it learns from) for each convnet that
        standardises its pixels (--normalize_images), from observations [n, *obs_shape]: every k-th of them, at most
        `most` (a hundred frames a batch, over the batches of a run, estimate a pixel's mean and spread; the whole
        batch would cost a tenth of the learner's time)."""
        pairs = [(key, e) for key, e in self.image_encoders() if e.pixel_normalizer is not None]
        if not pairs:
            return []
        obs = obs[:: max(1, -(-len(obs) // most))]
        parts = self._dict(obs) if self.encoder_kind == "dict" else None
        return [(e.pixel_normalizer, e.pixels(obs if key is None else parts[key])) for key, e in pairs]

    def _dict(self, obs: Obs) -> dict[str, Tensor]:
        """A Dict model's observations by key: packed ones (as the buffers hold them) taken apart; dicts (exported
        graphs', a model built on the Dict space itself) as they are."""
        return unpack_obs(obs, self.packed_layout) if isinstance(obs, Tensor) else obs

    def _value_features(self, inputs: Obs, features: Tensor) -> Tensor:
        """What the value head reads: the separate trunk's features of the encoder input `inputs` (`encoder_input`),
        or else the policy's `features` [..., F] themselves."""
        return features if self.value_encoder is None else self.value_encoder(inputs)

    def team_values(self, team: Tensor | None, shape: tuple[int, ...]) -> Tensor:
        """The centralised value (normalised units, `shape`) of the team inputs `team` [*shape, width]; zeros where
        no team input is given (a pass that reads only the policy)."""
        if team is None:
            return torch.zeros(shape, device=self.policy_head.weight.device)
        x = team.float()
        if self.team_normalizer is not None:
            x = self.team_normalizer.normalize(x)
        return self.team_value_head(self.team_encoder(x)).reshape(shape)

    def distribution(self, features: Tensor) -> DiagGaussian | Categorical:
        params = self.policy_head(features)
        if self.is_discrete:
            return Categorical(params)
        return DiagGaussian(params, self.log_std.expand_as(params))

    def core_step(self, x: Tensor, rnn_states: Tensor) -> tuple[Tensor, Tensor]:
        """One recurrent step for a batch: x [B, F], rnn_states [B, H] -> (features, new states)."""
        if self.rnn_type == "lstm":
            h, c = rnn_states.chunk(2, dim=-1)
            h, c = self.core(x, (h.contiguous(), c.contiguous()))
            return h, torch.cat([h, c], dim=-1)
        h = self.core(x, rnn_states)
        return h, h

    # --- what the policy worker calls -------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: Obs, rnn_states: Tensor, deterministic: bool = False) -> ActOutput:
        """One step for B envs: obs [B, *obs_shape], rnn_states [B, H]."""
        norm_obs = self.encoder_input(obs, 1)
        x = self.encoder(norm_obs)
        if self.core is not None:
            x, rnn_states = self.core_step(x, rnn_states)
        dist = self.distribution(x)
        actions = dist.mode() if deterministic else dist.sample()
        if self.value_head is None:  # a centralised value: the learner computes it
            values = torch.zeros(actions.shape[0], device=actions.device)
        else:
            values = self.value_head(self._value_features(norm_obs, x)).squeeze(-1)
        log_probs = dist.log_prob(actions)
        if self.is_discrete:
            actions = actions.unsqueeze(-1)
        return ActOutput(actions, log_probs, values, rnn_states)

    # --- what the learner calls -------------------------------------------------------------------
    def features(self, obs: Obs, rnn_states: Tensor, dones: Tensor, recurrence: int) -> Tensor:
        """Features of every step of N trajectories: obs [N, T, ...]; rnn_states [N, T, H] (only the
        states at chunk starts, every `recurrence` steps, are used); dones [N, T] reset the state after
        an episode ends. Returns [N, T, F]: the policy's features (see `values` for the value head's)."""
        return self._core_features(self.encoder(self.encoder_input(obs, 2)), rnn_states, dones, recurrence)

    def _core_features(self, x: Tensor, rnn_states: Tensor, dones: Tensor, recurrence: int) -> Tensor:
        """The core run over encoder outputs x [N, T, F] as described in `features` (x itself without a core)."""
        T = x.shape[1]
        if self.core is None:
            return x
        # The same recurrence as stepping the cell T times (restart from the stored state at every chunk start,
        # zero the state after an episode end), run as spans with neither inside them: torch's sequence op takes
        # a whole span in one call, which the learner's backward pass needs about 15-20% less time for than one
        # cell call per step (GRU 128, 16 x 64 steps, one CPU thread).
        ends = (dones[:, :-1].any(dim=0).nonzero().flatten() + 1).tolist()
        cuts = sorted(set(range(0, T, recurrence)) | set(ends) | {T})
        outputs = []
        h = rnn_states[:, 0]
        for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
            if start % recurrence == 0:
                # Truncated BPTT: restart each chunk from the state the policy worker had there.
                h = rnn_states[:, start]
            out, h = self.core_span(x[:, start:stop], h)
            outputs.append(out)
            h = h * (1.0 - dones[:, stop - 1]).unsqueeze(-1)
        return torch.cat(outputs, dim=1)

    def core_span(self, x: Tensor, rnn_states: Tensor) -> tuple[Tensor, Tensor]:
        """`core_step` over L steps with no reset inside: x [B, L, F], rnn_states [B, H] -> (features
        [B, L, F'], the state after the last step)."""
        cell = self.core
        weights = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
        if self.rnn_type == "lstm":
            h, c = (s.unsqueeze(0).contiguous() for s in rnn_states.chunk(2, dim=-1))
            out, h, c = torch.lstm(x, (h, c), weights, True, 1, 0.0, self.training, False, True)
            return out, torch.cat([h[0], c[0]], dim=-1)
        out, h = torch.gru(x, rnn_states.unsqueeze(0).contiguous(), weights, True, 1, 0.0, self.training, False, True)
        return out, h[0]

    def forward(
        self, obs: Obs, actions: Tensor, rnn_states: Tensor, dones: Tensor, recurrence: int, team: Tensor | None = None
    ) -> EvalOutput:
        """Log-probs, entropies and values of T steps of N trajectories under the current weights.

        obs [N, T, *obs_shape]; actions [N, T, A] float (Box) or [N, T, 1] int64 (Discrete); rnn_states
        [N, T, H] and dones [N, T] as in `features`; team [N, T, width]: a centralised value's input. Returns
        EvalOutput with [N, T] log-probs, entropies and
        normalised values, and the distribution over the N * T steps. Being `forward`, it runs through
        `self(...)`, so DDP's gradient hooks and `torch.func.functional_call` cover it."""
        N, T = dones.shape
        norm_obs = self.encoder_input(obs, 2)
        x = self._core_features(self.encoder(norm_obs), rnn_states, dones, recurrence)
        if self.value_head is None:
            values = self.team_values(team, (N, T))
        else:
            values = self.value_head(self._value_features(norm_obs, x)).reshape(N, T)
        x = x.reshape(N * T, -1)
        dist = self.distribution(x)
        flat_actions = actions.reshape(N * T, -1)
        if self.is_discrete:
            flat_actions = flat_actions.squeeze(-1)
        log_probs = dist.log_prob(flat_actions).reshape(N, T)
        entropy = dist.entropy().reshape(N, T)
        return EvalOutput(log_probs, entropy, values, dist)

    def values(
        self, obs: Obs, rnn_states: Tensor, dones: Tensor, recurrence: int, team: Tensor | None = None
    ) -> Tensor:
        """Normalised values [N, T] of every step of N trajectories, no actions needed; arguments as in
        `forward`. Callers use this rather than the value head, which may not read the policy's features."""
        N, T = dones.shape
        if self.value_head is None:
            return self.team_values(team, (N, T))
        norm_obs = self.encoder_input(obs, 2)
        if self.value_encoder is not None:
            # The separate trunk reads observations only: no need to run the policy's encoder and core.
            return self.value_head(self.value_encoder(norm_obs)).reshape(N, T)
        x = self._core_features(self.encoder(norm_obs), rnn_states, dones, recurrence)
        return self.value_head(x).reshape(N, T)

    @torch.no_grad()
    def value_of(self, obs: Obs, rnn_states: Tensor, team: Tensor | None = None) -> Tensor:
        """Values [B] of single observations obs [B, ...] with states [B, H] and team inputs [B, width] (the
        bootstrap step)."""
        if self.value_head is None:
            return self.team_values(team, (rnn_states.shape[0],))
        return self.act(obs, rnn_states, deterministic=True).values
