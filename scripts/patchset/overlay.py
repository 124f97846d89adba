"""The overlay: the patched overlay packages (targets.OVERLAY_PACKAGES: uni_rl from the pinned unilab-rl wheel,
unisim from the pinned unisim-core sdist) and the project's own packages (targets.OWN_PACKAGES, from runtime/),
first on PYTHONPATH at run time.

The packages are patched in memory, written to one private staging directory beside them and renamed into place
one by one, so a half-built package is never importable. overlay/MANIFEST.json (mode 0644: other accounts may
share the overlay) lists the sha256 of every file of the built packages (the provenance hook compares imported
files against it) and the checkouts that use it (the last revert removes it). A package directory that patchset
did not build is never touched.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import fsops
from .errors import PatchsetError
from .plan import FileChange, plan_target
from .paths import RUNTIME_DIR
from .series import Series
from .targets import OVERLAY_DIRS, OVERLAY_TARGETS, OWN_PACKAGES
from .trees import file_marker

MANIFEST = "MANIFEST.json"
Files = dict[str, tuple[bytes, int]]


def package_dir(overlay: Path, package: str) -> Path:
    return overlay / package


def _present(overlay: Path) -> list[Path]:
    """The overlay package directories that exist (or are links) now."""
    return [d for d in (package_dir(overlay, p) for p in OVERLAY_DIRS) if d.exists() or d.is_symlink()]


def load_overlay_manifest(overlay: Path) -> dict[str, Any] | None:
    """The overlay's manifest, structurally checked; None when there is none."""
    path = overlay / MANIFEST
    try:
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        problem = f"unreadable ({exc})"
    else:
        ok = (isinstance(manifest, dict) and isinstance(manifest.get("files"), dict)
              and isinstance(manifest.get("owners"), list) and isinstance(manifest.get("series_sha256"), str)
              and isinstance(manifest.get("created_dirs", []), list)
              and all(isinstance(d, str) for d in manifest.get("created_dirs", [])))
        if ok:
            return manifest
        problem = "it lacks 'files', 'owners' or 'series_sha256' (or 'created_dirs' is not a list of paths)"
    raise PatchsetError(f"{path} is corrupt: {problem}; delete it and the package directories "
                        f"({', '.join(OVERLAY_DIRS)}) beside it, then apply again in each checkout that used it")


