"""What a learner carries across a resume besides its weights, optimizer and counters: the random generators (so a
resumed run goes on as if it had not stopped: minibatch shuffles, action noise drawn by torch, on the CPU and on
CUDA devices), and the hyperparameters PBT may have changed, which give way to a flag the user changed since the
checkpoint was written (the command line wins, as for every other flag on resume)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def random_states() -> dict[str, Any]:
    """The process's random generators: torch's (CPU, and every CUDA device's once CUDA is in use), numpy's global
    one, Python's. Plain lists and tensors only: checkpoints are read back with torch.load(weights_only=True)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    numpy_state = [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)]
    states = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_random_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"].cpu())
    name, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = states["python"]
    random.setstate((version, tuple(internal), gauss_next))
    cuda = states.get("cuda")
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):  # the same devices only
        torch.cuda.set_rng_state_all([state.cpu() for state in cuda])


def resumed_hparams(state: dict[str, Any], flags: dict[str, float]) -> tuple[dict[str, float], list[str]]:
    """The hyperparameters a resumed learner goes on with: the checkpoint's (PBT's mutations kept) except those whose
    flag differs from the one the checkpoint was trained under (`flag_hparams`: the user changed it on this command
    line, and it wins). Returns them and the names of the overridden ones. A checkpoint without `flag_hparams`
    keeps all of its own."""
    saved = dict(state.get("hparams", {}))
    saved_flags = state.get("flag_hparams")
    if saved_flags is None:
        return saved, []
    overridden = sorted(k for k in saved if k in flags and k in saved_flags and saved_flags[k] != flags[k])
    return {k: v for k, v in saved.items() if k not in overridden}, overridden
