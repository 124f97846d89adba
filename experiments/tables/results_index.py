#!/usr/bin/env python3
"""results/README.md, generated: one row per evidence folder, so a reader finds what was measured where.

Every folder under results/ is named ``<date>-<machine>-<study>`` (the machine a short token of ``MACHINES``), or
is a tool's output folder of ``TOOL_FOLDERS``; anything else is an error, so a new folder cannot join the
evidence without saying where it ran. A row's date, versions and series sha256 come from the JSONs inside where
they record them (run JSONs: ``started_utc``, ``device``, ``series_sha256``; study JSONs: ``versions``,
``torch_version``, ``machine.versions``), what it measured from the title of its README (or of its reports), and
which docs cite it from README.md and docs/*.md. ``python experiments/tables/results_index.py`` writes the index;
``--check`` exits 1 when results/README.md disagrees with results/ (the test suite runs it).

A folder that no longer backs the product leaves the tree (git history keeps it) and is listed in
``results/removed.json`` (folder → why it left, and the last commit that has it); the index's section *Folders
that left the tree* is generated from that list. The commit comes from git: the last commit that touched the
folder, or, when that is the commit deleting it, the last one before it (``git log -1 -- results/<folder>`` run on
its parent), as 12 hex digits. Writing the index fills and corrects the list's commits; ``--check`` fails when a
recorded commit is not the one git gives. Where git cannot tell (no git, a copy outside the repository, a shallow
clone without the commit), the recorded commit stands, so the index is generated and checked the same without
git. Removing a folder: ``git rm -r results/<folder>``, add it with its reason to ``results/removed.json``, run
this script.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / folder) for folder in ("bench", "evidence")]

import bench_driver  # noqa: E402
import bench_report  # noqa: E402
import headline_table  # noqa: E402

PROJECT = Path(__file__).resolve().parents[2]
INDEX = Path("results") / "README.md"
#: The folders that left the tree: name → {"why": ..., "last_commit": ...} (the commit filled by this script).
REMOVED = Path("results") / "removed.json"
#: Hex digits of a recorded commit: fixed, since ``%h``'s length depends on the clone.
COMMIT_DIGITS = 12
#: The machine token of a folder name → the machine, in words.
MACHINES = {
    "h200": "lent NVIDIA H200, 16 CPU cores",
    "h100": "lent NVIDIA H100 80GB HBM3, 16 CPU cores",
    "h200x2": "lent host with 2 × NVIDIA H200, 32 CPU cores",
    "cpu2": "2-core CPU dev box (shared)",
}
#: Folders a tool writes wherever it runs, named by the tool rather than by date and machine.
TOOL_FOLDERS = {"port-report": "any machine (`make port-report` downloads the release from PyPI)"}
#: ``make bench`` names its folders by the same rule (bench_driver.results_dir), so a run's folder is indexable as it is.
NAME = re.compile(rf"(?P<date>\d{{4}}-\d{{2}}-\d{{2}})-(?P<machine>{bench_driver.MACHINE_TOKEN.pattern})"
                  rf"-(?P<study>{bench_driver.STUDY_NAME.pattern})")
#: Version fields of study JSONs: top-level key → package name (``None``: a dict of name → version).
STUDY_VERSIONS: dict[str, str | None] = {"versions": None, "torch_version": "torch"}
CITATION = re.compile(r"results/([\w.-]+)")
#: Packages shown, in this order: the pinned stack (other recorded packages, e.g. numpy, are left out).
PACKAGES = ("torch", *headline_table.PACKAGES)


def _records(folder: Path) -> Iterator[dict[str, Any]]:
    """Every JSON object in the folder tree, in any stored form (``run_files``)."""
    for path in bench_report.run_files.json_files(folder, recursive=True):
        data = bench_report.read_run(path)
        if isinstance(data, dict):
            yield data


def _versions(record: dict[str, Any]) -> dict[str, str]:
    """Package → version as this record states them (a run's ``device``, a study's own fields)."""
    found: dict[str, str] = {}
    device = record.get("device") if isinstance(record.get("device"), dict) else {}
    found.update(device.get("package_versions") or {})
    if device.get("torch"):
        found["torch"] = str(device["torch"])
    machine = record.get("machine") if isinstance(record.get("machine"), dict) else {}
    found.update(machine.get("versions") or {})
    for key, name in STUDY_VERSIONS.items():
        value = record.get(key)
        if name is None and isinstance(value, dict):
            found.update({k: str(v) for k, v in value.items() if not k.startswith("warp_device")})
        elif name is not None and isinstance(value, str):
            found[name] = value
    return found


def facts(folder: Path) -> dict[str, set[str]]:
    """Dates, package versions and series sha256 (12 hex) recorded by the folder's JSONs."""
    out: dict[str, set[str]] = {"dates": set(), "series": set()}
    for record in _records(folder):
        if isinstance(record.get("started_utc"), str):
            out["dates"].add(record["started_utc"][:10])
        if isinstance(record.get("series_sha256"), str):
            out["series"].add(record["series_sha256"][:12])
        for name, version in _versions(record).items():
            if name in PACKAGES and version is not None:
                out.setdefault(name, set()).add(str(version))
    return out


