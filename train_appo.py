"""Train: `python train_appo.py --env=ant_dir --num_workers=16`. Running the same command again resumes."""

from __future__ import annotations

import sys

from appo.config.cfg import parse_cfg


def main(argv: list[str] | None = None) -> int:
    cfg = parse_cfg(argv)
    from appo.driver.runner import run  # after parsing: --help stays fast

    return run(cfg)


if __name__ == "__main__":
    sys.exit(main())
