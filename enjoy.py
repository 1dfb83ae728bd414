"""Watch a trained policy: `python enjoy.py [--experiment=NAME] [--checkpoint=best] [--save_video]`, the same as
`appo-enjoy` once installed. The env and model come from train_dir/NAME/cfg.json; appo/tools/evaluate.py has the
evaluation flags. Without --experiment, the run of --train_dir written most recently is watched."""

from __future__ import annotations

import sys

from appo.cli import enjoy as main

if __name__ == "__main__":
    sys.exit(main())
