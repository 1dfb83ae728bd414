"""`python -m appo.runs`: the command-line entry of appo/tools/runs.py (the runs of a train_dir as a table)."""

import sys

from appo.tools.runs import main

if __name__ == "__main__":
    sys.exit(main())
