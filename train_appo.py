"""Train: `python train_appo.py --env=ENV [--FLAG=VALUE ...]` (README.md; ant_dir is the main job). Running the
same command again resumes. The same as `appo.train(env=..., ...)` from Python (appo/api.py)."""

from __future__ import annotations

import sys

from appo.api import run_command_line


def main(argv: list[str] | None = None) -> int:
    return run_command_line(argv)[1]


if __name__ == "__main__":
    sys.exit(main())
