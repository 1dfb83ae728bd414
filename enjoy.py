"""Watch a trained policy: `python enjoy.py --experiment=NAME [--checkpoint=best] [--save_video]`.

The env and model come from train_dir/NAME/cfg.json; appo/tools/evaluate.py has the evaluation flags."""

from __future__ import annotations

import sys

from appo.config.cfg import parse_cfg
from appo.tools.evaluate import EnjoyCfg, enjoy


def main(argv: list[str] | None = None) -> int:
    cfg = parse_cfg(argv, prog="enjoy.py", cls=EnjoyCfg)
    return enjoy(cfg)


if __name__ == "__main__":
    sys.exit(main())