def _encode_manifest(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def save_overlay_manifest(overlay: Path, manifest: dict[str, Any], ready: Path | None = None) -> None:
    """Write the overlay's manifest; where ready holds exactly these bytes (put aside before the run's first
    change), it is renamed into place instead, which needs no new space on the disk."""
    data = _encode_manifest(manifest)
    if ready is not None and ready.is_file() and not ready.is_symlink() and ready.read_bytes() == data:
        fsops.move_file(ready, overlay / MANIFEST)
    else:
        fsops.write_file(overlay / MANIFEST, data, 0o644)


def put_aside_manifest(overlay: Path, manifest: dict[str, Any]) -> Path:
    """The bytes of a manifest a later step (a rollback, a revert's release) may have to write, written beside the
    manifest under a temporary name before the run changes anything: that step then needs no new space."""
    ready = fsops.tmp_path(overlay, f"{MANIFEST}-ready")
    fsops.write_aside(ready, _encode_manifest(manifest))
    return ready


def hash_files(files: Files) -> dict[str, str]:
    return {rel: hashlib.sha256(data).hexdigest() for rel, (data, _) in sorted(files.items())}


def tree_markers(overlay: Path) -> dict[str, str | None]:
    """What stands at every file of the overlay package directories present (trees.file_marker: a sha256, a link as
    'symlink:<target>', never followed), keyed by its path relative to overlay. __pycache__ is left out: Python
    writes it there on import."""
    markers = {}
    for package in _present(overlay):
        if package.is_symlink() or not package.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(package):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in [*dirnames, *filenames]:
                path = Path(dirpath) / name
                if path.is_symlink() or not path.is_dir():
                    rel = str(path.relative_to(overlay))
                    markers[rel] = file_marker(overlay, rel)
    return markers


def changes(overlay: Path, expected: Mapping[str, str | None]) -> dict[str, str | None]:
    """Every file of the overlay packages present that is not as expected (overlay-relative path -> marker; None:
    absent), with what stands there now (None: deleted). A package that is absent is left out: a revert stopped
    between two removals leaves one."""
    present = {d.name for d in _present(overlay)}
    want = {rel: m for rel, m in expected.items() if m is not None and rel.split("/")[0] in present}
    have = tree_markers(overlay)
    return {rel: have.get(rel) for rel in sorted({*want, *have}) if have.get(rel) != want.get(rel)}


def own_files(root: Path = RUNTIME_DIR) -> Files:
    """The project's own packages as the overlay holds them (overlay-relative path -> bytes, mode 0644): every file
    under runtime/<package>/ but Python's caches. Refuses a link or a missing package: the overlay must not
    depend on what a link points to."""
    files: Files = {}
    for package in OWN_PACKAGES:
        top = root / package
        if not top.is_dir() or top.is_symlink():
            raise PatchsetError(f"{top} is missing (or a link): the project's own package cannot be placed")
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if name.endswith((".pyc", ".pyo")):
                    continue
                if path.is_symlink() or not path.is_file():
                    raise PatchsetError(f"{path} is not a plain file; the overlay holds plain files only")
                files[str(path.relative_to(root))] = (path.read_bytes(), 0o644)
    return files


def build(pristine: dict[str, Files], series: Series) -> tuple[Files, dict[str, dict[str, FileChange]]]:
    """Every overlay package with its patches applied, and the project's own packages, in memory (overlay-relative
    path -> bytes, mode), and the plan of each target. pristine: package -> its files in the pinned artifact."""
    files: Files = own_files()
    plans = {}
    for package in OVERLAY_TARGETS:
        own = dict(pristine[package])
        plans[package] = plan_target(series.for_target(package), lambda rel, own=own: own[rel][0] if rel in own else None)
        for rel, change in plans[package].items():
            if change.post is None:
                own.pop(rel, None)
            else:
                own[rel] = (change.post, own[rel][1] if rel in own else 0o644)
        files.update(own)
    return files, plans


def _way_out(overlay: Path, manifest: dict[str, Any]) -> str:
    """What to do about an overlay this apply cannot use: revert the checkouts its manifest names, or, where it
    names none (no revert would release it), delete what is left of it."""
    if manifest["owners"]:
        return f"revert its checkouts ({', '.join(manifest['owners'])}) first or choose another OVERLAY="
    left = ", ".join(str(p) for p in [*_present(overlay), overlay / MANIFEST])
    return f"no checkout uses it: delete {left}, or choose another OVERLAY="


def check_existing(overlay: Path, files: Files) -> tuple[bool, dict[str, Any] | None]:
    """Whether the overlay packages are already there (then they must be ours, of this series, unedited) and the
    overlay's manifest.

    Refuses before anything is written when a package directory there is not one patchset built for this series.
    """
    manifest = load_overlay_manifest(overlay)
    present = _present(overlay)
    if not present:
        if manifest is not None:
            raise PatchsetError(f"{overlay / MANIFEST} remains but its packages are missing; "
                                f"{_way_out(overlay, manifest)}")
        return False, None
    alien = next((d for d in present if manifest is None or d.is_symlink() or not d.is_dir()), None)
    if alien is not None:
        raise PatchsetError(f"{alien} exists and was not built by patchset; move it away or choose another OVERLAY=")
    pkg = ", ".join(str(d) for d in present)
    if manifest["files"] != hash_files(files):
        raise PatchsetError(f"{overlay} holds an overlay of another series or runtime/; "
                            f"{_way_out(overlay, manifest)}")
    if len(present) < len(OVERLAY_DIRS) or changes(overlay, manifest["files"]):
        raise PatchsetError(f"{pkg} was edited since it was built; {_way_out(overlay, manifest)}")
    return True, manifest


def install(overlay: Path, files: Files) -> None:
    """Write the packages to a private staging directory and rename each into place (checked absent before)."""
    staging = fsops.fill_dir(overlay, "staging", files)
    for package in OVERLAY_DIRS:
        fsops.rename(staging / package, package_dir(overlay, package))
    fsops.rmdir(staging)


def created_dirs(overlay: Path, manifest: dict[str, Any] | None, own: list[str]) -> list[str]:
    """The directories applies created for this overlay: a checkout's own and those the shared manifest lists (an
    earlier checkout may have created them), kept to the overlay and its parents. The revert that removes the
    overlay removes them too, when empty."""
    listed = {*own, *(manifest or {}).get("created_dirs", [])}
    return sorted(d for d in listed if Path(d) == overlay or Path(d) in overlay.parents)


def remove_ours(overlay: Path, expected: Mapping[str, str | None]) -> None:
    """Delete the packages if they hold exactly what we built, edits a forced revert saved in their place
    (expected: overlay-relative path -> marker). Recovery checks that before it changes anything, so a refusal
    here means the overlay changed while this run worked.

    Idempotent: a revert killed between two packages finds the rest and removes them the next time.
    """
    present = _present(overlay)
    if not present:
        return
    alien = next((d for d in present if d.is_symlink() or not d.is_dir()), None)
    if alien is not None:
        raise PatchsetError(f"{alien} is not the overlay this checkout built (changed since); move it away and retry")
    changed = changes(overlay, expected)
    if changed:
        raise PatchsetError(f"{', '.join(changed)} in the overlay {overlay} changed while this run worked; "
                            "run 'revert' again (FORCE=1 saves the changes first)")
    for directory in present:
        fsops.discard(directory)


def release(overlay: Path, checkout: Path, expected: Mapping[str, str | None], ready: Path | None = None) -> bool:
    """Drop this checkout from the overlay's owners; delete the package and manifest when none remain.

    The packages must hold what was built, or the edits a forced revert saved (expected). Idempotent, so an
    interrupted revert can run it again. Returns whether the overlay was removed.
    """
    manifest = load_overlay_manifest(overlay)
    owners = [o for o in (manifest or {}).get("owners", []) if o != str(checkout)]
    if manifest is not None and owners:
        if owners != manifest["owners"]:
            save_overlay_manifest(overlay, {**manifest, "owners": owners}, ready)
        return False
    remove_ours(overlay, expected)
    if manifest is not None:
        fsops.unlink(overlay / MANIFEST)
    return True


def restore(overlay: Path, before: dict[str, Any], expected: Mapping[str, str | None],
            ready: Path | None = None) -> None:
    """Roll the overlay back to what an interrupted apply found (package there or not, the manifest then)."""
    if not before["package"]:
        remove_ours(overlay, expected)
    current = load_overlay_manifest(overlay)
    if before["manifest"] is None:
        if current is not None:
            fsops.unlink(overlay / MANIFEST)
    elif current != before["manifest"]:
        save_overlay_manifest(overlay, before["manifest"], ready)
