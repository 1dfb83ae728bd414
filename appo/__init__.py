"""appo: an asynchronous PPO engine (Sample Factory style) in PyTorch.

`appo.train(...)` and `appo.load_policy(...)` (appo/api.py) are the Python entry points. Importing appo imports
neither torch nor anything else heavy: a policy exported as npz runs where only numpy is installed."""

from __future__ import annotations

import importlib
from typing import Any

try:  # set up first: setproctitle finds the process's argv memory through the first environment variable, which
    # gymnasium and tensorboardX may rewrite on import (a run whose environment began with theirs had no `appo:` title)
    import setproctitle

    setproctitle.getproctitle()
except ImportError:  # optional for correctness: titles only help `ps`, `top` and the fault tests
    pass

__version__ = "0.2.0"
__all__ = ["load_policy", "train"]


# appo.api is imported by name when first called: `import appo` stays light, and this package, which every module of
# appo.envs and appo.utils lies in, imports nothing of the engine (the layering test counts appo.api as the top).


def train(env: str | None = None, experiment: str | None = None, **flags: Any) -> Any:
    """Train as train_appo.py would; see appo/api.py."""
    return importlib.import_module("appo.api").train(env, experiment, **flags)


def load_policy(path: Any, checkpoint: str = "latest", policy_index: int = 0, seed: int = 0) -> Any:
    """A trained policy to act with (numpy only); see appo/api.py."""
    return importlib.import_module("appo.api").load_policy(
        path, checkpoint=checkpoint, policy_index=policy_index, seed=seed
    )
