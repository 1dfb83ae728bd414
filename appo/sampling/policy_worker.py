"""Policy worker: batched inference for one policy. Drains every pending InferenceRequest, gathers the
observations of all those splits from the shared trajectory tensors, runs one forward pass on the
device, and scatters actions, log-probs, values, rnn states and the weights version back into the same
slots; then answers each split with ActionsReady. New weights are pulled whenever the learner's
version moved.

`PolicyWorker` is the component; `run_policy_worker` the process shell.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from appo.algorithms.registry import algorithm_spec
from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.models.actor_critic_numpy import NumpyPolicy, NumpyPolicyStack
from appo.models.device import to_device, to_numpy
from appo.models.numpy_ops import FastPolicy, make_numpy_policy
from appo.models.registry import make_model
from appo.protocol.buffers import numpy_views
from appo.protocol.messages import ActionsReady, InferenceRequest, Stop
from appo.protocol.param_sync import ParamStore
from appo.protocol.processes import component_main
from appo.protocol.wiring import Queues, policy_queue, send
from utils.timing import Timing


class PolicyWorker:
    """Serves policy `policy_id`, or every policy when `params` holds one store per policy (shared policy
    workers: a request then covers all the envs of a split, and `slot_policy` says which policy each runs)."""

    def __init__(
        self,
        cfg: Cfg,
        derived: Derived,
        policy_id: int,
        buffers: dict[str, torch.Tensor],
        params: ParamStore | list[ParamStore],
        spaces: tuple[gym.Space, gym.Space],
        device: str,
        control: dict[str, torch.Tensor] | None = None,
        stream: int = 0,
    ) -> None:
        """`stream` tells apart the random streams of several instances (policy workers, acting actors)."""
        self.cfg, self.policy_id, self.device = cfg, policy_id, device
        self.np_buf = numpy_views(buffers)
        self.stores = params if isinstance(params, list) else [params]
        self.policies = list(range(len(self.stores))) if isinstance(params, list) else [policy_id]
        self.models = [make_model(cfg, *spaces).to(device).eval() for _ in self.stores]
        self.versions = [-1] * len(self.stores)
        self.fast: list[FastPolicy | None] = [
            make_numpy_policy(m, device, cfg.seed * 1009 + policy_id * 101 + k + stream * 7919)
            if cfg.numpy_inference
            else None
            for k, m in enumerate(self.models)
        ]
        self.slot_policy = control["slot_policy"].numpy() if control is not None and len(self.stores) > 1 else None
        # Serving a population on the numpy path: one pass over the stacked weights of every policy.
        members = [f for f in self.fast if type(f) is NumpyPolicy]
        stackable = self.slot_policy is not None and len(members) == len(self.fast)
        self.stack = NumpyPolicyStack(members, cfg.seed * 1009 + 7 + stream * 7919) if stackable else None
        # Episodic runs (MAML): one pass per request, so that a row's actions come from a batch of the same shape
        # however requests happen to arrive (one worker or four give the same bits), acting with the rollout's noise.
        self.per_request = algorithm_spec(cfg.algo).episodic
        # The rollout's own action noise (a trajectory field the algorithm asks for) is handed to a numpy pass that
        # acts with given noise; asking for the field with a model whose pass cannot is a configuration error.
        self.has_noise = "action_noise" in self.np_buf
        if self.has_noise and any(f is None or not f.takes_noise for f in self.fast):
            raise ValueError(f"--algo={cfg.algo}: its rollouts carry action noise, which its model's pass cannot take")
        self.timing = Timing()

    @property
    def version(self) -> int:
        return self.versions[0]

    def maybe_pull_weights(self) -> None:
        pulled = False
        for k, store in enumerate(self.stores):
            if store.current_version() != self.versions[k]:
                with self.timing.add_time("weight_sync"):
                    self.versions[k] = store.pull(self.models[k])
                    if self.fast[k] is not None:
                        self.fast[k].load(self.models[k])
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
        """Gather the observations and rnn states at t of `spans` (slots, time index), act with model k, write
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
        with self.timing.add_time("forward"), torch.inference_mode():
            if fast is not None and self.has_noise:
                noise = np.concatenate([buf["action_noise"][s, t] for s, t in spans])
                actions, log_probs, values, rnn_out = fast.act(obs, rnn, noise=noise)
            elif fast is not None:
                actions, log_probs, values, rnn_out = fast.act(obs, rnn)
            else:
                out = self.models[k].act(to_device(obs, self.device), to_device(rnn, self.device))
                actions, log_probs, values = to_numpy(out.actions), to_numpy(out.log_probs), to_numpy(out.values)
                rnn_out = to_numpy(out.rnn_states) if recurrent else None
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


