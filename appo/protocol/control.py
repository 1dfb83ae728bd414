"""The control channel: the one way upstream decisions reach actor workers. For every env of the run it says
which policy trains on its experience, which task it runs and which weight set acts for it, from that env's
next episode (trial) on. Nothing chooses these inside an env wrapper.

    table [num_envs_total, 3] int64 in shared memory, one row per env (global env index), columns
        POLICY   the learner its experience goes to            (-1: the env's own assigner decides)
        TASK     index into the run's train tasks              (-1: the env's task schedule decides)
        WEIGHTS  the weight set (ParamStore) that acts for it  (-1: its policy's own weights)

Writers: the driver or a learner, through `ControlChannel` (one writer per row at a time). Reader: the actor
worker that owns the env, at each episode start of that env; an int64 store is atomic, so a reader sees a
whole old or a whole new value of each cell.

    commands [num_envs_total, 2] float32, one row per env: the command (desired return-to-go, desired horizon)
        its next episode starts from, for reward-conditioned policies (--algo=udrl); NaN: none (the env's own
        default). Written by the UDRL learner after each iteration (`set_commands`), read by the actor worker at
        each episode start of the env and given to the env as reset(options={"command": ...})
        (envs/common/reward_conditioning.py CommandObservation keeps it up to date during the episode).

    episode_seeds [num_envs_total, 2] int64, one row per env: the seeds of its next episode, (env reset seed, action
        noise seed); -1: none. Read by episodic runs (the traits' `episodic`: MAML) at each rollout's start: the env
        resets with the first, and the `action_noise` field of the rollout is drawn from the second, so an episode
        is the same bits whichever worker and env run it. Written by the MAML driver before it releases a split.

When a cell is -1, the actor worker's assigners decide, locally and without a message: `PolicyDraw` (a
population's uniform draw of a policy per episode) and the env's task schedule (envs/meta/schedules.py). MAML's
"task k with adapted weights k" and a reward-conditioned policy's commands are written here by their
algorithms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from appo.config.cfg import Cfg

if TYPE_CHECKING:  # the tables are made and written where torch is (the driver); actor workers read them as numpy
    import torch

POLICY, TASK, WEIGHTS = 0, 1, 2
COLUMNS = 3
FREE = -1


class Assignment(NamedTuple):
    policy: int = FREE
    task: int = FREE
    weights: int = FREE


def allocate_assignments(num_envs_total: int) -> torch.Tensor:
    """The channel's shared table, every cell FREE."""
    import torch

    return torch.full((num_envs_total, COLUMNS), FREE, dtype=torch.int64).share_memory_()


def weight_set_of(cfg: Cfg, policy_id: int, slot: int) -> int:
    """The weight set of self-play snapshot `slot` of policy `policy_id` (appo/learning/snapshot_pool.py): after
    the policies' own, policy by policy."""
    return cfg.num_policies + policy_id * cfg.selfplay_pool + slot


def allocate_snapshot_versions(cfg: Cfg) -> torch.Tensor:
    """The table of filled self-play snapshots: [policies, pool] int64 versions, 0 for an empty slot. Written by
    each policy's learner as it takes a snapshot, read by actor workers as they draw a game's opponents."""
    import torch

    return torch.zeros(cfg.num_policies, max(cfg.selfplay_pool, 1), dtype=torch.int64).share_memory_()


COMMAND_DIMS = 2  # columns of the command table: desired return-to-go, desired horizon


def allocate_commands(num_envs_total: int) -> torch.Tensor:
    """The channel's shared command table, every row NaN (no command)."""
    import torch

    return torch.full((num_envs_total, COMMAND_DIMS), float("nan"), dtype=torch.float32).share_memory_()


def set_commands(commands: torch.Tensor, command: list[float], envs: list[int] | None = None) -> None:
    """From their next episode on, `envs` (global env indices; None: all) start from `command` (its first
    dims; NaN: none)."""
    import torch

    values = torch.full((COMMAND_DIMS,), float("nan"))
    values[: len(command)] = torch.as_tensor(command, dtype=torch.float32)
    commands[slice(None) if envs is None else envs] = values


def allocate_episode_seeds(num_envs_total: int) -> torch.Tensor:
    """The channel's shared episode-seed table, every cell -1 (no seed)."""
    import torch

    return torch.full((num_envs_total, 2), FREE, dtype=torch.int64).share_memory_()


class ControlChannel:
    """The writing end: checks every value against what the run has, then stores it."""

    def __init__(self, table: torch.Tensor, num_policies: int, num_weight_sets: int, num_tasks: int) -> None:
        self.table = table
        self.limits = {POLICY: num_policies, TASK: num_tasks, WEIGHTS: num_weight_sets}

    def assign(self, envs: int | list[int], assignment: Assignment) -> None:
        """From their next episode on, `envs` (global env indices) run `assignment` (FREE cells: their own
        assigners decide)."""
        rows = [envs] if isinstance(envs, int) else list(envs)
        for column, value in enumerate(assignment):
            name, limit = Assignment._fields[column], self.limits[column]
            if value != FREE and not 0 <= value < limit:
                valid = f"not in 0..{limit - 1}" if limit > 0 else f"not available: the run has no {name}s"
                raise ValueError(f"control channel: {name}={value} is {valid}")
        for env in rows:
            if not 0 <= env < self.table.shape[0]:
                raise ValueError(f"control channel: env {env} is not in 0..{self.table.shape[0] - 1}")
        import torch

        self.table[rows] = torch.tensor(list(assignment), dtype=torch.int64)

    def release(self, envs: int | list[int]) -> None:
        """Hand `envs` back to their own assigners."""
        self.assign(envs, Assignment())

    def read(self, env: int) -> Assignment:
        return Assignment(*(int(v) for v in self.table[env]))


def control_channel(cfg: Cfg, control: dict[str, torch.Tensor], num_tasks: int) -> ControlChannel:
    """The writing end of a run's channel (`control`: appo/protocol/buffers.py allocate_control). A run has one weight
    set per policy; `num_tasks` is the number of its train tasks (0 without a task schedule), e.g.
    `len(envs.make_task_assigner(cfg, env, 0).tasks)`."""
    return ControlChannel(control["assignments"], cfg.num_policies, cfg.num_policies, num_tasks)


class PolicyDraw:
    """A population's default assigner: every `every` episodes of each env (each agent row of a multi-agent env) its
    policy is drawn anew, uniformly at random; between draws it keeps its policy."""

    def __init__(self, num_policies: int, every: int = 1) -> None:
        self.num_policies, self.every = num_policies, max(1, every)
        self.episodes: dict[int, int] = {}  # env -> episodes ended since its last draw

    def initial(self, rng: np.random.Generator, num_envs: int) -> np.ndarray:
        if self.num_policies == 1:
            return np.zeros(num_envs, dtype=np.int64)
        return rng.integers(self.num_policies, size=num_envs)

    def next(self, rng: np.random.Generator, env: int = 0, current: int = 0) -> int:
        """The policy of env `env`'s next episode; `current` is its policy now."""
        if self.num_policies == 1:
            return 0
        ended = self.episodes.get(env, 0) + 1
        self.episodes[env] = ended % self.every
        return current if ended < self.every else int(rng.integers(self.num_policies))
