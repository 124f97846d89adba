"""The applier's public API: what code outside scripts/patchset/ (experiments/, scripts/offline/) may use.

Everything else in this package is internal. The pins and paths here are the project's single source:
``VERSIONS.env`` through ``load_pins``, the embedded tree and the overlay through ``paths``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import PatchsetError
from .fetch import file_sha256, pinned_artifact
from .paths import OVERLAY_DIR, PROJECT_ROOT, VERSIONS_FILE, cache_dir, embedded_tree
from .pins import GPU_PHYSICS_PINS, INSTALLED_PINS, load_pins, versions_match
from .targets import PINNED_ARTIFACTS

__all__ = [
    "GPU_PHYSICS_PINS", "INSTALLED_PINS", "OVERLAY_DIR", "PINNED_ARTIFACTS", "PROJECT_ROOT", "VERSIONS_FILE",
    "PatchsetError", "cache_dir", "embedded_tree",
    "extract_wheel_package", "file_sha256", "load_pins", "pinned_artifact", "series_files", "status",
    "versions_match",
]


def extract_wheel_package(wheel: Path, package: str, dest: Path) -> None:
    """Copy one top-level package out of a verified wheel, keeping file modes, into ``dest/<package>``."""
    from .trees import extract_wheel_package as extract  # GitPython: only for callers that extract

    extract(wheel, package, dest)


def status(checkout: Path | None = None, overlay: Path | None = None) -> dict[str, Any]:
    """What ``python -m patchset status --json`` prints for this checkout, as a JSON-like dict.

    Raises PatchsetError (or OSError) with the applier's one-line message when it cannot answer.
    """
    from . import applier  # the applier proper: imported only by callers that ask for a status

    opts = applier.Options(checkout=checkout, overlay=overlay.resolve() if overlay else None)
    return json.loads(json.dumps(applier.status(opts).data, default=str))


def series_files(target: str, rels: Sequence[str]) -> tuple[dict[str, tuple[bytes | None, bytes | None]],
                                                             list[tuple[str, dict[str, str], list[str]]]]:
    """Files of a target as the pinned tree has them and as the committed series leaves them, planned in memory
    (no checkout touched), and every patch of the series with its DEP-3 header and the lines it adds to any file.

    For documents generated from the series itself (docs/configuration.md): ``{rel: (pre-image, post-image)}`` and,
    per patch in series order, ``(name, header, added lines)``.
    """
    from .plan import plan_target
    from .scratch import pristine_trees
    from .series import load_series

    series = load_series(PROJECT_ROOT / "patches")
    files = pristine_trees()[target]
    plan = plan_target(series.for_target(target), lambda path: files[path][0] if path in files else None)
    images = {}
    for rel in rels:
        pre = files[rel][0] if rel in files else None
        images[rel] = (pre, plan[rel].post if rel in plan else pre)
    patches = [(p.name, dict(p.header), [line.value.rstrip("\n") for f in p.diff for h in f for line in h
                                         if line.is_added]) for p in series.patches]
    return images, patches


def own_package_files() -> dict[str, bytes]:
    """The project's own packages as an apply places them into the overlay (overlay-relative path -> bytes)."""
    from .overlay import own_files

    return {rel: data for rel, (data, _) in own_files().items()}