def make_policy_workers(
    cfg: Cfg,
    derived: Derived,
    buffers: dict[str, torch.Tensor],
    params: list[ParamStore],
    spaces: tuple[gym.Space, gym.Space],
    device: str,
    control: dict[str, torch.Tensor] | None,
    stream: int = 0,
) -> list[PolicyWorker]:
    """The policy-worker components that answer every request of a run: one serving all policies (shared
    policy workers) or every weight set (more `params` than policies: an episodic run's), else one per policy."""
    if (cfg.shared_policy_workers and cfg.num_policies > 1) or len(params) > cfg.num_policies:
        return [PolicyWorker(cfg, derived, 0, buffers, params, spaces, device, control, stream)]
    return [
        PolicyWorker(cfg, derived, p, buffers, params[p], spaces, device, stream=stream)
        for p in range(cfg.num_policies)
    ]


def actors_act(cfg: Cfg) -> bool:
    """Whether actor workers act for their own envs (--actor_inference with --numpy_inference: numpy on the CPU,
    feed-forward and recurrent models alike), so that no policy worker process runs."""
    return cfg.actor_inference and cfg.numpy_inference and not cfg.serial_mode


def _slots(r: InferenceRequest) -> slice | np.ndarray:
    if r.envs is None:
        return slice(r.first_slot, r.first_slot + r.num_envs)
    return r.first_slot + np.asarray(r.envs)


def _slots_array(r: InferenceRequest) -> np.ndarray:
    if r.envs is None:
        return np.arange(r.first_slot, r.first_slot + r.num_envs)
    return r.first_slot + np.asarray(r.envs)


def policy_worker_loop(worker: PolicyWorker, queues: Queues, heartbeat: Any = None) -> None:
    """Serve requests until Stop. `heartbeat` (a one-element shared array) is stamped every loop, so that a
    worker blocked for good inside its queue (a writer killed in the critical section) is found and replaced."""
    while True:
        if heartbeat is not None:
            heartbeat[0] = time.time()
        queue = policy_queue(queues, worker.policy_id)  # moves on when a sibling was restarted
        with worker.timing.add_time("wait"):
            try:
                msgs = queue.get_many(timeout=0.5)
            except Exception:  # queue.Empty on timeout
                msgs = []
        requests = [m for m in msgs if type(m) is InferenceRequest]
        send(worker.infer(requests), queues)
        if any(type(m) is Stop for m in msgs):
            return


def run_policy_worker(
    cfg: Cfg,
    derived: Derived,
    policy_id: int,
    index: int,
    buffers: dict[str, torch.Tensor],
    params: ParamStore | list[ParamStore],
    spaces: tuple[gym.Space, gym.Space],
    device: str,
    control: dict[str, torch.Tensor],
    queues: Queues,
) -> None:
    """Process entry point of policy worker `index` of policy `policy_id` (of every policy, given all stores)."""

    def body() -> None:
        worker = PolicyWorker(cfg, derived, policy_id, buffers, params, spaces, device, control, stream=index)
        slot = policy_id * cfg.policy_workers_per_policy + index
        heartbeat = control["policy_heartbeats"].numpy()[slot : slot + 1]
        try:
            policy_worker_loop(worker, queues, heartbeat)
        finally:
            from utils.logging import log

            log.info("policy worker %d_%d profile: %s", policy_id, index, worker.timing.profile())

    component_main(cfg, f"policy_worker_{policy_id}_{index}", queues, body)
