"""`python -m appo.sweep`: the command-line entry of appo/tools/sweep.py (kept at this name for users' commands)."""

import sys

from appo.tools.sweep import main

if __name__ == "__main__":
    sys.exit(main())
