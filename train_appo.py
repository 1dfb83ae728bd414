"""Train: `python train_appo.py --env=ENV [--FLAG=VALUE ...]` (README.md; ant_dir is the main job). Running the
same command again resumes. The same as `appo-train` once installed, and `appo.train(env=..., ...)` from Python."""

from __future__ import annotations

import sys

from appo.cli import train as main

if __name__ == "__main__":
    sys.exit(main())
