"""patches/MANIFEST.json: the committed record of what each patch file and each touched file must hash to.

It pins the patch files themselves (tampering shows up as a digest mismatch) and the pre-/post-image sha256
of every touched file of every target, so a target is verified by content even when it is not a git checkout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import PatchsetError
from .plan import FileChange
from .series import Series
from .targets import TARGETS

MANIFEST_NAME = "MANIFEST.json"


def build_manifest(series: Series, plans: dict[str, dict[str, FileChange]]) -> dict[str, Any]:
    """Manifest content from a series planned over the pristine pinned trees."""
    return {
        "series_sha256": series.sha256,
        "patches": {p.name: {"target": p.target, "sha256": p.sha256} for p in series.patches},
        "targets": {
            target: {path: {"pre": c.pre_sha256, "post": c.post_sha256} for path, c in sorted(plan.items())}
            for target, plan in plans.items()
        },
    }


def write_manifest(patches_dir: Path, manifest: dict[str, Any]) -> None:
    (patches_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def load_manifest(patches_dir: Path) -> dict[str, Any]:
    path = patches_dir / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PatchsetError(f"cannot read {path}: {exc}") from exc
    problem = _structure_error(manifest)
    if problem:
        raise PatchsetError(f"{path} is corrupt: {problem}; restore it with git or run 'make manifest'")
    return manifest


def _structure_error(manifest: Any) -> str | None:
    """What is structurally wrong with a parsed manifest (None: usable)."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    if not isinstance(manifest.get("series_sha256"), str):
        return "'series_sha256' is missing"
    patches, targets = manifest.get("patches"), manifest.get("targets")
    if not isinstance(patches, dict) or not all(isinstance(e, dict) and "sha256" in e for e in patches.values()):
        return "'patches' is missing or lacks sha256 entries"
    if not isinstance(targets, dict) or set(targets) != set(TARGETS):
        return f"'targets' must name {', '.join(TARGETS)}"
    for target, files in targets.items():
        if not isinstance(files, dict) or not all(isinstance(e, dict) and {"pre", "post"} <= set(e)
                                                  for e in files.values()):
            return f"'targets.{target}' lacks pre/post entries"
    return None


def verify_series(series: Series, manifest: dict[str, Any]) -> None:
    """Every patch must be the committed one; a changed, added or missing patch stops everything."""
    recorded = manifest["patches"]
    for patch in series.patches:
        entry = recorded.get(patch.name)
        if entry is None:
            raise PatchsetError(f"patch {patch.name} is not in {MANIFEST_NAME}; run 'patchset manifest' after editing")
        if entry["sha256"] != patch.sha256:
            raise PatchsetError(
                f"patch {patch.name} was modified (sha256 {patch.sha256[:12]}, manifest says {entry['sha256'][:12]})"
            )
    missing = sorted(set(recorded) - {p.name for p in series.patches})
    if missing:
        raise PatchsetError(f"series lacks patch(es) recorded in {MANIFEST_NAME}: {', '.join(missing)}")
    if manifest["series_sha256"] != series.sha256:
        # Every patch matched its own sha256 above, so only the series digest (over target, name and sha256 in
        # series order) can tell: the recorded digest was made from other sha256s or another order, and nothing
        # recorded says which.
        raise PatchsetError(
            f"{MANIFEST_NAME}'s series digest (series_sha256 {manifest['series_sha256'][:12]}) does not match series "
            f"and its patch files ({series.sha256[:12]}), although each patch file matches its own sha256 there: a "
            f"patch file was changed together with its sha256 in {MANIFEST_NAME}, or series lists the patches in "
            "another order; restore both with git, or run 'make manifest' after an intended edit"
        )
