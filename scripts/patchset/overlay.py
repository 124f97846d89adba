"""The overlay: the patched uni_rl built from the pinned wheel, first on PYTHONPATH at run time.

Built in a staging directory next to overlay/uni_rl and renamed into place, so a half-built overlay is
never importable. overlay/MANIFEST.json lists the sha256 of every file of the built package (the provenance
hook compares imported files against it) and the checkouts that use it (the last revert removes it).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .errors import PatchsetError
from .plan import FileChange, plan_target
from .series import Patch
from .state import atomic_write
from .trees import extract_wheel_package, read_file

PACKAGE = "uni_rl"
MANIFEST = "MANIFEST.json"


def package_dir(overlay: Path) -> Path:
    return overlay / PACKAGE


def load_overlay_manifest(overlay: Path) -> dict[str, Any] | None:
    path = overlay / MANIFEST
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def save_overlay_manifest(overlay: Path, manifest: dict[str, Any]) -> None:
    atomic_write(overlay / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())


def hash_tree(root: Path) -> dict[str, str]:
    """sha256 of every file under root/<PACKAGE>, keyed by its path relative to root."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(package_dir(root).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def stage(overlay: Path, wheel: Path, patches: list[Patch]) -> tuple[Path, dict[str, FileChange]]:
    """Extract the wheel's uni_rl into a staging dir beside the overlay and plan the series over it.

    Returns the staging dir (its PACKAGE not yet patched) and the plan; nothing visible changes.
    """
    overlay.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=overlay, prefix=".staging-"))
    try:
        extract_wheel_package(wheel, PACKAGE, staging)
        plan = plan_target(patches, lambda rel: read_file(staging, rel))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging, plan


def write_plan(staging: Path, plan: dict[str, FileChange]) -> None:
    for change in plan.values():
        target = staging / change.path
        if change.post is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(change.post)


def install(overlay: Path, staging: Path) -> None:
    """Rename the staged package into place; an existing overlay package must have been checked equal."""
    dest = package_dir(overlay)
    if dest.exists():
        raise PatchsetError(f"{dest} exists; it must be reverted before a new overlay is built")
    (staging / PACKAGE).rename(dest)
    shutil.rmtree(staging, ignore_errors=True)


def remove_package(overlay: Path) -> None:
    """Delete the built package and its manifest; the committed runtime files stay."""
    shutil.rmtree(package_dir(overlay), ignore_errors=True)
    (overlay / MANIFEST).unlink(missing_ok=True)


def remove_stale_staging(overlay: Path) -> int:
    """Staging dirs left by a killed run; they are never importable, so deleting them is always safe."""
    stale = list(overlay.glob(".staging-*")) if overlay.exists() else []
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return len(stale)
