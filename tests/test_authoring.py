"""patchset edit / refresh (scratch.py, refresh.py): the series as a scratch git repository and back.

Round trip: export then refresh with no change gives byte-identical patches, series and MANIFEST.json.
Controls: a changed commit changes exactly that patch (and the manifest); bad repositories (dirty, mid-rebase,
tampered base, exported from another series, a commit outside its target, a bad name) are refused with one
line and a non-zero exit, patches/ unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROJECT, patchset_env, tree_hashes

GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"}
LEARNER = "uni_rl/uni_rl/algos/flash_sac/learner.py"
RUNNER = "uni_rl/uni_rl/offpolicy/double_buffer_runner.py"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "patchset", *args], env=patchset_env(),
                          capture_output=True, text=True, timeout=300, check=False)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], env={**os.environ, **GIT_ENV}, capture_output=True,
                          text=True, check=True).stdout


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("edit") / "series-edit"
    proc = cli("edit", "--dir", str(repo))
    assert proc.returncode == 0, proc.stderr
    return repo


@pytest.fixture
def work(tmp_path: Path, exported: Path) -> tuple[Path, Path]:
    """A private copy of the scratch repository and of patches/."""
    repo, patches = tmp_path / "scratch repo", tmp_path / "patches"
    shutil.copytree(exported, repo, symlinks=True)
    shutil.copytree(PROJECT / "patches", patches)
    return repo, patches


def refresh(repo: Path, patches: Path) -> subprocess.CompletedProcess:
    return cli("refresh", "--dir", str(repo), "--patches", str(patches))


def commit_all(repo: Path, *args: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-verify", *args)


def test_export_is_one_commit_per_patch_over_the_pristine_trees(exported: Path) -> None:
    series = [line.split()[1] for line in (PROJECT / "patches" / "series").read_text().splitlines()
              if line and not line.startswith("#")]
    subjects = git(exported, "log", "--reverse", "--format=%s").splitlines()
    assert subjects[0].startswith("pristine pinned trees") and subjects[1:] == series
    body = git(exported, "log", "-1", "--format=%b", f"HEAD~{len(series) - 1}")
    assert body.startswith("Description: ") and "Target: " in body and "Author: " in body


def test_round_trip_is_byte_identical(work: tuple[Path, Path]) -> None:
    repo, patches = work
    before = tree_hashes(patches)
    proc = refresh(repo, patches)
    assert proc.returncode == 0, proc.stderr
    assert "0 written, 0 removed" in proc.stdout
    assert tree_hashes(patches) == before == tree_hashes(PROJECT / "patches")


def test_changed_commit_changes_exactly_that_patch(work: tuple[Path, Path]) -> None:
    """Negative control of the round trip: amend the docstring of the module uni_rl 0004 creates."""
    repo, patches = work
    before = tree_hashes(patches)
    subjects = git(repo, "log", "--reverse", "--format=%H %s").splitlines()
    sha, name = next(line.split() for line in subjects if "uni_rl/0004-" in line)
    git(repo, "checkout", "-q", "-b", "edit", sha)
    path = repo / RUNNER
    path.write_text(path.read_text().replace("this single read\n", "this one read\n", 1))
    commit_all(repo, "--amend", "--no-edit")
    rest = [line.split()[0] for line in subjects[subjects.index(f"{sha} {name}") + 1:]]
    git(repo, "cherry-pick", "--allow-empty", *rest)
    proc = refresh(repo, patches)
    assert proc.returncode == 0, proc.stderr
    after = tree_hashes(patches)
    changed = sorted(k for k in before if before[k] != after[k])
    assert changed == ["MANIFEST.json", name], changed
    assert "on the device; the stream is synchronized above, so this one read\n" in (patches / name).read_text()


def test_new_commit_becomes_a_new_patch_in_the_series(work: tuple[Path, Path]) -> None:
    """A patch that adds two files in a row: each keeps its git header, so the two ``/dev/null`` sources parse
    as two files (without it, refresh refused its own output: "Target without source")."""
    repo, patches = work
    (repo / "unisim" / "unisim" / "NOTE.txt").write_text("a new file\n")
    (repo / "unisim" / "unisim" / "NOTE2.txt").write_text("a second new file\n")
    header = ("unisim/0099-note.patch\n\nDescription: a note.\nAuthor: t\nOrigin: vendor\n"
              "Target: unisim\nLast-Update: 2026-12-01\n")
    git(repo, "add", "-A")
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--cleanup=verbatim", "-F", "-"], input=header,
                   text=True, env={**os.environ, **GIT_ENV}, check=True)
    proc = refresh(repo, patches)
    assert proc.returncode == 0, proc.stderr
    assert (patches / "series").read_text().endswith("unisim unisim/0099-note.patch\n")
    assert (patches / "unisim/0099-note.patch").read_text().endswith(
        "diff --git a/unisim/NOTE.txt b/unisim/NOTE.txt\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/unisim/NOTE.txt\n@@ -0,0 +1 @@\n+a new file\n"
        "diff --git a/unisim/NOTE2.txt b/unisim/NOTE2.txt\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/unisim/NOTE2.txt\n@@ -0,0 +1 @@\n+a second new file\n")
    assert cli("manifest", "--patches", str(patches)).returncode == 0  # the written manifest is make manifest's


def _dirty(repo: Path) -> None:
    (repo / LEARNER).write_text("edited\n")


def _untracked(repo: Path) -> None:
    (repo / "uni_rl" / "stray.py").write_text("x = 1\n")


def _mid_rebase(repo: Path) -> None:
    (repo / ".git" / "rebase-merge").mkdir()


def _tampered_base(repo: Path) -> None:
    """Rewrite history with one pristine file changed in the root commit (the rest rebased on top)."""
    root = git(repo, "rev-list", "--max-parents=0", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "tampered", root)
    (repo / "unisim" / "unisim" / "__init__.py").write_text("# tampered\n")
    commit_all(repo, "--amend", "--no-edit")
    git(repo, "cherry-pick", f"{root}..series")


def _other_target(repo: Path) -> str:
    """The last commit also changes a file of another target; returns the refusal it must get."""
    last = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%s"], capture_output=True, text=True,
                          check=True).stdout.split("/")[0]
    other = {"unilab": "unisim/unisim/outside.txt", "uni_rl": "unilab/README.md", "unisim": "unilab/README.md"}[last]
    (repo / other).write_text("changed\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--amend", "--no-edit")
    return f"touches {other}, outside its target {last}/"


def _bad_name(repo: Path) -> None:
    git(repo, "commit", "-q", "--amend", "-m", "fix things")


def _merge(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "side", "HEAD~1")
    (repo / "unisim" / "unisim" / "x.txt").write_text("x\n")
    commit_all(repo, "-m", "unisim/0098-x.patch")
    git(repo, "checkout", "-q", "series")
    git(repo, "merge", "-q", "--no-ff", "--no-edit", "side")


@pytest.mark.parametrize(("damage", "message"), [
    (_dirty, "has uncommitted changes"),
    (_untracked, "has uncommitted changes (uni_rl/stray.py)"),
    (_mid_rebase, "in the middle of a git operation (rebase-merge)"),
    (_tampered_base, "is not the pristine pinned trees (unisim/unisim/__init__.py changed)"),
    (_other_target, None),  # the message names the last commit's target
    (_bad_name, "its message must be '<target>/NNNN-<slug>.patch'"),
    (_merge, "history is not linear"),
])
def test_bad_scratch_repository_is_refused_and_nothing_changes(work: tuple[Path, Path], damage, message: str) -> None:
    repo, patches = work
    before = tree_hashes(patches)
    message = damage(repo) or message
    proc = refresh(repo, patches)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert tree_hashes(patches) == before


def test_series_changed_since_export_is_refused(work: tuple[Path, Path]) -> None:
    """patches/ gained a patch after the export: refresh would drop it, so it refuses."""
    repo, patches = work
    series = patches / "series"
    first = next(line for line in series.read_text().splitlines() if line.startswith("uni_rl "))
    series.write_text(series.read_text().replace(first + "\n", ""))
    (patches / first.split()[1]).unlink()
    before = tree_hashes(patches)
    proc = refresh(repo, patches)
    assert proc.returncode == 1 and "was exported from series" in proc.stderr, proc.stderr
    assert tree_hashes(patches) == before


def test_edit_refuses_an_existing_directory(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    proc = cli("edit", "--dir", str(tmp_path / "taken"))
    assert proc.returncode == 1 and "already exists" in proc.stderr
    assert list((tmp_path / "taken").iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
