"""One exception type for every refusal, so the CLI can print exactly one line and exit non-zero."""

from __future__ import annotations

import errno
import signal

_OS_HINTS = {
    errno.ENOSPC: "disk full: free space and retry",
    errno.EDQUOT: "disk quota exceeded: free space and retry",
    errno.EACCES: "permission denied: check the owner and mode of that path",
    errno.EPERM: "operation not permitted: check the owner and mode of that path",
    errno.EROFS: "read-only file system",
}


class PatchsetError(Exception):
    """A refusal or failure the user can act on; its message is a single line."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class LockedError(PatchsetError):
    """Another patchset process holds the checkout's lock."""

    exit_code = 3


class Interrupted(PatchsetError):
    """SIGINT or SIGTERM arrived; the exit status is the shell's 128 + signal number."""

    def __init__(self, signum: int, message: str = "") -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(message or f"interrupted by {signal.Signals(signum).name}")


def os_error_message(exc: OSError) -> str:
    """An OSError as one line: what failed, on which path, and what to do about it."""
    where = f": {exc.filename}" if exc.filename else ""
    hint = _OS_HINTS.get(exc.errno or 0)
    return f"{exc.strerror or exc}{where}" + (f" ({hint})" if hint else "")


def with_note(exc: BaseException, note: str) -> PatchsetError:
    """The one-line error for exc with a note appended (what the rollback did), keeping its exit status."""
    if isinstance(exc, Interrupted):
        return Interrupted(exc.signum, f"{exc}; {note}")
    if isinstance(exc, PatchsetError):
        out = PatchsetError(f"{exc}; {note}")
        out.exit_code = exc.exit_code
        return out
    if isinstance(exc, OSError):
        return PatchsetError(f"{os_error_message(exc)}; {note}")
    return PatchsetError(f"internal error ({type(exc).__name__}: {exc}); {note}")
