"""basic's app in a process that lingers 5 s as it exits (an atexit hook, as an application's
clean-up or non-daemon thread would hold it): a window for a signal after serving ended, wide
enough that a loaded machine's test still signals inside it. Logs "atexit" when the hook starts."""
import atexit
import time

from basic import app, log  # noqa: F401 (app: the served application)


def _linger():
    log("atexit")
    time.sleep(5.0)


atexit.register(_linger)
