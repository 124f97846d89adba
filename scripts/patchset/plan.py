"""Applying a series to file contents in memory, exactly: no fuzz, no offset, no partial results.

The plan is computed before anything is written, so a hunk that does not apply stops the run with the trees
untouched.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from unidiff import PatchedFile

from .errors import PatchsetError
from .series import Patch, strip_prefix


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileChange:
    """Pre- and post-image of one tree-relative file; None means 'absent'."""

    path: str
    pre: bytes | None
    post: bytes | None

    @property
    def pre_sha256(self) -> str | None:
        return sha256(self.pre)

    @property
    def post_sha256(self) -> str | None:
        return sha256(self.post)


def _line_bytes(value: str) -> bytes:
    return value.encode("utf-8")


def apply_file_patch(pfile: PatchedFile, before: bytes | None, patch_name: str) -> bytes | None:
    """Apply one file's hunks at exactly the line numbers they state; any mismatch is an error."""
    path = strip_prefix(pfile.path)
    if pfile.is_added_file:
        if before is not None:
            raise PatchsetError(f"patch {patch_name} creates {path}, which already exists")
        before_lines: list[bytes] = []
    elif before is None:
        raise PatchsetError(f"patch {patch_name} modifies {path}, which does not exist")
    else:
        before_lines = before.splitlines(keepends=True)
    out: list[bytes] = []
    cursor = 0
    for hunk in pfile:
        start = max(hunk.source_start - 1, 0) if hunk.source_length else hunk.source_start
        if start < cursor or start > len(before_lines):
            raise PatchsetError(f"patch {patch_name}: hunk at line {hunk.source_start} of {path} is out of order")
        out.extend(before_lines[cursor:start])
        cursor = start
        for line in hunk:
            if line.is_context or line.is_removed:
                if cursor >= len(before_lines) or before_lines[cursor] != _line_bytes(line.value):
                    raise PatchsetError(
                        f"patch {patch_name} does not apply to {path} at line {cursor + 1} (context differs)"
                    )
                if line.is_context:
                    out.append(before_lines[cursor])
                cursor += 1
            elif line.is_added:
                out.append(_line_bytes(line.value))
    out.extend(before_lines[cursor:])
    if pfile.is_removed_file:
        if out:
            raise PatchsetError(f"patch {patch_name} deletes {path} but content remains")
        return None
    return b"".join(out)


def plan_target(patches: list[Patch], read: Callable[[str], bytes | None]) -> dict[str, FileChange]:
    """Run the target's patches in order over contents from `read`; return one change per touched file."""
    pre: dict[str, bytes | None] = {}
    current: dict[str, bytes | None] = {}
    for patch in patches:
        for pfile in patch.diff:
            path = strip_prefix(pfile.path)
            if path.startswith("/") or ".." in path.split("/"):
                raise PatchsetError(f"patch {patch.name} names an unsafe path {path!r}")
            if path not in current:
                pre[path] = current[path] = read(path)
            current[path] = apply_file_patch(pfile, current[path], patch.name)
    return {path: FileChange(path, pre[path], current[path]) for path in current}
