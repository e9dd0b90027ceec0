"""`python -m ncclshim ARGS...` runs the `ncclshim` command installed with this package."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
