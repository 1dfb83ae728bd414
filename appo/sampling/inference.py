"""Answering InferenceRequests from the shared trajectory tensors, the part that needs no torch: gather the
observations (and rnn states) at a request's time index, act, scatter actions, log-probs, values, versions and
next rnn states back into the same slots, answer ActionsReady. `Inference` holds that logic over numpy passes;
where its weights come from and how a model without a numpy pass acts is its subclass's business:

- `PolicyWorker` (appo/sampling/policy_worker.py): torch models on any device, pulled from `ParamStore`s, with
  their numpy passes on the CPU; the policy worker process, serial mode, the Ray backend;
- `NumpyInference` (below): numpy passes only, built from the model's description and loaded from the stores'
  `ParamViews` (appo/protocol/shared_views.py): what actor workers acting for their own envs run, without torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from appo.config.cfg import Cfg
from appo.numpy_policy.actor_critic import ActorCriticPass, NumpyPolicyStack
from appo.numpy_policy.ops import NumpyPass
from appo.numpy_policy.registry import NUMPY_PASSES, make_numpy_pass
from appo.protocol.messages import ActionsReady, InferenceRequest
from appo.protocol.shared_views import ParamViews, numpy_views
from appo.utils.timing import Timing


def pass_seed(cfg: Cfg, policy_id: int, k: int, stream: int) -> int:
    """The seed of the numpy pass for weight set `k` of an inference component (`stream` tells instances apart)."""
    return cfg.seed * 1009 + policy_id * 101 + k + stream * 7919


class Inference:
    """Serves policy `policy_id`, or every policy when it holds one store per policy (shared policy workers: a
    request then covers all the envs of a split, and `slot_policy` says which policy each runs). `fast[k]`: the
    numpy pass of weight set k, or None where the subclass acts otherwise."""

    def __init__(
        self,
        cfg: Cfg,
        policy_id: int,
        buffers: dict[str, Any],
        stores: list[Any],
        shared: bool,
        fast: list[NumpyPass | None],
        control: dict[str, Any] | None,
        stream: int,
    ) -> None:
        self.cfg, self.policy_id = cfg, policy_id
        self.np_buf = numpy_views(buffers)
        self.stores = stores
        self.policies = list(range(len(stores))) if shared else [policy_id]
        # Per weight set: the version of the weights acting here, and its store's publish stamp when they were pulled.
        self.versions = [-1] * len(stores)
        self.stamps = [-1] * len(stores)
        self.fast = fast
        self.slot_policy = np.asarray(control["slot_policy"]) if control is not None and len(stores) > 1 else None
        # Serving a population on the numpy path: one pass over the stacked weights of every policy.
        members = [f for f in fast if isinstance(f, ActorCriticPass)]
        stackable = self.slot_policy is not None and len(members) == len(fast)
        self.stack = NumpyPolicyStack(members, cfg.seed * 1009 + 7 + stream * 7919) if stackable else None
        # Episodic runs (MAML): one pass per request, so that a row's actions come from a batch of the same shape
        # however requests happen to arrive (one worker or four give the same bits), acting with the rollout's noise.
        self.per_request = cfg.traits.episodic
        # The rollout's own action noise (a trajectory field the algorithm asks for) is handed to a numpy pass that
        # acts with given noise; asking for the field with a model whose pass cannot is a configuration error.
        self.has_noise = "action_noise" in self.np_buf
        if self.has_noise and any(f is None or not f.takes_noise for f in fast):
            raise ValueError(f"--algo={cfg.algo}: its rollouts carry action noise, which its model's pass cannot take")
        self.timing = Timing()

    @property
    def version(self) -> int:
        return self.versions[0]

    def pull(self, k: int) -> int:
        """Load weight set k's newest published weights; returns their version."""
        raise NotImplementedError

    def act(self, k: int, obs: np.ndarray, rnn: np.ndarray | None) -> tuple[Any, ...]:
        """(actions, log_probs, values, next rnn states) of weight set k; the numpy pass's, unless overridden."""
        fast = self.fast[k]
        if fast is None:
            raise ValueError(f"{type(self).__name__}: no numpy pass for weight set {k}")
        return tuple(fast.act(obs, rnn))

    def maybe_pull_weights(self) -> None:
        """Pull every weight set published since its last pull: told by the store's publish stamp, not its version
        (a PBT copy publishes its source's self-play snapshots under versions the slots may already hold). The stamp
        is read before the pull: a publish during it makes the next call pull again, it is never missed."""
        pulled = False
        for k, store in enumerate(self.stores):
            stamp = store.current_stamp()
            if stamp != self.stamps[k]:
                with self.timing.add_time("weight_sync"):
                    self.versions[k] = self.pull(k)
                self.stamps[k] = stamp
                pulled = True
        if pulled and self.stack is not None:
            with self.timing.add_time("weight_sync"):
                self.stack.restack()

    def infer(self, requests: list[InferenceRequest]) -> list[Any]:
        """Act for every request (one pass per policy, or one stacked numpy pass for a population); returns
        the ActionsReady replies."""
        if not requests:
            return []
        self.maybe_pull_weights()
        if self.slot_policy is None:
            # A request covers consecutive slots at one time index (plain slices), or some of them when a
            # split's envs run several policies (an index array).
            spans = [(_slots(r), r.t) for r in requests]
            self._forward(0, spans, [r.num_envs for r in requests])
        else:
            for batch in [[r] for r in requests] if self.per_request else [requests]:
                slots = np.concatenate([_slots_array(r) for r in batch])
                ts = np.concatenate([np.full(r.num_envs, r.t) for r in batch])
                owner = self.slot_policy[slots]
                if self.stack is not None:
                    self._forward_stacked(slots, ts, owner)
                else:
                    for k in np.unique(owner):
                        mine = owner == k
                        self._forward(int(k), [(slots[mine], ts[mine])], [int(mine.sum())])
        pid = self.policy_id
        return [ActionsReady(r.worker_idx, r.split_idx, r.first_slot, r.t, r.incarnation, pid) for r in requests]

    def _forward(self, k: int, spans: list[tuple[Any, Any]], counts: list[int]) -> None:
        """Gather the observations and rnn states at t of `spans` (slots, time index), act with weight set k, write
        actions, log-probs, values and versions at t and the next rnn states at t + 1. The env runner zeroes the
        states at t + 1 of envs whose episode ended at t after it has this reply, so a reset wins over this write."""
        buf = self.np_buf
        fast = self.fast[k]
        recurrent = self.cfg.use_rnn
        with self.timing.add_time("gather"):
            obs = np.concatenate([buf["obs"][s, t] for s, t in spans]) if len(spans) > 1 else buf["obs"][spans[0]]
            # torch's act takes the (placeholder) states even without a core; numpy's only with one.
            use_states = recurrent or fast is None
            rnn = np.concatenate([buf["rnn_states"][s, t] for s, t in spans]) if use_states else None
        with self.timing.add_time("forward"):
            if fast is not None and self.has_noise:
                noise = np.concatenate([buf["action_noise"][s, t] for s, t in spans])
                actions, log_probs, values, rnn_out = fast.act(obs, rnn, noise=noise)
            else:
                actions, log_probs, values, rnn_out = self.act(k, obs, rnn)
        with self.timing.add_time("scatter"):
            start = 0
            for (s, t), n in zip(spans, counts, strict=True):
                end = start + n
                buf["actions"][s, t] = actions[start:end]
                buf["log_probs"][s, t] = log_probs[start:end]
                buf["values"][s, t] = values[start:end]
                buf["policy_versions"][s, t] = self.versions[k]
                if recurrent:
                    buf["rnn_states"][s, t + 1] = rnn_out[start:end]
                start = end

    def _forward_stacked(self, slots: np.ndarray, ts: np.ndarray, owner: np.ndarray) -> None:
        """Every policy's envs in one stacked numpy pass; each slot gets its own policy's version. Reads and
        writes as `_forward`: rnn states from t, the next ones into t + 1."""
        buf = self.np_buf
        recurrent = self.cfg.use_rnn
        with self.timing.add_time("gather"):
            obs = buf["obs"][slots, ts]
            rnn = buf["rnn_states"][slots, ts] if recurrent else None
        with self.timing.add_time("forward"):
            actions, log_probs, values, rnn_out = self.stack.act(obs, owner, rnn)
        with self.timing.add_time("scatter"):
            buf["actions"][slots, ts] = actions
            buf["log_probs"][slots, ts] = log_probs
            buf["values"][slots, ts] = values
            buf["policy_versions"][slots, ts] = np.asarray(self.versions)[owner]
            if recurrent:
                buf["rnn_states"][slots, ts + 1] = rnn_out


