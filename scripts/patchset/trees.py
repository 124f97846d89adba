"""The target trees: a user's UniLab checkout (identified by git HEAD and file content) and the overlay packages
inside their pinned wheel or sdist; plus the embedded default UniLab tree made from the pinned sdist."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import git

from .errors import PatchsetError
from .fsops import TMP_PREFIX

EMBEDDED_AUTHOR = git.Actor("patchset", "patchset@localhost")
EMBEDDED_DATE = "2026-01-01T00:00:00+00:00"


def read_file(root: Path, rel: str) -> bytes | None:
    path = root / rel
    if path.is_symlink():
        raise PatchsetError(f"{rel} in {root} is a symlink; refusing to patch through it")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PatchsetError(f"cannot read {path}: {exc.strerror}") from exc


def file_marker(root: Path, rel: str) -> str | None:
    """What stands at root/rel, comparable with recorded sha256s: sha256 of a file, None when absent,
    'symlink:<target>' for a link, 'not a regular file' for anything else. Never follows a link."""
    path = root / rel
    if path.is_symlink():
        return f"symlink:{os.readlink(path)}"
    if path.exists() and not path.is_file():
        return "not a regular file"
    data = read_file(root, rel)
    return None if data is None else hashlib.sha256(data).hexdigest()


def marker_note(marker: str | None) -> str:
    """What a user must be told about a file_marker beyond 'edited': deleted, a link, or not a regular file."""
    if marker and marker.startswith("symlink:"):
        return f" (replaced by a symlink to {marker[8:]})"
    if marker == "not a regular file":
        return " (not a regular file)"
    return " (deleted)" if marker is None else ""


@dataclass(frozen=True)
class CheckoutIdentity:
    """What the UniLab tree is, as far as git can tell."""

    is_git: bool
    head: str | None
    head_tree: str | None
    dirty_paths: list[str]


def identify_checkout(root: Path, touched: list[str]) -> CheckoutIdentity:
    """HEAD commit and tree, and which touched files git sees as modified (staged or not)."""
    try:
        repo = git.Repo(root)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return CheckoutIdentity(False, None, None, [])
    if repo.working_tree_dir is None or Path(repo.working_tree_dir).resolve() != root.resolve():
        return CheckoutIdentity(False, None, None, [])
    try:
        head = repo.head.commit
    except ValueError:
        return CheckoutIdentity(True, None, None, [])
    # read only: a plain `git status` refreshes stat data into .git/index, a write to the user's checkout
    porcelain = repo.git(no_optional_locks=True).status("--porcelain", "--untracked-files=no", "--", *touched)
    dirty = sorted(line[3:] for line in porcelain.splitlines() if line.strip())
    return CheckoutIdentity(True, head.hexsha, head.tree.hexsha, dirty)


def uv_python(root: Path) -> list[str] | None:
    """UniLab's own uv environment, when the checkout carries one and uv is installed."""
    if (root / "pyproject.toml").is_file() and (root / "uv.lock").is_file() and (root / ".venv").is_dir():
        uv = shutil.which("uv")
        if uv:
            return [uv, "run", "--project", str(root), "--locked", "--no-sync", "python"]
    return None


@contextmanager
def _private_tmpdir(parent: Path) -> Iterator[str]:
    """A temporary directory named as ours (fsops.TMP_PREFIX), so a killed run's leftover is found and removed."""
    tmp = tempfile.mkdtemp(dir=parent, prefix=f"{TMP_PREFIX}embedded-")
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def create_embedded_tree(sdist: Path, dest: Path) -> str:
    """Unpack the pinned sdist into dest as a one-commit git repository; returns its tree hash.

    The commit's author and date are fixed, so the same sdist always gives the same tree (and commit) hash.
    """
    if dest.exists():
        raise PatchsetError(f"{dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _private_tmpdir(dest.parent) as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = list(Path(tmp).iterdir())
        repo = git.Repo.init(top)
        repo.git.add("-A", "--force")
        env = {"GIT_AUTHOR_DATE": EMBEDDED_DATE, "GIT_COMMITTER_DATE": EMBEDDED_DATE}
        repo.git.execute(
            ["git", "-c", f"user.name={EMBEDDED_AUTHOR.name}", "-c", f"user.email={EMBEDDED_AUTHOR.email}",
             "commit", "-q", "--no-verify", "--no-gpg-sign", "-m", f"UniLab from {sdist.name}"],
            env={**os.environ, **env},
        )
        tree = repo.head.commit.tree.hexsha
        repo.close()
        top.rename(dest)
    return tree


def wheel_package_files(wheel: Path, package: str) -> dict[str, tuple[bytes, int]]:
    """One top-level package of a wheel in memory: path (starting with package/) -> (bytes, file mode)."""
    with zipfile.ZipFile(wheel) as zf:
        return {
            info.filename: (zf.read(info), ((info.external_attr >> 16) & 0o777) or 0o644)
            for info in zf.infolist()
            if info.filename.startswith(package + "/") and not info.is_dir()
        }


def sdist_package_files(sdist: Path, package: str) -> dict[str, tuple[bytes, int]]:
    """One top-level package of an sdist (at <top>/src/<package>/ or <top>/<package>/) in memory, like a wheel's:
    path (starting with package/) -> (bytes, file mode). The sdist itself is the pinned artifact, never a build."""
    files: dict[str, tuple[bytes, int]] = {}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")[1:]
            rel = parts[1:] if parts[:1] == ["src"] else parts
            if member.isfile() and len(rel) > 1 and rel[0] == package:
                files["/".join(rel)] = (tar.extractfile(member).read(), (member.mode & 0o777) or 0o644)
    return files


def package_files(artifact: Path, package: str) -> dict[str, tuple[bytes, int]]:
    """One top-level package of a pinned artifact, a wheel or an sdist, in memory."""
    if artifact.name.endswith(".whl"):
        return wheel_package_files(artifact, package)
    return sdist_package_files(artifact, package)


def extract_wheel_package(wheel: Path, package: str, dest: Path) -> None:
    """Copy one top-level package out of a wheel, keeping file modes, into dest/<package>."""
    for rel, (data, mode) in wheel_package_files(wheel, package).items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)


def is_writable_file(path: Path) -> bool:
    """Owner write bit, not os.access: root may write anything, but a read-only file is a user's choice."""
    try:
        return bool(path.stat().st_mode & stat.S_IWUSR)
    except FileNotFoundError:
        return True
