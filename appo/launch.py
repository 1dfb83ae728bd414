"""The run loop for a parsed cfg: the engine's driver (appo/driver/runner.py) for algorithms that sample through
actor workers continuously, or MAML's synchronous meta-iterations (appo/maml/driver.py) for those whose traits
consume task-grouped meta-batches. The choice lives here, above both, so that neither loop imports the other;
train_appo.py and `appo.train` (appo/api.py) start every run through `run`."""

from __future__ import annotations

from appo.config.cfg import Cfg
from appo.driver.run_lock import released_at_end


def run(cfg: Cfg) -> int:
    """Train until a stop criterion; returns the process exit status. The run directory is this run's alone until
    then (a second driver on it exits 2)."""
    with released_at_end():
        if cfg.traits.consumes == "meta_batches":  # meta-gradient algorithms run synchronous meta-iterations
            from appo.config.verify import verify_or_exit
            from appo.maml.driver import run as run_meta_iterations

            verify_or_exit(cfg)
            return run_meta_iterations(cfg)
        from appo.driver.runner import train

        return train(cfg)
