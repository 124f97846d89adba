"""SIGINT and SIGTERM as exceptions (so apply rolls back in order), or held back while a step must finish."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from .errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def name(signum: int) -> str:
    return signal.Signals(signum).name


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


def install() -> None:
    """SIGINT and SIGTERM raise Interrupted (exit 130 / 143 once the run has cleaned up)."""
    for signum in SIGNALS:
        signal.signal(signum, _raise)


def hold() -> list[int]:
    """Record SIGINT/SIGTERM instead of acting on them, for the rest of the process: once a run has committed its
    result (or has only its report left to print), stopping it can change nothing, and an exception would only
    turn a true report into a false failure or a traceback. Returns the list the signals arriving are appended to.
    """
    received: list[int] = []
    for signum in SIGNALS:
        signal.signal(signum, lambda s, _f: received.append(s))
    return received


@contextmanager
def deferred() -> Iterator[list[int]]:
    """Record SIGINT/SIGTERM instead of acting on them (a rollback or revert must not stop half way).

    Yields the list the signals arriving meanwhile are appended to; the previous handlers come back after.
    """
    received: list[int] = []
    previous = {signum: signal.signal(signum, lambda s, _f: received.append(s)) for signum in SIGNALS}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
