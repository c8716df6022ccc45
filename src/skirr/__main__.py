"""``python -m skirr``: the command line (see skirr.main)."""
import sys

from skirr.main import main

if __name__ == "__main__":
    sys.exit(main())
