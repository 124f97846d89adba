"""The state a checkout carries while patched: a journal that survives kill -9, pre-image backups, a lock.

Layout inside the checkout: .flashsac-overlay/{state.json, backup/<path>, .gitignore}. state.json is
always replaced atomically, and its 'phase' says how far a run got: 'applying' (files may be half written),
'applied', 'reverting'. The lock lives outside the checkout, so a refused run leaves the checkout untouched.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import LockedError, PatchsetError
from .paths import STATE_DIRNAME

STATE_FILE = "state.json"


def state_dir(checkout: Path) -> Path:
    return checkout / STATE_DIRNAME


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write via a temp file in the same directory, fsync, rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_state(checkout: Path) -> dict[str, Any] | None:
    path = state_dir(checkout) / STATE_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise PatchsetError(f"{path} is corrupt ({exc}); restore the checkout with git and delete it") from exc


def save_state(checkout: Path, state: dict[str, Any]) -> None:
    directory = state_dir(checkout)
    directory.mkdir(exist_ok=True)
    ignore = directory / ".gitignore"
    if not ignore.exists():
        atomic_write(ignore, b"# patchset state: never commit\n*\n")
    atomic_write(directory / STATE_FILE, (json.dumps(state, indent=2, sort_keys=True) + "\n").encode())


def backup_path(checkout: Path, rel: str) -> Path:
    return state_dir(checkout) / "backup" / rel


@contextmanager
def locked(resource: Path, what: str) -> Iterator[None]:
    """Exclusive, non-blocking lock for one resource (checkout or overlay), keyed by its real path."""
    key = hashlib.sha256(str(resource.resolve()).encode()).hexdigest()[:16]
    lock_path = Path(tempfile.gettempdir()) / f"flashsac-patchset-{key}.lock"
    handle = open(lock_path, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise LockedError(f"another patchset run (pid {holder}) is working on {what} {resource}; try again later")
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()