class NumpyInference(Inference):
    """Inference with numpy passes alone: built from the model's description (appo/numpy_policy/), loaded from the
    stores' ParamViews. What actor workers acting for their own envs run; no torch."""

    def __init__(
        self,
        cfg: Cfg,
        policy_id: int,
        buffers: dict[str, Any],
        params: ParamViews | list[ParamViews],
        description: dict[str, Any],
        control: dict[str, Any] | None = None,
        stream: int = 0,
    ) -> None:
        shared = isinstance(params, list)
        stores = params if shared else [params]
        fast: list[NumpyPass | None] = [
            make_numpy_pass(description, pass_seed(cfg, policy_id, k, stream)) for k in range(len(stores))
        ]
        for store, numpy_pass in zip(stores, fast, strict=True):  # the weights as they are now (a stack needs some)
            numpy_pass.load_state(store.pull_state()[1])
        super().__init__(cfg, policy_id, buffers, stores, shared, fast, control, stream)

    def pull(self, k: int) -> int:
        version, state = self.stores[k].pull_state()
        self.fast[k].load_state(state)
        return version


def inference_layout(cfg: Cfg, num_stores: int) -> list[tuple[int, bool]]:
    """The inference components that answer every request of a run, as (policy id, serves every store): one serving
    all policies (shared policy workers) or every weight set (more stores than policies: an episodic run's), else
    one per policy."""
    if (cfg.shared_policy_workers and cfg.num_policies > 1) or num_stores > cfg.num_policies:
        return [(0, True)]
    return [(p, False) for p in range(cfg.num_policies)]


