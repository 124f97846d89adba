"""Runtime provenance of a FlashSAC run: which uni_rl / unilab / unisim files were really imported, and from where.

Loaded at start-up of every process of a run by sitecustomize.py beside it (the overlay directory is first
on PYTHONPATH, and spawned collectors inherit PYTHONPATH). Standard library only: it runs before anything
else and must never be the reason a run breaks. A run that imports an overlay package (uni_rl, unisim) from
anywhere but this overlay is flagged on stderr at exit and in the record, never silently accepted.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.metadata as metadata
import json
import os
import sys
from pathlib import Path
from typing import Any

OVERLAY_DIR = Path(__file__).resolve().parent
WATCHED = ("uni_rl", "unilab", "unisim", "flashsac_runtime")
# the packages `make apply` builds here (scripts/patchset/targets.py: OVERLAY_DIRS); the overlay's MANIFEST.json
# names them too
OVERLAY_PACKAGES = ("uni_rl", "unisim", "flashsac_runtime")
DISTRIBUTIONS = ("unilab", "unilab-rl", "unisim-core", "torch", "mujoco")
STATE_FILE = Path(".flashsac-overlay") / "state.json"


def _load_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def checkout_root() -> Path:
    """The patched UniLab checkout: FLASHSAC_UNILAB_ROOT, else the working directory (runs start there)."""
    return Path(os.environ.get("FLASHSAC_UNILAB_ROOT", os.getcwd())).resolve()


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _origin(path: Path, checkout: Path) -> str:
    if path.is_relative_to(OVERLAY_DIR):
        return "overlay"
    if path.is_relative_to(checkout):
        return "checkout"
    if "site-packages" in path.parts or "dist-packages" in path.parts:
        return "site-packages"
    return "other"


def _expected(path: Path, origin: str, overlay: dict, state: dict, checkout: Path) -> str | None:
    """Post-patch sha256 where the project knows it: every overlay file, and the checkout's patched files."""
    if origin == "overlay":
        return overlay.get("files", {}).get(str(path.relative_to(OVERLAY_DIR)))
    if origin == "checkout":
        rec = state.get("files", {}).get("unilab", {}).get(str(path.relative_to(checkout)))
        return rec["post"] if rec else None
    return None


def collect() -> dict[str, Any]:
    """The provenance record of this process, as of now."""
    checkout = checkout_root()
    overlay = _load_json(OVERLAY_DIR / "MANIFEST.json")
    state = _load_json(checkout / STATE_FILE)
    modules = []
    for name, module in sorted(sys.modules.items()):
        if name.split(".")[0] not in WATCHED:
            continue
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        origin = _origin(path, checkout)
        digest = _sha256(path)
        expected = _expected(path, origin, overlay, state, checkout)
        modules.append({"name": name, "file": str(path), "sha256": digest, "origin": origin,
                        "expected_sha256": expected, "matches": None if expected is None else digest == expected})
    versions = {}
    for dist in DISTRIBUTIONS:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    packages = sorted({rel.split("/")[0] for rel in overlay.get("files", {})}) or list(OVERLAY_PACKAGES)
    roots = {m["name"]: m for m in modules if m["name"] in packages}
    warnings = []
    for name, root in sorted(roots.items()):
        if root["origin"] != "overlay":
            warnings.append(f"{name} was imported from {root['file']} ({root['origin']}), "
                            f"NOT from the overlay {OVERLAY_DIR}")
    mismatched = [m["name"] for m in modules if m["matches"] is False]
    if mismatched:
        warnings.append(f"imported files differ from the applied series: {', '.join(mismatched)}")
    if not overlay and roots:
        warnings.append(f"{OVERLAY_DIR / 'MANIFEST.json'} is missing: the overlay was not built by 'make apply'")
    uni_rl = roots.get("uni_rl")
    return {
        "pid": os.getpid(),
        "executable": sys.executable,
        "argv": sys.argv,
        "sys_path": list(sys.path),
        "overlay_dir": str(OVERLAY_DIR),
        "checkout": str(checkout),
        "series_sha256": overlay.get("series_sha256"),
        "flags": overlay.get("flags", {}),
        "uni_rl_origin": uni_rl["origin"] if uni_rl else None,
        "package_origins": {name: root["origin"] for name, root in roots.items()},
        "modules": modules,
        "versions": versions,
        "versions_note": (
            "unilab-rl metadata names the installed compat wheel, which the overlay's uni_rl "
            "(unilab-rl 1.3.2 + the series) shadows at import time"
        ),
        "flagged": bool(warnings),
        "warnings": warnings,
    }


def _at_exit() -> None:
    if not any(p in sys.modules for p in OVERLAY_PACKAGES) and not os.environ.get("FLASHSAC_PROVENANCE_DIR"):
        return
    record = collect()
    for warning in record["warnings"]:
        print(f"\n!!! FLASHSAC OVERLAY PROVENANCE: {warning} !!!", file=sys.stderr)
    out_dir = os.environ.get("FLASHSAC_PROVENANCE_DIR")
    if out_dir:
        path = Path(out_dir) / f"provenance-{os.getpid()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def install() -> None:
    """Register the exit hook once per process."""
    atexit.register(_at_exit)