def _title(path: Path) -> str:
    heading = next((line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("# ")), "")
    return heading.removeprefix("# ").strip()


def measured(folder: Path) -> str:
    """The README's title, else the titles of the folder's Markdown reports."""
    readme = folder / "README.md"
    if readme.is_file():
        return _title(readme)
    return "; ".join(_title(p) for p in sorted(folder.glob("*.md"))) or "no README"


def citations(root: Path) -> dict[str, list[str]]:
    """results folder name → the docs (README.md, docs/*.md) that cite a path inside it."""
    cited: dict[str, list[str]] = {}
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for name in sorted(set(CITATION.findall(doc.read_text(encoding="utf-8")))):
            cited.setdefault(name, []).append(doc.relative_to(root).as_posix())
    return cited


def _where(name: str) -> tuple[str, str]:
    """(date from the name, machine in words); a name that follows neither convention is an error."""
    if name in TOOL_FOLDERS:
        return "not recorded", TOOL_FOLDERS[name]
    match = NAME.fullmatch(name)
    if not match:
        raise ValueError(f"results/{name} is not named <date>-<machine>-<study> (e.g. 2026-12-01-h200-mjwarp)")
    if match["machine"] not in MACHINES:
        raise ValueError(f"results/{name}: unknown machine {match['machine']!r}; "
                         f"add it to MACHINES ({', '.join(MACHINES)})")
    return match["date"], MACHINES[match["machine"]]


def _row(folder: Path, cited: list[str]) -> str:
    date, machine = _where(folder.name)
    found = facts(folder)
    dates, series = found.pop("dates"), found.pop("series")
    versions = ", ".join(f"{name} {' / '.join(sorted(found[name]))}" for name in PACKAGES if name in found)
    versions = versions or "not recorded"
    links = ", ".join(f"[{doc}](../{doc})" for doc in cited) or "none"
    return (f"| [{folder.name}]({folder.name}/) | {', '.join(sorted(dates)) or date} | {machine} | {versions} | "
            f"{', '.join(f'`{s}`' for s in sorted(series)) or 'not recorded'} | {measured(folder)} | {links} |")


def _git(root: Path, *args: str) -> str | None:
    """A git command's stripped output in ``root``, or None where git cannot answer (no git, no repository)."""
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def last_commit(root: Path, name: str) -> str | None:
    """The last commit whose tree has ``results/<name>`` (COMMIT_DIGITS hex), or None where git cannot tell."""
    if _git(root, "rev-parse", "--show-toplevel") != str(root.resolve()):
        return None  # not the root of a repository (a copy of the project): git would answer for another tree
    path = f"results/{name}"
    commit = _git(root, "log", "-1", "--format=%H", "HEAD", "--", path)
    if not commit:
        return None
    if _git(root, "cat-file", "-e", f"{commit}:{path}") is None:  # the commit that deleted it
        commit = _git(root, "log", "-1", "--format=%H", f"{commit}^", "--", path)
        if not commit or _git(root, "cat-file", "-e", f"{commit}:{path}") is None:
            return None
    return commit[:COMMIT_DIGITS]


