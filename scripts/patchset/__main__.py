"""`python -m patchset` (with scripts/ on PYTHONPATH).

SIGINT and SIGTERM are handled from the first line on: the applier's imports take a tenth of a second and more,
and a Ctrl-C then would otherwise print the traceback of whatever module was loading. Nothing has changed before
the command runs, so the early handler says so in one line and exits as a shell reports a signal (128 + it);
cli.main replaces it with the handling a run needs (rollback, deferral) before the command starts. Only modules
Python has loaded by then are used here: `signal` itself imports enum, which takes long enough to be interrupted.
"""

import os
import sys

import _signal

_NAMES = {_signal.SIGINT: "SIGINT", _signal.SIGTERM: "SIGTERM"}


def _stop_early(signum: int, _frame: object) -> None:
    command = f" {sys.argv[1]}" if len(sys.argv) > 1 else ""
    os.write(2, f"patchset{command}: error: interrupted by {_NAMES[signum]}; nothing changed\n".encode())
    os._exit(128 + signum)


for _signum in _NAMES:
    _signal.signal(_signum, _stop_early)

from .cli import main  # noqa: E402 - after the handlers, see the docstring

sys.exit(main())
