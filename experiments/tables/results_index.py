#!/usr/bin/env python3
"""results/README.md, generated: one row per evidence folder, so a reader finds what was measured where.

Every folder under results/ is named ``<date>-<machine>-<study>`` (the machine a short token of ``MACHINES``), or
is a tool's output folder of ``TOOL_FOLDERS``; anything else is an error, so a new folder cannot join the
evidence without saying where it ran. A row's date, versions and series sha256 come from the JSONs inside where
they record them (run JSONs: ``started_utc``, ``device``, ``series_sha256``; study JSONs: ``versions``,
``torch_version``, ``machine.versions``), what it measured from the title of its README (or of its reports), and
which docs cite it from README.md and docs/*.md. ``python experiments/tables/results_index.py`` writes the index;
``--check`` exits 1 when results/README.md disagrees with results/ (the test suite runs it).
"""

from __future__ import annotations

import argparse
import re
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


def render(root: Path = PROJECT) -> str:
    """The whole index: a short preamble, then one row per folder under results/, in name order."""
    cited = citations(root)
    folders = sorted(p for p in (root / "results").iterdir() if p.is_dir())
    rows = "\n".join(_row(folder, cited.get(folder.name, [])) for folder in folders)
    return f"""# Evidence folders

Generated by `experiments/tables/results_index.py` from the folders below (do not edit by hand; `--check` is part of
`make test`). One row per folder: the date its runs started (from the run JSONs, else from its name), the
machine (from its name), the versions and series sha256 its JSONs record, what it measured (its README's title)
and which docs cite it. Paths recorded inside run files (`run_dir`, a check's `file`) are as they were written
when the run was made; folders are named `<date>-<machine>-<study>` when committed.

| folder | date | machine | versions recorded | series sha256 | what it measured | cited by |
|---|---|---|---|---|---|---|
{rows}
"""


def is_current(root: Path = PROJECT) -> bool:
    """Whether ``root``'s results/README.md is exactly what its results/ and docs give."""
    index = root / INDEX
    return index.is_file() and index.read_text(encoding="utf-8") == render(root)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when results/README.md is stale")
    args = parser.parse_args(argv)
    try:
        if not args.check:
            (PROJECT / INDEX).write_text(render(), encoding="utf-8")
        elif not is_current():
            print(f"results_index: {INDEX} disagrees with results/ (run `python experiments/tables/results_index.py`)",
                  file=sys.stderr)
            return 1
    except (ValueError, OSError) as exc:
        print(f"results_index: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
