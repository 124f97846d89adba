"""FORCE revert: save the user's edits to patched files byte for byte, verified, before anything is overwritten.

Saved to <checkout>/.flashsac-overlay-user-edits-<time>/: files/<target>/<path> is the edited file itself (a
symlink is saved as the same link), edits.diff a binary-safe unified diff from the patched version (CRLF,
missing final newline and non-UTF-8 bytes kept; applies with 'git apply') where the journal keeps that version,
README.txt lists what was saved, what had been deleted and what edits.diff leaves out. The directory is filled
under a temporary name, checked against the live files, and only then renamed into place; a copy that does not
match stops the revert with the files untouched.
"""

from __future__ import annotations

import difflib
import os
from datetime import datetime, timezone
from pathlib import Path

from . import fsops
from .errors import PatchsetError
from .paths import STATE_DIRNAME
from .trees import file_marker


def binary_diff(before: bytes, after: bytes, rel: str) -> bytes:
    """A unified diff of raw lines: line endings and bytes kept, '\\ No newline at end of file' where due."""
    lines = difflib.diff_bytes(difflib.unified_diff, before.splitlines(True), after.splitlines(True),
                               f"a/{rel}".encode(), f"b/{rel}".encode(), lineterm=b"\n")
    out = []
    for line in lines:
        out.append(line if line.endswith(b"\n") else line + b"\n\\ No newline at end of file\n")
    return b"".join(out)


def _dest(checkout: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dest, n = checkout / f"{STATE_DIRNAME}-user-edits-{stamp}", 1
    while dest.exists() or dest.is_symlink():
        n += 1
        dest = checkout / f"{STATE_DIRNAME}-user-edits-{stamp}-{n}"
    return dest


def save(checkout: Path, edited: list[tuple[str, str, Path, bytes | None]]) -> tuple[Path, dict[str, str | None]]:
    """Save each edited file (target, path, live root, patched bytes: None where the journal keeps no copy, so
    edits.diff cannot show the change); returns the directory and, per 'target:path', the marker (sha256 / symlink
    / None) of what was saved, for the journal."""
    files: dict[str, tuple[bytes, int]] = {}
    links: dict[str, str] = {}
    markers: dict[str, str | None] = {}
    notes, diff = [], []
    for target, rel, root, patched in edited:
        live, name = root / rel, f"files/{target}/{rel}"
        marker = markers[f"{target}:{rel}"] = file_marker(root, rel)
        if marker is None:
            notes.append(f"{target}:{rel} had been deleted")
        elif live.is_symlink():
            links[name] = os.readlink(live)
            notes.append(f"{target}:{rel} was a symlink to {links[name]} (saved as that link)")
        elif live.is_file():
            data = live.read_bytes()
            files[name] = (data, live.stat().st_mode & 0o7777)
            note = f"{target}:{rel} saved as {name} (mode {oct(files[name][1])})"
            if patched is None:
                note += "; not in edits.diff: the journal keeps no copy of the file as built"
            else:
                diff.append(binary_diff(patched, data, rel))
            notes.append(note)
        else:
            raise PatchsetError(f"{live} is not a regular file; move it away, then revert")
    files["edits.diff"] = (b"".join(diff), 0o644)
    files["README.txt"] = ("Your edits, saved by 'patchset revert --force' before the files were restored:\n"
                           + "".join(f"  {n}\n" for n in notes)).encode(), 0o644
    tmp = fsops.fill_dir(checkout, "user-edits", files, links)
    for target, rel, root, _ in edited:
        saved = file_marker(tmp, f"files/{target}/{rel}")
        if saved != markers[f"{target}:{rel}"] or file_marker(root, rel) != saved:
            fsops.discard(tmp)
            raise PatchsetError(f"the saved copy of {target}:{rel} does not match it; nothing was reverted")
    dest = _dest(checkout)
    fsops.rename(tmp, dest)
    return dest, markers