def removed(root: Path = PROJECT) -> dict[str, dict[str, str]]:
    """results/removed.json as this script writes it: each listed folder's reason and last commit (from git where
    it can tell, else as recorded). A listed folder still in the tree, or one without a commit, is an error."""
    path = root / REMOVED
    listed = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    out: dict[str, dict[str, str]] = {}
    for name in sorted(listed):
        entry = listed[name]
        if (root / "results" / name).exists():
            raise ValueError(f"results/{name} is listed in {REMOVED} but is still in the tree")
        if not str(entry.get("why", "")).strip():
            raise ValueError(f"{REMOVED}: {name} says no reason (\"why\")")
        commit = last_commit(root, name) or entry.get("last_commit", "")
        if not re.fullmatch(rf"[0-9a-f]{{{COMMIT_DIGITS}}}", commit):
            raise ValueError(f"{REMOVED}: {name} has no last commit and git cannot tell it here")
        out[name] = {"why": entry["why"], "last_commit": commit}
    return out


def removed_text(root: Path = PROJECT) -> str:
    return json.dumps(removed(root), indent=2, ensure_ascii=False) + "\n"


def _removed_section(root: Path, cited: dict[str, list[str]]) -> str:
    """The index's section on the folders that left; a doc that still links into one of them is an error (it
    names the folder with its commit instead)."""
    gone = removed(root)
    if not gone:
        return ""
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        for name in gone:
            if re.search(rf"\]\((?:\.\./)?results/{re.escape(name)}\b", text):
                raise ValueError(f"{doc.relative_to(root).as_posix()} links to results/{name}, which left the tree: "
                                 f"cite it with its commit {gone[name]['last_commit']}")
    rows = "\n".join(
        f"| {name} | `{entry['last_commit']}` | {entry['why']} | "
        f"{', '.join(f'[{doc}](../{doc})' for doc in cited.get(name, [])) or 'none'} |"
        for name, entry in gone.items())
    return f"""
## Folders that left the tree

Evidence that no longer backs the product: superseded by a newer study, cited by nothing, or a step on the way.
Listed in `removed.json` with the last commit that has each (from git); read one with
`git show <commit>:results/<folder>/README.md`, or restore it with `git checkout <commit> -- results/<folder>`.

| folder | last commit with it | why it left | cited by (with its commit) |
|---|---|---|---|
{rows}
"""


def render(root: Path = PROJECT) -> str:
    """The whole index: a short preamble, then one row per folder under results/, in name order, then the folders
    that left the tree."""
    cited = citations(root)
    folders = sorted(p for p in (root / "results").iterdir() if p.is_dir())
    rows = "\n".join(_row(folder, cited.get(folder.name, [])) for folder in folders)
    gone = _removed_section(root, cited)
    return f"""# Evidence folders

Generated by `experiments/tables/results_index.py` from the folders below (do not edit by hand; `--check` is part of
`make test`). One row per folder: the date its runs started (from the run JSONs, else from its name), the
machine (from its name), the versions and series sha256 its JSONs record, what it measured (its README's title)
and which docs cite it. Paths recorded inside run files (`run_dir`, a check's `file`) are as they were written
when the run was made; folders are named `<date>-<machine>-<study>` when committed.

| folder | date | machine | versions recorded | series sha256 | what it measured | cited by |
|---|---|---|---|---|---|---|
{rows}
{gone}"""


def is_current(root: Path = PROJECT) -> bool:
    """Whether ``root``'s results/README.md is exactly what its results/ and docs give, and results/removed.json
    records the commits git gives (where there is such a list)."""
    index, listed = root / INDEX, root / REMOVED
    if not index.is_file() or index.read_text(encoding="utf-8") != render(root):
        return False
    return not listed.is_file() or listed.read_text(encoding="utf-8") == removed_text(root)


def write(root: Path = PROJECT) -> None:
    """results/README.md and, where there is one, results/removed.json with its commits filled."""
    if (root / REMOVED).is_file():
        (root / REMOVED).write_text(removed_text(root), encoding="utf-8")
    (root / INDEX).write_text(render(root), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when results/README.md is stale")
    args = parser.parse_args(argv)
    try:
        if not args.check:
            write()
        elif not is_current():
            print(f"results_index: {INDEX} or {REMOVED} disagrees with results/ and git "
                  "(run `python experiments/tables/results_index.py`)", file=sys.stderr)
            return 1
    except (ValueError, OSError, json.JSONDecodeError) as exc:
        print(f"results_index: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
