"""``python -m skirr``: the command line (see skirr.main)."""
import sys

from skirr.main import main

if __name__ == "__main__":
    status = main()
    from skirr.server import exit_on_late_signals

    exit_on_late_signals()  # the exit that follows is not the default death's
    sys.exit(status)
