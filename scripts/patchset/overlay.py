"""The overlay: the patched uni_rl built from the pinned wheel, first on PYTHONPATH at run time.

The package is patched in memory, written to a private staging directory beside overlay/uni_rl and renamed into
place, so a half-built overlay is never importable. overlay/MANIFEST.json (mode 0644: other accounts may share
the overlay) lists the sha256 of every file of the built package (the provenance hook compares imported files
against it) and the checkouts that use it (the last revert removes it). A uni_rl directory that patchset did not
build is never touched.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from . import fsops
from .errors import PatchsetError
from .plan import FileChange, plan_target
from .series import Patch
from .trees import wheel_package_files

PACKAGE = "uni_rl"
MANIFEST = "MANIFEST.json"
Files = dict[str, tuple[bytes, int]]


def package_dir(overlay: Path) -> Path:
    return overlay / PACKAGE


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
              and isinstance(manifest.get("owners"), list) and isinstance(manifest.get("series_sha256"), str))
        if ok:
            return manifest
        problem = "it lacks 'files', 'owners' or 'series_sha256'"
    raise PatchsetError(f"{path} is corrupt: {problem}; delete it and {package_dir(overlay)}, "
                        "then apply again in each checkout that used it")


def save_overlay_manifest(overlay: Path, manifest: dict[str, Any]) -> None:
    fsops.write_file(overlay / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(), 0o644)


def hash_files(files: Files) -> dict[str, str]:
    return {rel: hashlib.sha256(data).hexdigest() for rel, (data, _) in sorted(files.items())}


def hash_tree(root: Path) -> dict[str, str]:
    """sha256 of every file under root/<PACKAGE>, keyed by its path relative to root."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(package_dir(root).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def build(wheel: Path, patches: list[Patch]) -> tuple[Files, dict[str, FileChange]]:
    """The wheel's uni_rl with the series applied, in memory (relative path -> bytes, mode), and the plan."""
    files = wheel_package_files(wheel, PACKAGE)
    plan = plan_target(patches, lambda rel: files[rel][0] if rel in files else None)
    for rel, change in plan.items():
        if change.post is None:
            files.pop(rel, None)
        else:
            files[rel] = (change.post, files[rel][1] if rel in files else 0o644)
    return files, plan


def check_existing(overlay: Path, files: Files) -> tuple[bool, dict[str, Any] | None]:
    """Whether an overlay package is already there (then it must be ours, of this series, unedited) and its manifest.

    Refuses before anything is written when overlay/uni_rl is not a package patchset built for this series.
    """
    manifest = load_overlay_manifest(overlay)
    pkg = package_dir(overlay)
    if not (pkg.exists() or pkg.is_symlink()):
        if manifest is not None:
            raise PatchsetError(f"{overlay / MANIFEST} lists checkouts ({', '.join(manifest['owners'])}) but {pkg} is "
                                "missing; revert them or delete the manifest")
        return False, None
    if manifest is None or pkg.is_symlink() or not pkg.is_dir():
        raise PatchsetError(f"{pkg} exists and was not built by patchset; move it away or choose another OVERLAY=")
    if manifest["files"] != hash_files(files):
        raise PatchsetError(f"{overlay} holds an overlay of another series; revert its checkouts "
                            f"({', '.join(manifest['owners'])}) first or choose another OVERLAY=")
    if hash_tree(overlay) != manifest["files"]:
        raise PatchsetError(f"{pkg} was edited since it was built; revert its checkouts "
                            f"({', '.join(manifest['owners'])}) first or choose another OVERLAY=")
    return True, manifest


def install(overlay: Path, files: Files) -> None:
    """Write the package to a private staging directory and rename it into place (checked absent before)."""
    staging = fsops.fill_dir(overlay, "staging", files)
    fsops.rename(staging / PACKAGE, package_dir(overlay))
    fsops.rmdir(staging)


def remove_ours(overlay: Path, files: dict[str, str] | None) -> None:
    """Delete the package if it is the one we built (same files, unless files is None: edits already saved)."""
    pkg = package_dir(overlay)
    if not (pkg.exists() or pkg.is_symlink()):
        return
    if pkg.is_symlink() or not pkg.is_dir() or (files is not None and hash_tree(overlay) != files):
        raise PatchsetError(f"{pkg} is not the overlay this checkout built (changed since); move it away and retry")
    fsops.discard(pkg)


def release(overlay: Path, checkout: Path, files: dict[str, str], edits_saved: bool) -> bool:
    """Drop this checkout from the overlay's owners; delete the package and manifest when none remain.

    The package must be the one built (files), unless the user's edits to it were saved (FORCE). Idempotent,
    so an interrupted revert can run it again. Returns whether the overlay was removed.
    """
    manifest = load_overlay_manifest(overlay)
    owners = [o for o in (manifest or {}).get("owners", []) if o != str(checkout)]
    if manifest is not None and owners:
        if owners != manifest["owners"]:
            save_overlay_manifest(overlay, {**manifest, "owners": owners})
        return False
    remove_ours(overlay, None if edits_saved else files)
    if manifest is not None:
        fsops.unlink(overlay / MANIFEST)
    return True


def restore(overlay: Path, before: dict[str, Any], files: dict[str, str]) -> None:
    """Roll the overlay back to what an interrupted apply found (package there or not, the manifest then)."""
    if not before["package"]:
        remove_ours(overlay, files)
    current = load_overlay_manifest(overlay)
    if before["manifest"] is None:
        if current is not None:
            fsops.unlink(overlay / MANIFEST)
    elif current != before["manifest"]:
        save_overlay_manifest(overlay, before["manifest"])
