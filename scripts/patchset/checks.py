"""The checks apply makes before the first byte changes: pre-/post-images, clean and known checkout, versions,
writable targets. Each refusal is one line that says what to do."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import PatchsetError
from .paths import OVERLAY_DIR, PROJECT_ROOT, SOURCE_DIRS, STATE_DIRNAME
from .pins import VersionCheck, check_installed
from .plan import FileChange, sha256
from .trees import identify_checkout, is_writable_file


def verify_pre_images(target: str, read: Callable[[str], bytes | None], manifest: dict[str, Any], where: Path) -> None:
    """Each touched file must be the pinned pre-image, checked before any hunk is tried."""
    for path, want in manifest["targets"][target].items():
        data = read(path)
        if sha256(data) != want["pre"]:
            hint = " (it has CRLF line endings)" if data and b"\r\n" in data else ""
            state = "is missing" if data is None else "differs from the pinned version"
            raise PatchsetError(f"{path} in {where} {state}{hint}; this is not an unmodified {target} tree")


def verify_post_images(target: str, plan: dict[str, FileChange], manifest: dict[str, Any]) -> None:
    """The computed post-images must be the recorded ones (patches and manifest agree)."""
    expected = manifest["targets"][target]
    for path, change in plan.items():
        if path not in expected or change.post_sha256 != expected[path]["post"]:
            raise PatchsetError(f"series produced an unexpected {path}; patches and manifest disagree (make manifest?)")


def check_clean(checkout: Path, touched: list[str]) -> None:
    dirty = identify_checkout(checkout, touched).dirty_paths
    if dirty:
        raise PatchsetError(f"{checkout} has local edits in {', '.join(dirty)}; commit or stash them first")


def check_identity(pins: dict[str, str], checkout: Path, touched: list[str], allow_other_commit: bool) -> dict:
    ident = identify_checkout(checkout, touched)
    pinned = pins["UNILAB_COMMIT"]
    known = ident.head == pinned or ident.head_tree == pins.get("UNILAB_SDIST_TREE")
    if ident.is_git and not known and not allow_other_commit:
        head = ident.head[:12] if ident.head else "no commit"
        raise PatchsetError(
            f"{checkout} is at {head}, not UniLab {pins['UNILAB_VERSION']} ({pinned[:7]}); "
            "the touched files match, so --allow-other-commit (ALLOW_OTHER_COMMIT=1) would apply anyway"
        )
    return {"is_git": ident.is_git, "head": ident.head, "head_tree": ident.head_tree, "pinned_head": known}


def check_versions(pins: dict[str, str], python: list[str], allow_drift: bool) -> list[VersionCheck]:
    checks = check_installed(python, pins)
    drift = [c for c in checks if not c.ok]
    if drift and not allow_drift:
        raise PatchsetError(
            "installed versions differ from VERSIONS.env: " + "; ".join(c.describe() for c in drift)
            + f" (in {' '.join(python)}); --allow-version-drift (ALLOW_DRIFT=1) continues and records it"
        )
    return checks


def check_writable(checkout: Path, plan: dict[str, FileChange]) -> None:
    for path in plan:
        full = checkout / path
        if not is_writable_file(full):
            raise PatchsetError(f"{path} in {checkout} is read-only; make it writable (chmod u+w) and retry")
        parent = next(p for p in full.parents if p.exists())
        if not os.access(parent, os.W_OK):
            raise PatchsetError(f"cannot write in {parent}")


def check_overlay_place(overlay: Path, checkout: Path, patches_dir: Path) -> None:
    """The overlay gets uni_rl/, unisim/ and a MANIFEST.json written into it, and the last revert deletes them:
    it must not lie where those names already mean something else. In the project's patches/ its manifest would
    be taken for the series' MANIFEST.json (and an apply's advice would be to delete that); among the project's
    other sources it would be committed with them; in the checkout's journal folder it would collide with the
    journal itself."""
    journal = checkout / STATE_DIRNAME
    places = [(journal, "where patchset keeps the journal of the checkout")]
    places += [(folder, "which holds this project's own files") for folder in (PROJECT_ROOT, *SOURCE_DIRS, patches_dir)]
    for folder, why in places:
        if overlay == folder or (folder in overlay.parents and folder != PROJECT_ROOT):
            where = "is the folder" if overlay == folder else "lies in"
            raise PatchsetError(f"the overlay {overlay} {where} {folder}, {why}; choose another OVERLAY= "
                                f"(--overlay), e.g. the default {OVERLAY_DIR}")
