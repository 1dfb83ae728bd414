"""Dict observations (an image and a vector, say) as one array, so that they travel through the engine as every
other observation does: one slot of the shared trajectory tensors per step, one slice per transfer, one field of a
replay. `make_env` wraps an env whose observation space is a Dict of Boxes in `PackDictObs`, whose observations are
the raw bytes of each key side by side in a uint8 vector (`PackedObsSpace`): a uint8 image stays one byte a pixel,
a float32 vector four bytes an entry. The model reads the space's `dict_space` and `layout` and takes the bytes
apart again where it reads them (appo/models/actor_critic.py), into the dict of tensors its Dict encoder takes.

The layout (which key where, in numpy alone) is appo/utils/packed_layout.py's, shared with the torch-free policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from appo.utils import packed_layout


class PackedObsSpace(gym.spaces.Box):
    """A uint8 Box of the packed bytes of a Dict space's observations; `dict_space` the Dict, `layout` where each
    key's bytes lie. ValueError, one line, for a Dict with a key that is not a Box."""

    def __init__(self, dict_space: gym.spaces.Dict, name: str = "") -> None:
        for key, sub in dict_space.spaces.items():
            if not isinstance(sub, gym.spaces.Box):
                raise ValueError(f"--env={name}: Dict observation key {key!r} is {sub}; only Box keys are supported")
        layout, total = packed_layout.plan({k: (sub.dtype, sub.shape) for k, sub in dict_space.spaces.items()})
        super().__init__(0, 255, (total,), np.uint8)
        self.dict_space, self.layout = dict_space, layout

    def pack(self, obs: Mapping[str, Any]) -> np.ndarray:
        """One observation (a dict by key) as its bytes [total]."""
        return packed_layout.pack(obs, self.layout, self.shape[0])

    def unpack(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """Packed observations [..., total] back into a dict of arrays [..., *the key's shape]."""
        return packed_layout.unpack(packed, self.layout)


class PackDictObs(gym.ObservationWrapper):
    """An env with a Dict of Boxes as its observation space, seen with packed observations (`PackedObsSpace`)."""

    def __init__(self, env: gym.Env, name: str = "") -> None:
        super().__init__(env)
        self.observation_space = PackedObsSpace(env.observation_space, name)

    def observation(self, observation: Mapping[str, Any]) -> np.ndarray:
        return self.observation_space.pack(observation)


def is_dict_obs(env: Any) -> bool:
    return isinstance(getattr(env, "observation_space", None), gym.spaces.Dict)
