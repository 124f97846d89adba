"""results/README.md indexes every evidence folder and is generated: it must agree with results/ and the docs.

The committed index is checked as it stands; the negative controls make a stale index (a folder added, a
citation dropped) and a misnamed folder on a small copy of the project, and require the check to catch each.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "experiments" / "tables"))

import results_index  # noqa: E402

#: Small committed folders for the copy: one with run-free study JSONs, one tool folder.
SAMPLE = ("2026-12-01-cpu2-update-state", "port-report")


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A project copy with README.md, docs/ and two results folders, its index freshly generated."""
    shutil.copy(PROJECT / "README.md", tmp_path / "README.md")
    shutil.copytree(PROJECT / "docs", tmp_path / "docs")
    for name in SAMPLE:
        shutil.copytree(PROJECT / "results" / name, tmp_path / "results" / name)
    (tmp_path / results_index.INDEX).write_text(results_index.render(tmp_path), encoding="utf-8")
    return tmp_path


def test_committed_index_agrees_with_results() -> None:
    proc = subprocess.run([sys.executable, str(PROJECT / "experiments" / "tables" / "results_index.py"), "--check"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    text = (PROJECT / results_index.INDEX).read_text(encoding="utf-8")
    folders = [p.name for p in (PROJECT / "results").iterdir() if p.is_dir()]
    assert all(f"[{name}]({name}/)" in text for name in folders)


def test_rows_carry_what_the_jsons_record() -> None:
    """A bench folder's row: the series and torch of its run JSONs, the machine of its name, the docs citing it."""
    folder = "2026-12-01-h200-mjwarp-mps-sim2sim"
    row = next(line for line in results_index.render().splitlines() if line.startswith(f"| [{folder}]"))
    assert "`cd6f7f83cb25`" in row and "2.11.0+cu130" in row and results_index.MACHINES["h200"] in row
    assert "[docs/collector.md](../docs/collector.md)" in row and "[docs/benchmark.md](../docs/benchmark.md)" in row


def test_a_new_folder_makes_the_index_stale(project: Path) -> None:
    assert results_index.is_current(project)
    shutil.copytree(project / "results" / SAMPLE[0], project / "results" / "2026-12-02-cpu2-update-state")
    assert not results_index.is_current(project)
    (project / results_index.INDEX).write_text(results_index.render(project), encoding="utf-8")
    assert results_index.is_current(project)


def test_a_dropped_citation_makes_the_index_stale(project: Path) -> None:
    assert results_index.is_current(project)
    for page in (project / "docs").glob("*.md"):
        page.write_text(page.read_text(encoding="utf-8").replace(f"results/{SAMPLE[0]}", "elsewhere"), encoding="utf-8")
    assert not results_index.is_current(project)


def test_a_misnamed_folder_is_refused(project: Path) -> None:
    (project / "results" / "h200-latest").mkdir()
    with pytest.raises(ValueError, match="not named <date>-<machine>-<study>"):
        results_index.render(project)
    (project / "results" / "h200-latest").rename(project / "results" / "2026-12-01-a100-bench")
    with pytest.raises(ValueError, match="unknown machine 'a100'"):
        results_index.render(project)


#: A folder that left the tree (results/removed.json), with the last commit that has it.
GONE = "2026-12-04-h200-learner-construction"


def test_removed_folders_are_listed_with_the_commit_git_gives() -> None:
    """Each folder of results/removed.json is gone from the tree and listed with its last commit; where git can
    tell (a clone), that commit has the folder and is the one git derives. Control: a folder still in the tree
    has a last commit too, and a name never committed has none."""
    listed = results_index.removed()
    assert GONE in listed and not (PROJECT / "results" / GONE).exists()
    text = (PROJECT / results_index.INDEX).read_text(encoding="utf-8")
    assert "## Folders that left the tree" in text
    assert all(f"| {name} | `{entry['last_commit']}` |" in text for name, entry in listed.items())
    if results_index.last_commit(PROJECT, "2026-12-06-h100-headline") is None:
        pytest.skip("no git history here: the recorded commits stand")
    for name, entry in listed.items():
        assert results_index.last_commit(PROJECT, name) == entry["last_commit"]
        assert results_index._git(PROJECT, "cat-file", "-e", f"{entry['last_commit']}:results/{name}") is not None
    assert results_index.last_commit(PROJECT, "2000-01-01-h200-never-committed") is None


def test_the_removed_list_works_without_git_and_is_checked(project: Path) -> None:
    """In a copy outside the repository the recorded commit stands. Controls: a listed folder still in the tree,
    one without a commit, a doc linking into a removed folder, and a changed reason each fail or go stale."""
    gone = project / results_index.REMOVED
    gone.write_text('{"%s": {"why": "cited by nothing", "last_commit": "0123456789ab"}}\n' % GONE, encoding="utf-8")
    assert not results_index.is_current(project)
    results_index.write(project)
    assert results_index.is_current(project)
    assert f"| {GONE} | `0123456789ab` | cited by nothing |" in (project / results_index.INDEX).read_text()
    gone.write_text(gone.read_text().replace("cited by nothing", "superseded"), encoding="utf-8")
    assert not results_index.is_current(project)
    (project / "results" / GONE).mkdir()
    with pytest.raises(ValueError, match="still in the tree"):
        results_index.render(project)
    (project / "results" / GONE).rmdir()
    gone.write_text('{"%s": {"why": "cited by nothing"}}\n' % GONE, encoding="utf-8")
    with pytest.raises(ValueError, match="git cannot tell"):
        results_index.render(project)
    gone.write_text('{"%s": {"why": "cited by nothing", "last_commit": "0123456789ab"}}\n' % GONE, encoding="utf-8")
    (project / "docs" / "tests.md").write_text(f"[old](../results/{GONE}/)\n", encoding="utf-8")
    with pytest.raises(ValueError, match="which left the tree"):
        results_index.render(project)