def make_numpy_inference(
    cfg: Cfg,
    buffers: dict[str, Any],
    params: list[ParamViews],
    description: dict[str, Any],
    control: dict[str, Any] | None,
    stream: int = 0,
) -> list[NumpyInference]:
    """`make_policy_workers` (appo/sampling/policy_worker.py) in numpy alone: the same components, the same seeds."""
    return [
        NumpyInference(cfg, p, buffers, params if every else params[p], description, control if every else None, stream)
        for p, every in inference_layout(cfg, len(params))
    ]


def actors_act(cfg: Cfg) -> bool:
    """Whether actor workers act for their own envs (--actor_inference with --numpy_inference: numpy on the CPU,
    feed-forward and recurrent models alike), so that no policy worker process runs. Only for a model kind with a
    numpy pass (appo/numpy_policy/)."""
    kind = cfg.traits.model_kind
    return cfg.actor_inference and cfg.numpy_inference and not cfg.serial_mode and kind in NUMPY_PASSES


def _slots(r: InferenceRequest) -> slice | np.ndarray:
    if r.envs is None:
        return slice(r.first_slot, r.first_slot + r.num_envs)
    return r.first_slot + np.asarray(r.envs)


def _slots_array(r: InferenceRequest) -> np.ndarray:
    if r.envs is None:
        return np.arange(r.first_slot, r.first_slot + r.num_envs)
    return r.first_slot + np.asarray(r.envs)
