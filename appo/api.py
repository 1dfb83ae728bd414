"""appo from Python: `appo.train(...)` starts a run as train_appo.py would, `appo.load_policy(...)` gives a trained
policy to act with in one's own code (numpy only: appo/numpy_policy/policy.py).

    import appo
    run = appo.train(env="CartPole-v1", experiment="cartpole", train_for_env_steps=100_000)
    policy = appo.load_policy(run.run_dir)
    action, state = policy.act(obs)

`train` takes the command line's flags as keyword arguments (the same names, values as Python values), parses
them through the command line's own parser and checks, so errors read the same; a bad flag raises `TrainError`
with the one-line message train_appo.py would print. Like any program that starts processes with the `spawn`
method, a script that calls `train` needs an `if __name__ == "__main__":` guard (a notebook does not).
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appo.config.flags import flags_to_argv
from appo.utils.paths import budget_reached, cfg_path, checkpoint_dir


class TrainError(RuntimeError):
    """A run that could not start (a bad flag, a busy experiment ...); the message is train_appo.py's."""


@dataclass
class Run:
    """What `appo.train` returns: where the run lives and what it left."""

    run_dir: Path
    cfg: Any = field(repr=False)  # the run's Cfg
    # train_appo.py's exit status: 0 when the run stopped cleanly (its budget reached, --train_for_seconds up, or
    # Ctrl-C, which saves and exits 0 as on the command line), 143 after SIGTERM; `finished` tells them apart
    status: int
    checkpoints: list[Path | None] = field(default_factory=list)  # the newest checkpoint of each policy
    best: list[Path | None] = field(default_factory=list)  # the best checkpoint of each policy, where one was kept
    # whether every policy's newest checkpoint holds the run's --train_for_env_steps (or --train_for_iterations):
    # False for a run that a signal, --train_for_seconds or an error stopped before its budget (train again to resume)
    finished: bool = False

    def load_policy(self, policy_index: int | str = 0, checkpoint: str = "latest", seed: int = 0) -> Any:
        return load_policy(self.run_dir, checkpoint=checkpoint, policy_index=policy_index, seed=seed)


@contextlib.contextmanager
def _errors_as_exception(errors: io.StringIO) -> Any:
    """A SystemExit of the command line's checks as TrainError with the last line they printed."""
    try:
        yield
    except SystemExit as exc:
        lines = [line for line in errors.getvalue().splitlines() if line.strip()]
        message = lines[-1] if lines else f"exit status {exc.code}"
        raise TrainError(message.removeprefix("train_appo.py: ").removeprefix("error: ")) from None


def _unhook_logging(tee: Any) -> None:
    """Point the appo logger's console handler (made during the run, on the redirected stderr) back at stderr."""
    import logging

    from appo.utils.logging import log

    for handler in log.handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is tee:
            handler.setStream(sys.stderr)


def run_command_line(argv: list[str] | None) -> tuple[Any, int]:
    """train_appo.py: parse, check and run; (cfg, exit status). SystemExit(2) with `error: ...` on bad input."""
    from appo.config.cfg import parse_cfg
    from appo.protocol.processes import stop_signals_unblocked

    with stop_signals_unblocked():
        cfg = parse_cfg(argv)
        from appo.launch import run  # after parsing: --help stays fast

        return cfg, run(cfg)


class _Tee(io.TextIOBase):
    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            s.flush()


def train(env: str | None = None, experiment: str | None = None, **flags: Any) -> Run:
    """Train as `python train_appo.py --env=ENV --experiment=NAME --FLAG=VALUE ...` would (resuming a run of
    that name, like the command line); returns a `Run`. `TrainError` for what the command line rejects."""
    from appo.config.cfg import parse_cfg

    argv = flags_to_argv({"env": env, "experiment": experiment, **flags})
    errors = io.StringIO()
    with _errors_as_exception(errors), contextlib.redirect_stderr(errors):  # argparse's usage text: not for Python
        cfg = parse_cfg(argv)
    from appo.launch import run
    from appo.protocol.processes import stop_signals_unblocked

    tee = _Tee(sys.stderr, errors)
    try:
        with _errors_as_exception(errors), contextlib.redirect_stderr(tee), stop_signals_unblocked():
            status = run(cfg)
    finally:
        _unhook_logging(tee)
    from appo.config.cfg import experiment_dir
    from appo.learning.checkpoint import find_best, list_checkpoints

    run_dir = experiment_dir(cfg)
    ckpt_dirs = [checkpoint_dir(run_dir, k) for k in range(cfg.num_policies)]
    return Run(
        run_dir,
        cfg,
        status,
        [(list_checkpoints(d) or [None])[-1] for d in ckpt_dirs],
        [find_best(d) for d in ckpt_dirs],
        budget_reached(run_dir),
    )


def load_policy(path: str | Path, checkpoint: str = "latest", policy_index: int | str = 0, seed: int = 0) -> Any:
    """A trained policy (appo/numpy_policy/policy.py's `Policy`) from `path`: a run dir (its policy `policy_index`,
    or "best" for the one its best_policy.json names; the `latest` or `best` checkpoint), a checkpoint file, or an
    npz export (`python -m appo.export`). An npz
    needs numpy alone; a run or a checkpoint needs torch to read the checkpoint (the policy then acts in numpy).
    `seed` seeds the draws of `act(..., deterministic=False)`. ValueError (one line) for a path that is none of
    these, a run whose cfg.json is unreadable, or whose env cannot be built here. `latest` is the newest checkpoint
    that loads (an unreadable newer one is skipped with a warning, as enjoy.py does)."""
    from appo.numpy_policy.policy import Policy
    from appo.numpy_policy.policy_file import read_policy_file

    path = Path(path)
    if path.suffix == ".npz":
        return Policy(*read_policy_file(path), seed=seed)
    if not path.exists():
        raise ValueError(f"{path}: no such run, checkpoint or .npz export")
    if path.is_dir() and not cfg_path(path).is_file():
        raise ValueError(f"{path}: not a run directory (no cfg.json)")
    from appo.tools.export import ExportError, chosen_policy, find_checkpoint, policy_parts

    try:
        if path.is_dir():
            policy_index = chosen_policy(path, str(policy_index))
        run, ckpt = find_checkpoint(path, checkpoint, int(policy_index))
        meta, state, arrays, _ = policy_parts(run, ckpt)
    except ExportError as exc:
        raise ValueError(str(exc)) from None
    return Policy(meta, state, arrays, seed=seed)
