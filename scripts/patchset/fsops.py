"""The one write layer of apply and revert: every filesystem mutation of a target tree goes through here.

Why one layer: atomicity, modes and temporaries have to be right in one place only, and every mutation can be
counted, so the fault tests stop the process before each one in turn:
PATCHSET_FAULT_AT=<n>:kill|term|int|pause=<seconds>|errno=<ENOSPC|EACCES|...> acts just before mutation n
(1-based); <n>:full makes the disk full from mutation n on: each later mutation that needs new space (NEEDS_SPACE)
fails with ENOSPC. PATCHSET_FAULT_TRACE=<file> appends one line per mutation ("<n> <op> <path>").

Every temporary carries TMP_PREFIX in its name and lives beside its destination, so recovery finds and
removes exactly ours (under the lock of the tree it lies in) and nothing else. A private temporary
directory is filled in one counted step: nothing inside it is visible before its rename.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

TMP_PREFIX = ".flashsac-tmp-"

_mutations = 0
_names = 0
#: The mutations that take new space on the disk: a new file's bytes, a directory, a filled directory. The others
#: (rename, chmod, unlink, rmdir, rmtree, cleanup, fsync of bytes already written) need none.
NEEDS_SPACE = ("write", "fill", "mkdir")


def _step(op: str, path: Path) -> None:
    """Count one mutation; the test hook may act before it happens."""
    global _mutations
    _mutations += 1
    trace = os.environ.get("PATCHSET_FAULT_TRACE")
    if trace:
        with open(trace, "a", encoding="utf-8") as handle:
            handle.write(f"{_mutations} {op} {path}\n")
    at, _, action = os.environ.get("PATCHSET_FAULT_AT", "").partition(":")
    if at and action == "full" and _mutations >= int(at) and op in NEEDS_SPACE:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    if not at or int(at) != _mutations:
        return
    if action in ("kill", "term", "int"):
        os.kill(os.getpid(), {"kill": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT}[action])
    elif action.startswith("pause="):
        time.sleep(float(action.split("=", 1)[1]))
    elif action.startswith("errno="):
        code = getattr(errno, action.split("=", 1)[1])
        raise OSError(code, os.strerror(code), str(path))


def tmp_path(parent: Path, tag: str) -> Path:
    """A fresh temporary name beside its destination, recognisable as ours."""
    global _names
    _names += 1
    return parent / f"{TMP_PREFIX}{tag}-{os.getpid()}-{_names}"


def _write_fd(path: Path, data: bytes, mode: int) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        raise
    return fd


def _named(exc: OSError, where: Path) -> OSError:
    """The error naming where it happened for the user: where, in place of no path or a temporary of ours (a
    full disk's os.write names none), so that its one line says which file or folder could not be written."""
    if exc.filename is not None and TMP_PREFIX not in str(exc.filename):
        return exc
    named = OSError(exc.errno, exc.strerror, str(where))
    named.__cause__ = exc
    return named


def write_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace path atomically with data and exactly this mode: readers see old or new, never half."""
    tmp = tmp_path(path.parent, path.name)
    try:
        _step("write", tmp)
        fd = _write_fd(tmp, data, mode)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _named(exc, path) from exc
    try:
        try:
            _step("fsync", tmp)
            os.fsync(fd)
        finally:
            os.close(fd)
        _step("rename", path)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _named(exc, path) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_aside(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write a new file (a temporary name of ours) with data, on disk: bytes put aside for a later move_file."""
    try:
        _step("write", path)
        fd = _write_fd(path, data, mode)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise _named(exc, path.parent) from exc
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def mkdir(path: Path) -> None:
    _step("mkdir", path)
    os.mkdir(path)


def missing_parents(path: Path, stop: Path) -> list[Path]:
    """Directories between stop and path that do not exist yet, outermost first."""
    missing = []
    for parent in [path, *path.parents]:
        if parent == stop or parent.exists():
            break
        missing.append(parent)
    return missing[::-1]


def rename(src: Path, dst: Path) -> None:
    """Rename without replacing: dst must not exist (directories)."""
    _step("rename", dst)
    if dst.exists() or dst.is_symlink():
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def move_file(src: Path, dst: Path) -> None:
    """Rename a file over dst in one step (the file itself, with its inode and its other hard links, takes dst's
    place)."""
    _step("rename", dst)
    os.replace(src, dst)


def chmod(path: Path, mode: int) -> None:
    _step("chmod", path)
    os.chmod(path, mode)


def unlink(path: Path) -> None:
    _step("unlink", path)
    path.unlink()


def rmdir(path: Path) -> None:
    _step("rmdir", path)
    path.rmdir()


def discard(path: Path) -> None:
    """Remove a file or a whole directory so that a kill never leaves it half removed.

    A directory is first renamed to a temporary name (atomic), then deleted: an interrupted delete
    leaves only a temporary, which the next run removes.
    """
    if not path.is_dir() or path.is_symlink():
        unlink(path)
        return
    doomed = tmp_path(path.parent, "discard")
    rename(path, doomed)
    _step("rmtree", doomed)
    shutil.rmtree(doomed)


#: Why a hard link cannot be made (another filesystem, one that has none, the link limit, a file gone): the caller
#: goes without it. Any other error (a full disk) is an error.
_NO_HARD_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOENT}


def fill_dir(parent: Path, tag: str, files: Mapping[str, tuple[bytes, int]],
             links: Mapping[str, str] | None = None, hard_links: Mapping[str, Path] | None = None) -> Path:
    """A new private temporary directory in parent holding files (relative path -> bytes, mode), symlinks and hard
    links to existing files (relative path -> the file), each left out where the filesystem cannot make it.

    Two counted steps: create the directory, fill it. Nothing inside is visible until the caller renames it.
    """
    tmp = tmp_path(parent, tag)
    try:
        mkdir(tmp)
    except OSError as exc:
        raise _named(exc, parent) from exc
    try:
        _step("fill", tmp)
        for rel, (data, mode) in files.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = _write_fd(target, data, mode)
            os.close(fd)
        for rel, link_target in (links or {}).items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(link_target, tmp / rel)
        for rel, existing in (hard_links or {}).items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(existing, tmp / rel, follow_symlinks=False)
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINK:
                    raise
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _named(exc, parent) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def temporaries(dirs: Iterable[Path]) -> list[Path]:
    """Our temporaries directly inside dirs (left by a killed run)."""
    found: set[Path] = set()
    for directory in dirs:
        if directory.is_dir() and not directory.is_symlink():
            found.update(p for p in directory.iterdir() if p.name.startswith(TMP_PREFIX))
    return sorted(found)


def remove_temporaries(dirs: Iterable[Path]) -> int:
    """Delete our temporaries in dirs; the caller holds the lock of every tree they lie in."""
    stale = temporaries(dirs)
    for path in stale:
        _step("cleanup", path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return len(stale)
