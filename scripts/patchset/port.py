"""Port classification: how each hunk of the series fares on another upstream tree, without fuzz.

Patches run in series order over the target, cumulatively: patch k meets the target with the hunks of
patches 1..k-1 applied where they applied. Per hunk, in this order:

- `file missing`: the file it modifies is not in the target;
- `applies`: its context and removed lines are in the target exactly at the stated line;
- `already upstream`: the change is in the target already — its post-image lines are there, or a 3-way
  merge (`git merge-file`, base = the pinned tree before patch k) of the hunk alone, or of the pinned file
  after patches k..m for some later m (our own later patches may rewrite a hunk), changes nothing;
- `applies at offset`: context and removed lines are in the target exactly, at another line;
- `conflicts`: none of these; the detail says whether a 3-way merge would at least be clean.

Only `applies` and `applies at offset` hunks change the running target (exact text, never a fuzzy match).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from unidiff import Hunk as UnidiffHunk
from unidiff import PatchedFile

from .errors import PatchsetError
from .plan import apply_file_patch
from .series import Patch, strip_prefix

APPLIES = "applies"
OFFSET = "applies at offset"
UPSTREAM = "already upstream"
CONFLICTS = "conflicts"
MISSING = "file missing"
HUNK_VERDICTS = (APPLIES, OFFSET, UPSTREAM, CONFLICTS, MISSING)
PARTLY_UPSTREAM = "partly upstream"

Lines = tuple[bytes, ...]


@dataclass(frozen=True)
class HunkResult:
    """The verdict on one hunk, with where it was found (offset from the stated line) and why."""

    patch: str
    file: str
    index: int  # 1-based within the patch, over all its files
    header: str  # '@@ -a,b +c,d @@ section'
    verdict: str
    offset: int | None
    detail: str
    new_lines_in_target: tuple[int, int] | None = None  # conflicts: (found, of) -- see _new_lines_found


def _hunk_lines(hunk: UnidiffHunk) -> tuple[int, Lines, Lines]:
    """(0-based start in the file before the patch, pre-image lines, post-image lines)."""
    start = max(hunk.source_start - 1, 0) if hunk.source_length else hunk.source_start
    pre = tuple(line.value.encode() for line in hunk if line.is_context or line.is_removed)
    post = tuple(line.value.encode() for line in hunk if line.is_context or line.is_added)
    return start, pre, post


def _header(hunk: UnidiffHunk) -> str:
    head = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
    return f"{head} {hunk.section_header}".rstrip()


def _find(lines: list[bytes], block: Lines, near: int, lowest: int) -> int | None:
    """Start of the exact occurrence of block at or after `lowest` nearest to `near`, if any."""
    hits = [i for i in range(lowest, len(lines) - len(block) + 1) if tuple(lines[i:i + len(block)]) == block]
    return min(hits, key=lambda i: (abs(i - near), i)) if hits else None


def _new_lines_found(post: Lines, pinned: list[bytes], target: list[bytes]) -> tuple[int, int]:
    """Of the distinct lines the hunk adds that the pinned file had nowhere (stripped), how many the target
    file has anywhere: a hint that upstream took part of a change in its own words (not a verdict)."""
    old = {line.strip() for line in pinned}
    new = {line.strip() for line in post} - old - {b""}
    have = {line.strip() for line in target}
    return len(new & have), len(new)


def _splice(lines: list[bytes], start: int, length: int, block: Lines) -> bytes:
    return b"".join([*lines[:start], *block, *lines[start + length:]])


class Merger:
    """`git merge-file` over temporary files: is merging base->theirs into ours clean, and a no-op?"""

    def __init__(self, workdir: Path) -> None:
        self._dir = workdir

    def merge(self, ours: bytes, base: bytes, theirs: bytes) -> tuple[bool, bool]:
        """(clean, no_op): clean when git reports no conflict; no_op when the result equals ours."""
        paths = [self._dir / name for name in ("ours", "base", "theirs")]
        for path, data in zip(paths, (ours, base, theirs)):
            path.write_bytes(data)
        proc = subprocess.run(["git", "merge-file", "-p", "--quiet", *map(str, paths)],
                              capture_output=True, check=False)
        if proc.returncode < 0 or proc.returncode > 127:
            raise PatchsetError(f"git merge-file failed: {proc.stderr.decode(errors='replace').strip()}")
        clean = proc.returncode == 0
        return clean, clean and proc.stdout == ours


@dataclass
class _FileRun:
    """One patch's hunks of one file against the running target and the pinned history of that file."""

    patch: Patch
    pfile: PatchedFile
    target: bytes | None  # running target content
    pinned_before: bytes  # pinned file before this patch
    pinned_later: list[bytes]  # pinned file after this patch, after the next touching patch, ... (in order)
    merger: Merger
    first: int  # number of this file's first hunk within the patch

    def classify(self) -> tuple[list[HunkResult], bytes | None]:
        """Verdict per hunk and the running target afterwards (applying hunks run in order, exactly)."""
        path = strip_prefix(self.pfile.path)
        if self.pfile.is_added_file:
            return self._added(path)
        results: list[HunkResult] = []
        if self.target is None:
            for number, hunk in enumerate(self.pfile, start=self.first):
                results.append(HunkResult(self.patch.name, path, number, _header(hunk), MISSING, None,
                                          "the target has no such file"))
            return results, None
        lines = self.target.splitlines(keepends=True)
        pinned = self.pinned_before.splitlines(keepends=True)
        out: list[bytes] = []
        cursor = 0
        for number, hunk in enumerate(self.pfile, start=self.first):
            start, pre, post = _hunk_lines(hunk)
            verdict, offset, detail, found = CONFLICTS, None, "", None
            if start >= cursor and tuple(lines[start:start + len(pre)]) == pre:
                verdict, offset, at = APPLIES, 0, start
            elif (reason := self._upstream(self.target, lines, cursor, start, pinned, pre, post)) is not None:
                verdict, detail = UPSTREAM, reason
            elif (at := _find(lines, pre, start, cursor)) is not None:
                verdict, offset = OFFSET, at - start
            else:
                clean, _ = self.merger.merge(self.target, self.pinned_before, _splice(pinned, start, len(pre), post))
                found = _new_lines_found(post, pinned, lines)
                detail = (f"3-way merge {'clean' if clean else 'conflicts'}; "
                          f"{found[0]}/{found[1]} new lines in the target file")
            if verdict in (APPLIES, OFFSET):
                out.extend(lines[cursor:at])
                out.extend(post)
                cursor = at + len(pre)
            results.append(HunkResult(self.patch.name, path, number, _header(hunk), verdict, offset, detail, found))
        out.extend(lines[cursor:])
        return results, b"".join(out)

    def _upstream(self, target: bytes, lines: list[bytes], cursor: int, start: int, pinned: list[bytes],
                  pre: Lines, post: Lines) -> str | None:
        """Why this hunk's change is already in the target, or None."""
        if _find(lines, post, start, cursor) is not None:
            return "its post-image lines are in the target"
        if self.merger.merge(target, self.pinned_before, _splice(pinned, start, len(pre), post))[1]:
            return "a 3-way merge of the hunk changes nothing"
        for later, theirs in enumerate(self.pinned_later):
            if self.merger.merge(target, self.pinned_before, theirs)[1]:
                return ("a 3-way merge of this patch's file changes nothing" if later == 0 else
                        f"a 3-way merge of the file as our next {later} patch(es) left it changes nothing")
        return None

    def _added(self, path: str) -> tuple[list[HunkResult], bytes | None]:
        """A file the patch creates: applies when absent, upstream when present with the same content."""
        (hunk,) = list(self.pfile)
        post = b"".join(_hunk_lines(hunk)[2])
        if self.target is None:
            verdict, detail, after = APPLIES, "creates the file", post
        elif self.target == post or any(self.target == later for later in self.pinned_later):
            verdict, detail, after = UPSTREAM, "the target has the file with our content", self.target
        else:
            verdict, detail, after = CONFLICTS, "the target has a file of that name with other content", self.target
        return [HunkResult(self.patch.name, path, self.first, _header(hunk), verdict, 0 if verdict == APPLIES else None,
                           detail)], after


