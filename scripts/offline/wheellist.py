"""The GPU host's wheel list (gpu-host-wheels.txt) and its agreement with the project's other pins.

The list repeats versions that VERSIONS.env and requirements.txt also pin (the host must run exactly the pinned
stack), so a change to one of them without the other is refused here rather than found on the GPU host.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from patchset.api import GPU_PHYSICS_PINS, INSTALLED_PINS, PROJECT_ROOT, versions_match

from . import OfflineError

WHEEL_LIST = Path(__file__).resolve().parent / "gpu-host-wheels.txt"
REQUIREMENTS = PROJECT_ROOT / "requirements.txt"
#: Pinned distributions the host brings itself: a CUDA torch build is larger than a wheelhouse should carry.
HOST_PROVIDED = frozenset({"torch"})
_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s#;]+)\s*(#\s*sdist\b.*)?(?:#.*)?$")


def canonical(name: str) -> str:
    """PEP 503 normalized project name (what wheel filenames and indexes compare by)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Entry:
    """One pinned project of the list."""

    name: str
    version: str
    from_sdist: bool

    @property
    def key(self) -> str:
        return canonical(self.name)

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


def parse_pins(path: Path, *, allow_sdist: bool) -> list[Entry]:
    """`name==version` lines (extras ignored); comments and blank lines skipped, anything else refused."""
    if not path.is_file():
        raise OfflineError(f"{path} does not exist")
    entries: list[Entry] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match or (match.group(3) and not allow_sdist):
            raise OfflineError(f"{path.name}:{number}: expected name==version, got {raw!r}")
        entries.append(Entry(match.group(1), match.group(2), bool(match.group(3))))
    seen: set[str] = set()
    for entry in entries:
        if entry.key in seen:
            raise OfflineError(f"{path.name}: {entry.name} is listed twice")
        seen.add(entry.key)
    return entries


def read_wheel_list(path: Path = WHEEL_LIST) -> list[Entry]:
    return parse_pins(path, allow_sdist=True)


def disagreements(entries: list[Entry], pins: dict[str, str], requirements: list[Entry]) -> list[str]:
    """Where the list or requirements.txt contradicts VERSIONS.env, or the two lists each other (empty: they agree).

    VERSIONS.env is the one source of the pinned stack's versions; requirements.txt (what `make setup` installs)
    and the list repeat them, so each repetition is compared with it here.
    """
    listed = {e.key: e for e in entries}
    pinned = {canonical(dist): key for dist, key in {**INSTALLED_PINS, **GPU_PHYSICS_PINS}.items()}
    problems = [f"requirements.txt pins {req.spec} but VERSIONS.env pins {pinned[req.key]}={pins[pinned[req.key]]}"
                for req in requirements
                if req.key in pinned and pinned[req.key] in pins and not versions_match(pins[pinned[req.key]], req.version)]
    for dist, key in {**INSTALLED_PINS, **GPU_PHYSICS_PINS}.items():
        if dist in HOST_PROVIDED or key not in pins:
            continue
        entry = listed.get(canonical(dist))
        if entry is None:
            problems.append(f"{dist} is pinned in VERSIONS.env ({key}={pins[key]}) but not listed")
        elif entry.version != pins[key]:
            problems.append(f"{dist}=={entry.version} but VERSIONS.env pins {key}={pins[key]}")
    for req in requirements:
        entry = listed.get(req.key)
        if entry is not None and entry.version != req.version:
            problems.append(f"{entry.name}=={entry.version} but requirements.txt pins {req.spec}")
    return problems


def check_agreement(entries: list[Entry], pins: dict[str, str], requirements_file: Path = REQUIREMENTS) -> None:
    """Raise OfflineError naming every disagreement (one line)."""
    problems = disagreements(entries, pins, parse_pins(requirements_file, allow_sdist=False))
    if problems:
        raise OfflineError(f"the GPU host wheel list disagrees with the project's pins: {'; '.join(problems)}")
