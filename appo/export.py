"""`python -m appo.export`: the command-line entry of appo/tools/export.py."""

import sys

from appo.tools.export import main

if __name__ == "__main__":
    sys.exit(main())
