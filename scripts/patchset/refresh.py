"""`patchset refresh`: a scratch repository (scratch.py) back into patches/*.patch, patches/series and
patches/MANIFEST.json.

The same guarantees as apply: everything is read and checked before the first byte under patches/ changes
(a clean, linear repository whose root commit is exactly the pristine pinned trees and was exported from the
series patches/ holds now; each later commit named `<target>/NNNN-<slug>.patch`, touching that target only,
with a DEP-3 header; the regenerated series, planned over the pristine trees without fuzz, must give exactly
the repository's last commit). Patch bytes are the commit message's header, a '---' line and `git diff` with
scratch.DIFF_OPTIONS, so an unchanged repository gives byte-identical patches.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import fsops
from .errors import PatchsetError
from .manifest import build_manifest, write_manifest
from .plan import plan_target
from .scratch import DIFF_OPTIONS, HEADER_END, SERIES_TRAILER, Files, git
from .series import Series, load_series
from .targets import TARGETS

NAME = re.compile(r"^(?P<target>[a-z_]+)/(?P<number>\d{4})-[a-z0-9][a-z0-9.-]*\.patch$")
IN_PROGRESS = ("rebase-merge", "rebase-apply", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "BISECT_LOG")


@dataclass(frozen=True)
class Commit:
    sha: str
    name: str
    target: str
    patch: bytes


def _blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _check_repository(repo: Path) -> list[str]:
    """The repository's commits, root first; refuses anything but a clean, linear history at rest."""
    if not (repo / ".git").is_dir():
        raise PatchsetError(f"{repo} is not a scratch repository (no .git); export one with 'patchset edit'")
    busy = [name for name in IN_PROGRESS if (repo / ".git" / name).exists()]
    if busy:
        raise PatchsetError(f"{repo} is in the middle of a git operation ({busy[0]}); finish or abort it first")
    dirty = git(repo, "status", "--porcelain", "--untracked-files=all").decode().splitlines()
    if dirty:
        raise PatchsetError(f"{repo} has uncommitted changes ({dirty[0][3:]}{' ...' if len(dirty) > 1 else ''}); "
                            "commit them (or stash) first")
    history = [line.split() for line in git(repo, "rev-list", "--reverse", "--parents", "HEAD").decode().splitlines()]
    merges = [entry[0] for entry in history if len(entry) > 2]
    roots = [entry[0] for entry in history if len(entry) == 1]
    if merges or len(roots) != 1:
        raise PatchsetError(f"{repo} history is not linear (merge {merges[0][:12]})" if merges
                            else f"{repo} has {len(roots)} root commits; it must have one, the pristine trees")
    return [entry[0] for entry in history]


def _check_base(repo: Path, base: str, trees: dict[str, Files], series: Series) -> None:
    """The root commit must hold exactly the pristine pinned trees and name the series patches/ holds now."""
    want = {f"{target}/{rel}": ("100755" if mode & 0o111 else "100644", _blob_sha1(data))
            for target, files in trees.items() for rel, (data, mode) in files.items()}
    have = {}
    for line in git(repo, "ls-tree", "-r", "-z", base).split(b"\0"):
        if line:
            meta, _, path = line.partition(b"\t")
            mode, _, sha = meta.decode().split(" ")
            have[path.decode()] = (mode, sha)
    wrong = sorted(p for p in want.keys() | have.keys() if want.get(p) != have.get(p))
    if wrong:
        what = "missing" if wrong[0] not in have else ("extra" if wrong[0] not in want else "changed")
        raise PatchsetError(f"the base commit {base[:12]} of {repo} is not the pristine pinned trees "
                            f"({wrong[0]} {what}{f' and {len(wrong) - 1} more' if len(wrong) > 1 else ''}); "
                            "export a fresh repository with 'patchset edit'")
    message = git(repo, "cat-file", "commit", base).decode()
    exported = message.rpartition(SERIES_TRAILER)[2].strip() if SERIES_TRAILER in message else "(none)"
    if exported != series.sha256:
        raise PatchsetError(f"{repo} was exported from series {exported[:12]}, but patches/ now holds series "
                            f"{series.sha256[:12]}; export again with 'patchset edit' and redo the change there")


def _diff(repo: Path, parent: str, sha: str, target: str) -> bytes:
    """git diff of one target between two commits, without git's extended header lines.

    A new file keeps its ``diff --git`` and ``new file mode`` lines: without them two new files in a row are
    two ``--- /dev/null`` sources that a unified-diff parser reads as one file.
    """
    raw = git(repo, "diff", *DIFF_OPTIONS, f"--relative={target}", parent, sha, "--", f"{target}/")
    out, git_line = [], None
    for line in raw.splitlines(keepends=True):
        if line.startswith(b"diff --git "):
            git_line = line
            continue
        if git_line is not None:
            if line.startswith((b"old mode", b"new mode", b"Binary files", b"GIT binary patch")):
                raise PatchsetError(f"commit {sha[:12]} changes a file mode or a binary file ({line.decode().strip()}); "
                                    "a patch carries text changes only")
            if line.startswith(b"new file mode"):
                out += [git_line, line]
            if line.startswith(b"--- "):
                git_line = None
                out.append(line)
            continue
        out.append(line)
    return b"".join(out)


