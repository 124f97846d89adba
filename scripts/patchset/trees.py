"""The two target trees: a user's UniLab checkout (identified by git HEAD and file content) and the uni_rl
source inside the pinned wheel; plus the embedded default UniLab tree made from the pinned sdist."""

from __future__ import annotations

import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import git

from .errors import PatchsetError

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
    porcelain = repo.git.status("--porcelain", "--untracked-files=no", "--", *touched)
    dirty = sorted(line[3:] for line in porcelain.splitlines() if line.strip())
    return CheckoutIdentity(True, head.hexsha, head.tree.hexsha, dirty)


def uv_python(root: Path) -> list[str] | None:
    """UniLab's own uv environment, when the checkout carries one and uv is installed."""
    if (root / "pyproject.toml").is_file() and (root / "uv.lock").is_file() and (root / ".venv").is_dir():
        uv = shutil.which("uv")
        if uv:
            return [uv, "run", "--project", str(root), "--locked", "--no-sync", "python"]
    return None


def create_embedded_tree(sdist: Path, dest: Path) -> str:
    """Unpack the pinned sdist into dest as a one-commit git repository; returns its tree hash.

    The commit's author and date are fixed, so the same sdist always gives the same tree (and commit) hash.
    """
    if dest.exists():
        raise PatchsetError(f"{dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
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


def extract_wheel_package(wheel: Path, package: str, dest: Path) -> None:
    """Copy one top-level package out of a wheel, keeping file modes, into dest/<package>."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if not info.filename.startswith(package + "/") or info.is_dir():
                continue
            target = dest / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
            mode = (info.external_attr >> 16) & 0o777
            target.chmod(mode or 0o644)


def is_writable_file(path: Path) -> bool:
    """Owner write bit, not os.access: root may write anything, but a read-only file is a user's choice."""
    try:
        return bool(path.stat().st_mode & stat.S_IWUSR)
    except FileNotFoundError:
        return True
