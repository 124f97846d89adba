"""`patchset edit`: the series as a scratch git repository a maintainer can change with ordinary git.

Layout: one directory per target (targets.TARGETS) holding that target's pristine pinned tree, paths as the
patches name them (`unilab/src/unilab/...`, `uni_rl/uni_rl/...`, `unisim/unisim/...`). The root commit is
those trees exactly (fixed author and date, so the same pins give the same commit); it records the series it
was exported from. Then one commit per patch in series order, its message the patch's file name, a blank line
and the patch's DEP-3 header verbatim. `patchset refresh` (refresh.py) turns such a repository back into
patches/; git diff options and the commit environment live here, in one place for both directions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from .errors import PatchsetError
from .fetch import pinned_artifact
from .pins import load_pins
from .plan import apply_file_patch
from .series import Series, load_series, strip_prefix
from .targets import CHECKOUT_TARGET, OVERLAY_PACKAGES, TARGETS
from .trees import EMBEDDED_AUTHOR, EMBEDDED_DATE, package_files

Files = dict[str, tuple[bytes, int]]
SERIES_TRAILER = "Exported-From-Series: "
HEADER_END = b"---\n"  # the line between a patch's DEP-3 header and its diff

# Every git call runs with these: no user or system configuration (hooks, signing, diff drivers, prefixes) can
# change what is committed or what a diff looks like.
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": EMBEDDED_AUTHOR.name,
    "GIT_AUTHOR_EMAIL": EMBEDDED_AUTHOR.email, "GIT_COMMITTER_NAME": EMBEDDED_AUTHOR.name,
    "GIT_COMMITTER_EMAIL": EMBEDDED_AUTHOR.email, "GIT_AUTHOR_DATE": EMBEDDED_DATE,
    "GIT_COMMITTER_DATE": EMBEDDED_DATE, "LC_ALL": "C",
}
DIFF_OPTIONS = ("--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "--diff-algorithm=myers",
                "--indent-heuristic", "-U3", "--src-prefix=a/", "--dst-prefix=b/")


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """Run git in repo with the fixed environment; a failure is a one-line PatchsetError."""
    proc = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True,
                          env={**os.environ, **GIT_ENV})
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip().splitlines()
        raise PatchsetError(f"git {args[0]} in {repo} failed: {detail[-1] if detail else proc.returncode}")
    return proc.stdout


def pristine_trees(sdist: Path | None = None, artifacts: dict[str, Path | None] | None = None) -> dict[str, Files]:
    """Every target's pristine pinned tree in memory: target -> {patch-relative path: (bytes, mode)}."""
    pins = load_pins()
    unilab_sdist = pinned_artifact(pins["UNILAB_SDIST"], pins["UNILAB_SDIST_SHA256"], sdist)
    with tarfile.open(unilab_sdist) as tar:
        trees: dict[str, Files] = {CHECKOUT_TARGET: {
            m.name.split("/", 1)[1]: (tar.extractfile(m).read(), (m.mode & 0o777) or 0o644)
            for m in tar.getmembers() if m.isfile() and "/" in m.name}}
    for package in OVERLAY_PACKAGES:
        name, sha256 = package.artifact(pins)
        given = (artifacts or {}).get(package.name)
        trees[package.name] = package_files(pinned_artifact(name, sha256, given), package.name)
    return trees


def header_of(patch_bytes: bytes, name: str) -> bytes:
    """The DEP-3 header of a patch file: everything before its first '---' line."""
    head, sep, _ = patch_bytes.partition(b"\n" + HEADER_END)
    if not sep:
        raise PatchsetError(f"patch {name} has no '---' line between its header and its diff")
    return head + b"\n"


def commit_message(name: str, header: bytes) -> bytes:
    return name.encode() + b"\n\n" + header


def _write_tree(root: Path, trees: dict[str, Files]) -> None:
    for target, files in trees.items():
        for rel, (data, mode) in files.items():
            path = root / target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(0o755 if mode & 0o111 else 0o644)


def _commit(repo: Path, message: bytes) -> None:
    git(repo, "add", "--all", "--force", ".")
    git(repo, "commit", "--quiet", "--no-verify", "--no-gpg-sign", "--allow-empty-message", "--cleanup=verbatim",
        "--file=-", stdin=message)


def base_message(series: Series) -> bytes:
    return f"pristine pinned trees: {', '.join(TARGETS)}\n\n{SERIES_TRAILER}{series.sha256}\n".encode()


def export(patches_dir: Path, dest: Path, trees: dict[str, Files]) -> list[str]:
    """Write the scratch repository to dest (which must not exist); built under a temporary name beside it and
    renamed into place, so a failed export leaves nothing behind."""
    series = load_series(patches_dir)
    if dest.exists() or dest.is_symlink():
        raise PatchsetError(f"{dest} already exists; remove it or pass another --dir")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    try:
        git(tmp, "init", "--quiet", "--initial-branch=series")
        (tmp / ".git" / "info" / "attributes").write_text("* -text !diff !filter !eol !ident\n")  # bytes as they are
        current = {t: dict(files) for t, files in trees.items()}
        _write_tree(tmp, current)
        _commit(tmp, base_message(series))
        for patch in series.patches:
            files = current[patch.target]
            for pfile in patch.diff:
                rel = strip_prefix(pfile.path)
                before = files[rel][0] if rel in files else None
                after = apply_file_patch(pfile, before, patch.name)
                path = tmp / patch.target / rel
                if after is None:
                    files.pop(rel, None)
                    path.unlink()
                else:
                    files[rel] = (after, files[rel][1] if rel in files else 0o644)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(after)
            _commit(tmp, commit_message(patch.name, header_of((patches_dir / patch.name).read_bytes(), patch.name)))
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [f"exported {len(series.patches)} patch(es) (series {series.sha256[:12]}) to {dest}",
            "change them with git (commit --amend, rebase -i, new commits named <target>/NNNN-<slug>.patch), "
            f"then: patchset refresh --dir {dest}"]
