"""The grace a stopped run has to end by itself, for the training loop's stop and for the entry script's.

Standard library only: the entry script imports it before its own imports (seconds of them), so that a signal in
that time can still arm the forced exit; the training loop's stop (``preemption.StopSignals``) reads the same
grace.
"""

from __future__ import annotations

import os
import sys
import threading

#: Seconds from the first signal to the forced exit (a graceful stop that hangs still ends).
GRACE_ENV = "FLASHSAC_STOP_GRACE_S"
DEFAULT_GRACE_S = 20.0


def grace_s() -> float:
    """The grace this process has (``FLASHSAC_STOP_GRACE_S``, else 20 s)."""
    return float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_S))


def exit_after_grace(code: int, who: str) -> threading.Timer:
    """Arm the forced exit of a stop with nothing to save: if the process has not ended ``grace_s()`` seconds from
    now (an exit handler or a thread that an import started hangs on the way out), one line and ``os._exit(code)``.
    A daemon timer: a process that ends in time never waits for it."""
    def force() -> None:
        line = f"[{who}] the stop did not end within {grace_s():g} s: exiting now (exit {code})\n"
        try:
            os.write(sys.stderr.fileno(), line.encode())
        finally:
            os._exit(code)

    timer = threading.Timer(grace_s(), force)
    timer.daemon = True
    timer.start()
    return timer
