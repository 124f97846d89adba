"""The wheelhouse's record of itself: wheelhouse.json (facts + sha256 of every file) and SHA256SUMS (the same
sha256s in `sha256sum -c` form, for a person checking by hand). Verification reads the JSON, requires SHA256SUMS
to say the same, then hashes every file: a missing or altered file is refused before anything is installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from patchset.api import file_sha256

from . import OfflineError

MANIFEST = "wheelhouse.json"
SUMS = "SHA256SUMS"
FORMAT = 1


def render_sums(files: dict[str, str]) -> str:
    return "".join(f"{sha}  {name}\n" for name, sha in sorted(files.items()))


def write(root: Path, facts: dict[str, Any]) -> str:
    """Hash every file under root into wheelhouse.json + SHA256SUMS; returns the JSON's own sha256."""
    files = {
        p.relative_to(root).as_posix(): file_sha256(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, SUMS)
    }
    record = {"format": FORMAT, **facts, "files": files}
    (root / MANIFEST).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (root / SUMS).write_text(render_sums(files), encoding="utf-8")
    return file_sha256(root / MANIFEST)


def load(root: Path) -> dict[str, Any]:
    """The manifest of a wheelhouse folder, without checking its files."""
    path = root / MANIFEST
    if not path.is_file():
        raise OfflineError(f"{root} is not a wheelhouse (no {MANIFEST}): build one with `make wheelhouse`")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OfflineError(f"{path} is not valid JSON ({exc})") from exc
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("files"), dict):
        raise OfflineError(f"{path} is not a format-{FORMAT} wheelhouse manifest: rebuild with `make wheelhouse`")
    for name in record["files"]:
        if name.startswith("/") or ".." in name.split("/"):
            raise OfflineError(f"{path} lists {name!r}, which is outside the wheelhouse")
    return record


def verify(root: Path) -> dict[str, Any]:
    """The manifest, after every listed file was found with its recorded sha256; raises OfflineError otherwise."""
    record = load(root)
    files: dict[str, str] = record["files"]
    sums = root / SUMS
    if not sums.is_file() or sums.read_text(encoding="utf-8") != render_sums(files):
        raise OfflineError(f"{sums} is missing or disagrees with {root / MANIFEST}: the wheelhouse was altered")
    for name, want in sorted(files.items()):
        path = root / name
        if not path.is_file():
            raise OfflineError(f"wheelhouse file {path} is missing (listed in {MANIFEST})")
        got = file_sha256(path)
        if got != want:
            raise OfflineError(f"wheelhouse file {path} has sha256 {got}, {MANIFEST} records {want}")
    return record
