"""`flag()`: how every hyperparameter is declared, once, with its default and a one-line help. Shared by the
engine's flag groups (appo/config/cfg.py) and each algorithm's own group (appo/algorithms/<name>/flags.py), and free of
torch so that parsing flags stays cheap. `flags_to_argv`: keyword flags as the command line (appo.train, sweeps)."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def flag(default: Any, help: str) -> Any:  # noqa: A002 - "help" reads best next to each field
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def single_policy_errors(c: Any, model: str = "a feed-forward policy") -> list[str]:
    """The refusals of an algorithm that trains one feed-forward policy per run (everything but APPO): PBT,
    several policies and --use_rnn, one line each naming the flag and what would do."""
    errors = []
    if c.with_pbt:
        errors.append(
            f"--with_pbt: not supported with --algo={c.algo} (one policy per run); drop it or use --algo=appo"
        )
    if c.num_policies != 1:
        errors.append(f"--num_policies={c.num_policies}: --algo={c.algo} trains exactly one policy; use 1")
    if c.use_rnn:
        errors.append(f"--use_rnn=True: --algo={c.algo} has {model} only; pass --use_rnn=False")
    return errors


def flags_to_argv(flags: dict[str, Any]) -> list[str]:
    """Keyword arguments as command-line flags: lists as several values, bools as True/False, None left out."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            argv += [f"--{name}", *(str(v) for v in value)]
        else:
            argv.append(f"--{name}={value}")
    return argv
