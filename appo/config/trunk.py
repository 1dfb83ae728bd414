"""The value trunk's flags, checked in one place: at startup (verify.py) and when a model is built (actor_critic.py),
so a Cfg made in Python meets the same rules as one from the command line."""

from __future__ import annotations

from appo.config.cfg import Cfg


def value_trunk_errors(cfg: Cfg) -> list[str]:
    """The first broken rule of --separate_value_trunk, --value_mlp_layers and --value_input as one line; empty when
    they agree. A team or state value (--value_input) has a trunk of its own, which --value_mlp_layers sizes."""
    sizes = " ".join(map(str, cfg.value_mlp_layers))
    central = getattr(cfg, "value_input", "local") != "local"
    if cfg.separate_value_trunk and central:
        return [f"--separate_value_trunk: --value_input={cfg.value_input} already gives the value a trunk of its own"]
    if cfg.separate_value_trunk and cfg.use_rnn:
        return ["--separate_value_trunk: not supported with --use_rnn"]
    if cfg.value_mlp_layers and not (cfg.separate_value_trunk or central):
        return [
            f"--value_mlp_layers {sizes}: sizes the separate value trunk; add --separate_value_trunk (or a "
            "--value_input other than local)"
        ]
    if any(size <= 0 for size in cfg.value_mlp_layers):
        return [f"--value_mlp_layers {sizes}: every hidden size must be > 0"]
    return []