def _read_commit(repo: Path, parent: str, sha: str) -> Commit:
    raw = git(repo, "cat-file", "commit", sha)
    message = raw.partition(b"\n\n")[2]
    subject, sep, header = message.partition(b"\n\n")
    name = subject.decode(errors="replace").strip()
    match = NAME.match(name)
    if not sep or not match or match["target"] not in TARGETS:
        raise PatchsetError(f"commit {sha[:12]} ({name[:60]!r}): its message must be '<target>/NNNN-<slug>.patch', "
                            f"a blank line, then the DEP-3 header (target one of {', '.join(TARGETS)})")
    if not header.endswith(b"\n") or (b"\n" + header).find(b"\n" + HEADER_END) >= 0:
        raise PatchsetError(f"commit {sha[:12]} ({name}): the header must end with a newline and hold no '---' line")
    touched = git(repo, "diff", "--name-only", "--no-renames", "-z", parent, sha).decode().split("\0")
    foreign = [p for p in touched if p and not p.startswith(match["target"] + "/")]
    if foreign:
        raise PatchsetError(f"commit {sha[:12]} ({name}) touches {foreign[0]}, outside its target {match['target']}/")
    return Commit(sha, name, match["target"], header + HEADER_END + _diff(repo, parent, sha, match["target"]))


def _check_numbering(commits: list[Commit]) -> None:
    last: dict[str, int] = {}
    names: set[str] = set()
    for commit in commits:
        number = int(NAME.match(commit.name)["number"])
        if commit.name in names or number <= last.get(commit.target, 0):
            raise PatchsetError(f"commit {commit.sha[:12]} ({commit.name}): patch numbers of a target must "
                                "increase along the history, each name used once")
        names.add(commit.name)
        last[commit.target] = number


def _series_text(old: bytes, commits: list[Commit]) -> bytes:
    """The series file: the comment block of the current one, then one '<target> <name>' line per commit."""
    comments = [line for line in old.decode().split("\n") if line.startswith("#")]
    return "".join(f"{line}\n" for line in comments + [f"{c.target} {c.name}" for c in commits]).encode()


def _plan_and_verify(repo: Path, head: str, staged: Path, trees: dict[str, Files]) -> tuple[Series, dict]:
    """Load the regenerated series like apply does, plan it over the pristine trees, and require the result to be
    the repository's last commit, file for file."""
    series = load_series(staged)
    plans = {}
    for target in TARGETS:
        own = trees[target]
        plans[target] = plan_target(series.for_target(target), lambda rel, own=own: own[rel][0] if rel in own else None)
        for rel, change in plans[target].items():
            listed = git(repo, "ls-tree", "-z", head, "--", f"{target}/{rel}")
            data = git(repo, "cat-file", "blob", f"{head}:{target}/{rel}") if listed else None
            if data != change.post:
                raise PatchsetError(f"the regenerated series does not reproduce {target}/{rel} of {head[:12]}")
    return series, plans


def refresh(repo: Path, patches_dir: Path, trees: dict[str, Files]) -> list[str]:
    """Regenerate patches_dir from the scratch repository; nothing is written unless every check passes."""
    repo = repo.resolve()
    current = load_series(patches_dir)
    shas = _check_repository(repo)
    _check_base(repo, shas[0], trees, current)
    commits = [_read_commit(repo, parent, sha) for parent, sha in zip(shas, shas[1:])]
    if not commits:
        raise PatchsetError(f"{repo} has no patch commits after its base; a series needs at least one patch")
    _check_numbering(commits)
    series_text = _series_text((patches_dir / "series").read_bytes(), commits)
    with tempfile.TemporaryDirectory(prefix="patchset-refresh-") as tmp:
        staged = Path(tmp)
        for commit in commits:
            (staged / commit.name).parent.mkdir(parents=True, exist_ok=True)
            (staged / commit.name).write_bytes(commit.patch)
        (staged / "series").write_bytes(series_text)
        series, plans = _plan_and_verify(repo, shas[-1], staged, trees)
    changed = [c.name for c in commits if _read(patches_dir / c.name) != c.patch]
    removed = [p.name for p in current.patches if p.name not in {c.name for c in commits}]
    for commit in commits:
        if commit.name in changed:
            (patches_dir / commit.name).parent.mkdir(parents=True, exist_ok=True)
            fsops.write_file(patches_dir / commit.name, commit.patch)
    for name in removed:
        fsops.unlink(patches_dir / name)
    if _read(patches_dir / "series") != series_text:
        fsops.write_file(patches_dir / "series", series_text)
    write_manifest(patches_dir, build_manifest(series, plans))
    return [f"refreshed {patches_dir} from {repo}: {len(commits)} patch(es) (series {series.sha256[:12]}), "
            f"{len(changed)} written, {len(removed)} removed",
            *(f"  wrote {name}" for name in changed), *(f"  removed {name}" for name in removed)]


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
