"""Locks on the directories a run changes (the checkout, the overlay), held with flock on the directory itself.

Why the directory: the lock then lives exactly beside the state it protects, whatever TMPDIR says, and no lock
file is ever created (none can pile up or be left behind). The kernel drops it when the process dies, kill -9
included. The holder's pid, for the message, comes from /proc/locks; where that cannot tell, the message names none.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .errors import LockedError


def _holder(st: os.stat_result) -> str | None:
    """The pid holding a flock on the file with this stat, as /proc/locks reports it; None where it cannot tell."""
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "->" not in fields and len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == key:
            return fields[4]
    return None


@contextmanager
def _lock_dir(directory: Path, what: str, wait: bool) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = _holder(os.fstat(fd))
            who = f"another patchset run (pid {holder})" if holder else "another patchset run"
            raise LockedError(f"{who} is working on {what} {directory}; try again later") from exc
        yield
    finally:
        os.close(fd)


class DirLocks:
    """Exclusive locks on existing directories, taken one by one and released together; an inode is locked once."""

    def __init__(self, stack: ExitStack, wait: bool = False) -> None:
        self._stack, self._wait, self._seen = stack, wait, set()

    def take(self, directory: Path, what: str) -> None:
        """Lock directory (refused at once, with the holder's pid, unless wait) until the stack closes."""
        st = directory.stat()
        if (st.st_dev, st.st_ino) not in self._seen:
            self._seen.add((st.st_dev, st.st_ino))
            self._stack.enter_context(_lock_dir(directory, what, self._wait))
