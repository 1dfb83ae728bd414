"""The replay of an off-policy learner: a ring of `capacity` transitions (obs, action, reward, next obs,
terminated), filled from whole trajectories the learner copied out of the shared trajectory slots
(`transitions`), sampled uniformly from the filled rows only.

Why the learner fills it rather than actor workers writing into a shared ring: the trajectory slots already
move between actors and learner with ownership (appo/protocol/buffers.py), so a trajectory is whole and no longer
written to when the learner reads it: no torn rows, no lock, no second protocol. Backpressure comes with it
(actor workers pause while the learner holds their slot groups), and the copy is one indexed write of a few
hundred rows per trajectory, microseconds against the milliseconds of one gradient update. The ring is written
and sampled by the training thread only."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")


def transitions(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """Trajectories [N, T(+1), ...] (appo/protocol/buffers.py fields, `final_obs` included) -> N * T transitions.

    The next observation of step t is obs[t + 1], except where the episode ended at t: the actor replaced obs[t + 1]
    by the next episode's first observation, and the observation the env returned is in final_obs[t]. An episode
    ended by a time limit (`truncated`) is not terminated: the critic bootstraps from its final observation. A step
    whose env raised has no successor (`step_failed` 1.0, appo/sampling/split_envs.py; final_obs holds no
    observation there): it is left out, not stored as a made-up transition. Observations keep their dtype."""
    T = batch["rewards"].shape[1]
    obs = batch["obs"]
    ended = batch["dones"].bool().reshape(*batch["dones"].shape, *([1] * (obs.dim() - 2)))
    next_obs = torch.where(ended, batch["final_obs"], obs[:, 1 : T + 1])
    terminated = batch["dones"] * (1.0 - batch["truncated"])
    flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731 - [N, T, ...] -> [N * T, ...]
    rows = {
        "obs": flat(obs[:, :T]),
        "actions": flat(batch["actions"]),
        "rewards": flat(batch["rewards"]),
        "next_obs": flat(next_obs),
        "terminated": flat(terminated),
    }
    happened = flat(batch["step_failed"]) == 0
    return rows if bool(happened.all()) else {k: v[happened] for k, v in rows.items()}


class Replay:
    """Observations (obs, next_obs) are kept in `obs_dtype`, the trajectory tensors' (appo/protocol/buffers.py
    obs_dtype: a ring of uint8 frames takes a quarter of float32's memory, and so does its saved replay.pth); the
    other fields are float32. The models cast what they sample."""

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_dim: int,
        device: str = "cpu",
        obs_dtype: torch.dtype = torch.float32,
    ) -> None:
        self.capacity = capacity
        shapes = {"obs": obs_shape, "actions": (action_dim,), "rewards": (), "next_obs": obs_shape, "terminated": ()}
        dtypes = {"obs": obs_dtype, "next_obs": obs_dtype}
        # torch.empty: pages are touched only as rows are written, so a 1M ring costs memory as it fills.
        self.data = {
            k: torch.empty((capacity, *s), dtype=dtypes.get(k, torch.float32), device=device) for k, s in shapes.items()
        }
        self.pos = 0  # next row to write
        self.size = 0  # rows filled

    def add(self, rows: dict[str, Tensor]) -> None:
        """Append n transitions (each field [n, ...]), overwriting the oldest once full."""
        n = len(rows["rewards"])
        if n > self.capacity:  # only the newest capacity rows would survive anyway
            rows = {k: v[-self.capacity :] for k, v in rows.items()}
            n = self.capacity
        first = min(n, self.capacity - self.pos)
        for k in FIELDS:
            src = rows[k].to(self.data[k].device, self.data[k].dtype)
            self.data[k][self.pos : self.pos + first] = src[:first]
            self.data[k][: n - first] = src[first:]
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, n: int, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """n transitions drawn uniformly (with replacement) from the filled rows."""
        if self.size == 0:
            raise ValueError("sampling an empty replay")
        device = self.data["rewards"].device
        idx = torch.randint(self.size, (n,), generator=generator, device=device)
        return {k: v[idx] for k, v in self.data.items()}

    def state_dict(self) -> dict[str, Any]:
        """The filled rows in order of age (oldest first) and the counters; tensors only (weights_only loads)."""
        order = torch.arange(self.pos, self.pos + self.size) % self.capacity if self.size == self.capacity else None
        # clone: a slice would drag the whole preallocated storage into the file.
        rows = {k: (v[order] if order is not None else v[: self.size]).cpu().clone() for k, v in self.data.items()}
        return {"rows": rows, "size": self.size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Refill from `state_dict()` output (a smaller ring keeps the newest rows)."""
        self.pos = self.size = 0
        if state["size"]:
            self.add(state["rows"])
