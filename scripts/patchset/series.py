"""Reading patches/series and its patch files: order, target tree, DEP-3 header, hunks.

A patch is rejected here, before any tree is looked at, when it is not plain LF text, lacks its header,
or carries no hunks, and a .patch file the series does not list stops everything (a maintenance error); tampering is caught against the committed manifest (see manifest.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from .errors import PatchsetError

TARGETS = ("unilab", "uni_rl")
REQUIRED_HEADER_FIELDS = ("Description", "Target", "Last-Update")


@dataclass(frozen=True)
class Patch:
    """One entry of the series with its parsed diff."""

    target: str
    name: str  # path relative to patches/, as written in the series
    sha256: str
    header: dict[str, str]
    diff: PatchSet

    def files(self) -> list[str]:
        """Tree-relative paths this patch touches (without the a/ b/ prefixes)."""
        return [strip_prefix(f.path) for f in self.diff]


@dataclass(frozen=True)
class Series:
    """The ordered patches plus the digest that identifies this exact series."""

    patches: list[Patch]
    sha256: str

    def for_target(self, target: str) -> list[Patch]:
        return [p for p in self.patches if p.target == target]


def strip_prefix(path: str) -> str:
    """unidiff reports 'a/x' or 'x'; trees want 'x'."""
    return path[2:] if path.startswith(("a/", "b/")) else path


def parse_header(text: str, name: str) -> dict[str, str]:
    """DEP-3 style: 'Field: value' lines with ' '-indented continuations, ended by a line '---'."""
    header: dict[str, str] = {}
    last: str | None = None
    for line in text.split("\n"):
        if line == "---" or line.startswith("--- "):
            break
        if line.startswith(" ") and last:
            header[last] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            last = key.strip()
            header[last] = value.strip()
    missing = [f for f in REQUIRED_HEADER_FIELDS if f not in header]
    if missing:
        raise PatchsetError(f"patch {name} lacks header field(s) {', '.join(missing)}")
    return header


def read_patch(patches_dir: Path, target: str, name: str) -> Patch:
    path = patches_dir / name
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PatchsetError(f"series names {name}, which cannot be read: {exc.strerror}") from exc
    if b"\r" in raw:
        raise PatchsetError(
            f"patch {name} has CRLF line endings (a checkout with core.autocrlf?); "
            "patches must be LF: re-clone with .gitattributes honoured"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchsetError(f"patch {name} is not UTF-8 text") from exc
    header = parse_header(text, name)
    if header["Target"] != target:
        raise PatchsetError(f"patch {name} says Target: {header['Target']}, but the series lists it for {target}")
    try:
        diff = PatchSet(text)
    except UnidiffParseError as exc:
        raise PatchsetError(f"patch {name} is not a valid unified diff: {exc}") from exc
    if not diff or not all(len(f) for f in diff):
        raise PatchsetError(f"patch {name} has no hunks")
    return Patch(target, name, hashlib.sha256(raw).hexdigest(), header, diff)


def load_series(patches_dir: Path) -> Series:
    """Parse patches/series: '<target> <path>' per line, '#' comments."""
    series_file = patches_dir / "series"
    try:
        raw = series_file.read_bytes()
    except OSError as exc:
        raise PatchsetError(f"cannot read {series_file}: {exc.strerror}") from exc
    if b"\r" in raw:
        raise PatchsetError(f"{series_file} has CRLF line endings; it must be LF")
    patches: list[Patch] = []
    for number, line in enumerate(raw.decode("utf-8").split("\n"), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2 or fields[0] not in TARGETS:
            raise PatchsetError(f"series line {number}: expected '<{'|'.join(TARGETS)}> <patch>', got {line!r}")
        patches.append(read_patch(patches_dir, fields[0], fields[1]))
    if not patches:
        raise PatchsetError(f"{series_file} lists no patches")
    stray = sorted(str(p.relative_to(patches_dir)) for p in patches_dir.rglob("*.patch")
                   if str(p.relative_to(patches_dir)) not in {q.name for q in patches})
    if stray:
        raise PatchsetError(f"patch {stray[0]} is not listed in {series_file}; add it to the series "
                            "(then make manifest) or remove it")
    digest = hashlib.sha256()
    for p in patches:
        digest.update(f"{p.target} {p.name} {p.sha256}\n".encode())
    return Series(patches, digest.hexdigest())
