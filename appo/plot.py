"""`python -m appo.plot`: the command-line entry of appo/tools/plot.py (kept at this name for users' commands)."""

import sys

from appo.tools.plot import main

if __name__ == "__main__":
    sys.exit(main())