def classify_series(patches: list[Patch], read_target: Callable[[str], bytes | None],
                    read_pinned: Callable[[str], bytes | None]) -> list[list[HunkResult]]:
    """Per patch (in order), the verdict on each of its hunks against the target tree."""
    touched = {strip_prefix(f.path) for p in patches for f in p.diff}
    target = {path: read_target(path) for path in touched}
    # The pinned file after each patch, per path: history[path][k] is the file after patches[k] (patch order).
    pinned_now = {path: read_pinned(path) for path in touched}
    history: dict[str, list[tuple[int, bytes]]] = {path: [] for path in touched}
    for k, patch in enumerate(patches):
        for pfile in patch.diff:
            path = strip_prefix(pfile.path)
            pinned_now[path] = apply_file_patch(pfile, pinned_now[path], patch.name)
            history[path].append((k, pinned_now[path] or b""))
    pinned_state = {path: read_pinned(path) or b"" for path in touched}
    results: list[list[HunkResult]] = []
    with tempfile.TemporaryDirectory() as tmp:
        merger = Merger(Path(tmp))
        for k, patch in enumerate(patches):
            per_patch: list[HunkResult] = []
            for pfile in patch.diff:
                path = strip_prefix(pfile.path)
                later = [content for index, content in history[path] if index >= k]
                run = _FileRun(patch, pfile, target[path], pinned_state[path], later, merger, len(per_patch) + 1)
                hunks, target[path] = run.classify()
                per_patch.extend(hunks)
                pinned_state[path] = later[0]
            results.append(per_patch)
    return results


def patch_verdict(hunks: list[HunkResult]) -> str:
    """One word per patch: the common verdict of its hunks, `conflicts` if any hunk cannot go in,
    `partly upstream` for a mix of applying and upstream hunks."""
    verdicts = {h.verdict for h in hunks}
    if len(verdicts) == 1:
        return verdicts.pop()
    if verdicts & {CONFLICTS, MISSING}:
        return CONFLICTS
    if UPSTREAM in verdicts:
        return PARTLY_UPSTREAM
    return OFFSET
