"""The fully applied trees of (a prefix of) the series, planned in memory over the pristine pinned trees.

Shared by the sameness record of an earlier series (tests/data/series-*.json, written by `python
tests/series_images.py record`) and the test that checks the current series against it: one digest per target
over every file of that target's tree with the patches applied (path, sha256 and mode of each), plus the
post-image sha256 of each touched file.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "scripts"))

from patchset.plan import plan_target  # noqa: E402
from patchset.scratch import Files, pristine_trees  # noqa: E402
from patchset.series import Patch, load_series  # noqa: E402
from patchset.targets import TARGETS  # noqa: E402


def applied_files(patches: list[Patch], trees: dict[str, Files]) -> dict[str, tuple[Files, dict[str, str]]]:
    """target -> (every file of the applied tree, {touched path: post sha256}), planned exactly in memory."""
    out = {}
    for target in TARGETS:
        files = dict(trees[target])
        plan = plan_target([p for p in patches if p.target == target],
                           lambda rel, files=files: files[rel][0] if rel in files else None)
        for rel, change in plan.items():
            if change.post is None:
                files.pop(rel, None)
            else:
                files[rel] = (change.post, files[rel][1] if rel in files else 0o644)
        out[target] = (files, {rel: c.post_sha256 for rel, c in sorted(plan.items())})
    return out


def write_tree(root: Path, files: Files) -> None:
    """Write files planned in memory (relative path -> bytes, mode) under root, e.g. an overlay built by
    ``patchset.overlay.build``."""
    for rel, (data, _) in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def tree_digest(files: Files) -> str:
    """One digest over a whole tree: each file's path, executable bits and sha256."""
    digest = hashlib.sha256()
    for rel, (data, mode) in sorted(files.items()):
        digest.update(f"{rel}\0{mode & 0o111:o}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    return digest.hexdigest()


def applied_trees(patches: list[Patch], trees: dict[str, Files]) -> dict[str, dict[str, Any]]:
    """target -> {"tree_sha256": digest of the whole applied tree, "post": {touched path: post sha256}}."""
    return {target: {"tree_sha256": tree_digest(files), "post": post}
            for target, (files, post) in applied_files(patches, trees).items()}


def record(patches_dir: Path) -> dict[str, Any]:
    """The record of a whole series: its digest, its patches and its fully applied trees."""
    series = load_series(patches_dir)
    return {"series_sha256": series.sha256, "patches": [p.name for p in series.patches],
            "applied": applied_trees(series.patches, pristine_trees())}


if __name__ == "__main__" and sys.argv[1:2] == ["record"]:
    print(json.dumps(record(PROJECT / "patches"), indent=2, sort_keys=True))
