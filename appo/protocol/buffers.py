"""The shared trajectory tensors: declared once in a spec table, allocated once by the driver in shared
memory, poison-filled so that a read of a never-written cell shows up as -42.42 instead of a plausible 0 (integer
cells: -1; unsigned ones, uint8 frames included, all bits set: 255, a white frame).

Observations travel in the dtype `obs_dtype` gives their space (uint8 frames stay uint8, a quarter of float32's
memory; the model casts and scales them itself), from the env through these tensors, the learner's batches, SAC's
replay and evaluations, so that no path upcasts them on the way.

Layout: every tensor has a leading slot dimension. One slot holds one env's trajectory of `rollout`
steps (T), plus the observation and rnn state after the last step (T + 1), so the learner bootstraps
from a real value. Slots are grouped: a *slot group* is `envs_per_split` consecutive slots, one per env
of a split, filled together. Each split owns `slot_groups_per_split` groups:

    slot = ((worker_idx * worker_num_splits + split_idx) * slot_groups_per_split + group_idx)
           * envs_per_split + env_in_split

Ownership of a group moves with messages (appo/protocol/messages.py): the actor worker owns it while filling it,
TrajectoryReady hands it to the learner, SlotsReleased hands it back. Only the owner writes; the policy
worker writes into the current time step of a group only between the actor's InferenceRequest and its
ActionsReady reply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np

from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.protocol.shared_views import numpy_views

if TYPE_CHECKING:  # torch is imported where tensors are made: actor workers import this module without it
    import torch

__all__ = ["numpy_views"]  # (re-exported: shared arrays as numpy, appo/protocol/shared_views.py)

POISON = -42.42


def obs_dtype(space: gym.Space) -> np.dtype:
    """The numpy dtype observations of `space` are stored and passed in: uint8 and the signed integer types keep
    theirs (uint8: pixels), uint16 becomes int32 and wider unsigned types int64 (values past 2**63 wrap);
    everything else is float32: float64 and float16 alike, and bool as 0.0 / 1.0 (not uint8, which the models read
    as pixels and scale by 1/255)."""
    dtype = np.dtype(getattr(space, "dtype", None) or np.float32)
    if dtype == np.uint8 or dtype in (np.int8, np.int16, np.int32, np.int64):
        return dtype
    if dtype.kind == "u":
        return np.dtype(np.int32 if dtype == np.uint16 else np.int64)
    return np.dtype(np.float32)


def poison_value(dtype: Any) -> float | int:
    """What a never-written cell of `dtype` (numpy or torch) holds: POISON for floats, -1 for signed integers, the
    largest value for unsigned ones (all bits set, -1's pattern: a uint8 frame of 255s)."""
    dtype = numpy_dtype_of(dtype)
    if dtype.kind == "f":
        return POISON
    return int(np.iinfo(dtype).max) if dtype.kind in "ub" else -1


def missing_obs_value(dtype: Any) -> float | int:
    """What `final_obs` holds at a step that never happened (its env raised; `step_failed` marks it): NaN for float
    observations, the poison value for integer ones, which have no NaN."""
    return float("nan") if numpy_dtype_of(dtype).kind == "f" else poison_value(dtype)


def numpy_dtype_of(dtype: Any) -> np.dtype:
    """A numpy dtype from a numpy or a torch dtype (torch-free for numpy ones: actor workers run without torch)."""
    if isinstance(dtype, (np.dtype, type, str)):
        return np.dtype(dtype)
    import torch

    return torch.empty(0, dtype=dtype).numpy().dtype


def array_dtype(array: Any) -> np.dtype:
    """The numpy dtype of a shared array: a numpy array or a torch tensor alike (through __array__, no torch)."""
    return np.asarray(array[:0]).dtype


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    import torch

    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


class TensorSpec(NamedTuple):
    shape: tuple[int, ...]  # per slot, after the leading slot dimension
    dtype: Any  # a torch.dtype


def rnn_state_size(cfg: Cfg) -> int:
    """Floats of recurrent state per env: h for a GRU, h and c for an LSTM, a placeholder without rnn."""
    if not cfg.use_rnn:
        return 1
    return cfg.rnn_size * (2 if cfg.rnn_type == "lstm" else 1)


def trajectory_spec(
    cfg: Cfg, obs_space: gym.Space, action_space: gym.Space, multi_agent: bool = False
) -> dict[str, TensorSpec]:
    """The table of every trajectory tensor: name -> (per-slot shape, dtype). A multi-agent run's slots are agents
    and carry `valid`: 1.0 where the slot's agent acted, 0.0 at steps it was out of its game (masked from the
    losses: appo/sampling/agent_split.py); with a centralised value (--value_input) they carry `team_obs`, what the
    value reads at each step (the bootstrap step's last), filled by the actor workers like `obs`."""
    import torch

    T = cfg.rollout
    if isinstance(action_space, gym.spaces.Discrete):
        action = TensorSpec((T, 1), torch.int64)
    else:
        action = TensorSpec((T, int(np.prod(action_space.shape))), torch.float32)
    engine = {
        "obs": TensorSpec((T + 1, *obs_space.shape), torch_dtype(obs_dtype(obs_space))),
        "actions": action,
        "log_probs": TensorSpec((T,), torch.float32),  # of the behaviour policy
        "values": TensorSpec((T,), torch.float32),  # behaviour values, normalised units
        "rewards": TensorSpec((T,), torch.float32),
        "dones": TensorSpec((T,), torch.float32),  # episode ended (terminated or truncated) at this step
        "truncated": TensorSpec((T,), torch.float32),  # ended by a time limit, not by the env's dynamics
        "policy_versions": TensorSpec((T,), torch.int64),  # weights version that chose each action
        "rnn_states": TensorSpec((T + 1, rnn_state_size(cfg)), torch.float32),  # state before each step
    }
    extra = tuple(cfg.traits.trajectory_fields)
    if "final_obs" in extra and "step_failed" not in extra:
        extra += ("step_failed",)  # final_obs comes with its marker of steps that never happened
    fillable = actor_fields(cfg, obs_space, action_space)
    clash = sorted(set(extra) & set(engine))
    unknown = sorted(set(extra) - set(fillable) - set(engine))
    if clash or unknown:
        raise ValueError(
            f"--algo={cfg.algo}: trajectory fields {clash or unknown} are "
            + ("the engine's own" if clash else f"not ones actor workers fill ({', '.join(fillable)})")
        )
    if multi_agent:
        engine["valid"] = TensorSpec((T,), torch.float32)
    team = getattr(obs_space, "team_space", None)  # a centralised value's input (envs/multi_agent/team_value.py)
    if team is not None:
        engine["team_obs"] = TensorSpec((T + 1, *team.shape), torch.float32)
    return engine | {name: fillable[name] for name in extra}


def actor_fields(
    cfg: Cfg, obs_space: gym.Space | None = None, action_space: gym.Space | None = None
) -> dict[str, TensorSpec]:
    """Per-step fields an algorithm may ask for (its `trajectory_fields` trait, by name), which actor workers fill
    (appo/sampling/env_runner.py): the task each step ran (its index in the train split, -1 for envs without
    tasks), the episode it belongs to (unique in the run: appo/protocol/episode_ids.py packs env, worker
    incarnation and episode count),
    the weight set that acted (appo/protocol/control.py), and (given the observation space) `final_obs`: the observation
    the env returned at a step that ended its episode, which obs[t + 1] does not hold (it is the next episode's
    first); written only at those steps, poison elsewhere (in the observations' dtype), with `step_failed`: 1.0 at
    a step whose env raised, so that the step never happened and has no successor (final_obs then holds
    `missing_obs_value`, NaN or an integer poison; readers test the flag), 0.0 at every other step."""
    import torch

    T = cfg.rollout
    fields = {
        "task_ids": TensorSpec((T,), torch.int64),
        "episode_ids": TensorSpec((T,), torch.int64),
        "weight_sets": TensorSpec((T,), torch.int64),
    }
    if obs_space is not None:
        fields["final_obs"] = TensorSpec((T, *obs_space.shape), torch_dtype(obs_dtype(obs_space)))
        fields["step_failed"] = TensorSpec((T,), torch.float32)
    if isinstance(action_space, gym.spaces.Box):  # standard-normal draws: a = mean + std * noise
        fields["action_noise"] = TensorSpec((T, int(np.prod(action_space.shape))), torch.float32)
    elif isinstance(action_space, gym.spaces.Discrete):  # standard-exponential draws: Gumbel-max, -log(noise)
        fields["action_noise"] = TensorSpec((T, int(action_space.n)), torch.float32)
    return fields


def allocate_trajectories(
    cfg: Cfg, derived: Derived, obs_space: gym.Space, action_space: gym.Space
) -> dict[str, torch.Tensor]:
    """Allocate every trajectory tensor in shared memory, poison-filled (`poison_value`)."""
    import torch

    tensors = {}
    for name, spec in trajectory_spec(cfg, obs_space, action_space, derived.multi_agent).items():
        tensor = torch.full((derived.num_slots, *spec.shape), poison_value(spec.dtype), dtype=spec.dtype)
        tensors[name] = tensor.share_memory_()
    tensors["rnn_states"].zero_()  # every trajectory's first state is the zero state
    return tensors


def group_number(worker_idx: int, split_idx: int, group_idx: int, num_splits: int, groups_per_split: int) -> int:
    """The run-wide number of slot group `group_idx` of split `split_idx` of actor worker `worker_idx`: the one
    formula behind every group index (slots, group_at_learner rows, the batcher's releases)."""
    return (worker_idx * num_splits + split_idx) * groups_per_split + group_idx


def group_index(cfg: Cfg, derived: Derived, worker_idx: int, split_idx: int, group_idx: int) -> int:
    return group_number(worker_idx, split_idx, group_idx, cfg.worker_num_splits, derived.slot_groups_per_split)


def first_slot(cfg: Cfg, derived: Derived, worker_idx: int, split_idx: int, group_idx: int) -> int:
    return group_index(cfg, derived, worker_idx, split_idx, group_idx) * derived.envs_per_split


def first_env(cfg: Cfg, derived: Derived, worker_idx: int, split_idx: int = 0) -> int:
    """The run-wide index (control-channel row) of env 0 of split `split_idx` of actor worker `worker_idx`; a
    split's envs are the next `derived.envs_per_split`, a worker's those up to its successor's first env."""
    return (worker_idx * cfg.worker_num_splits + split_idx) * derived.envs_per_split


def worker_envs(cfg: Cfg, derived: Derived, worker_idx: int) -> slice:
    """The control-channel rows of every env of actor worker `worker_idx`."""
    return slice(first_env(cfg, derived, worker_idx), first_env(cfg, derived, worker_idx + 1))


def allocate_control(cfg: Cfg, derived: Derived) -> dict[str, torch.Tensor]:
    """Small shared arrays for supervision, outside the trajectory table:
    - heartbeats [num_workers] float64: wall time of each actor worker's last loop (0 before its first);
    - policy_heartbeats [num_policies * policy_workers_per_policy] float64: the same for policy workers;
    - slot_policy [num_slots] int64: the policy each slot's env runs in its current rollout (read by shared
      policy workers, which serve every policy);
    - group_at_learner [num_groups, num_policies] uint8: 1 while (part of) a slot group is handed to that
      policy's learner; each cell has one writer at a time. A restarted actor worker takes as free only the
      groups that no learner holds;
    - assignments [num_envs_total, 3] int64: the control channel (appo/protocol/control.py), every cell free;
    - commands [num_envs_total, 2] float32: the control channel's commands (reward-conditioned policies), NaN;
    - episode_seeds [num_envs_total, 2] int64: the control channel's episode seeds (episodic runs), -1;
    - snapshot_versions [num_policies, selfplay_pool] int64, with --selfplay_pool only: the version of each
      self-play snapshot (appo/learning/snapshot_pool.py), 0 for an empty slot;
    - session_start [1] float64: wall time (time.time()) this session's budget counts from, set by the driver (0:
      not set), the clock of --train_for_seconds in learners' schedules."""
    import torch

    from appo.protocol.control import (
        allocate_assignments,
        allocate_commands,
        allocate_episode_seeds,
        allocate_snapshot_versions,
    )

    num_groups = derived.num_splits_total * derived.slot_groups_per_split
    return {
        "heartbeats": torch.zeros(cfg.num_workers, dtype=torch.float64).share_memory_(),
        "slot_policy": torch.zeros(derived.num_slots, dtype=torch.int64).share_memory_(),
        "policy_heartbeats": torch.zeros(
            cfg.num_policies * cfg.policy_workers_per_policy, dtype=torch.float64
        ).share_memory_(),
        "group_at_learner": torch.zeros(num_groups, cfg.num_policies, dtype=torch.uint8).share_memory_(),
        "assignments": allocate_assignments(derived.num_envs_total),
        "commands": allocate_commands(derived.num_envs_total),
        "episode_seeds": allocate_episode_seeds(derived.num_envs_total),
        "session_start": torch.zeros(1, dtype=torch.float64).share_memory_(),
    } | ({"snapshot_versions": allocate_snapshot_versions(cfg)} if cfg.selfplay_pool > 0 else {})


def shared_bytes(cfg: Cfg, derived: Derived, obs_space: gym.Space, action_space: gym.Space) -> int:
    """Bytes of /dev/shm a run needs: trajectory tensors, weights are small; queues are counted by the caller."""
    total = 0
    for spec in trajectory_spec(cfg, obs_space, action_space, derived.multi_agent).values():
        total += derived.num_slots * int(np.prod(spec.shape)) * spec.dtype.itemsize
    return total
