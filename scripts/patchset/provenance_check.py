"""`patchset provenance`: import every overlay package (uni_rl, unisim, flashsac_runtime) in the UniLab interpreter with the overlay
first, including each patched module, and judge the record."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from .applier import Options, Outcome, overlay_for, python_command, resolve_checkout
from .errors import PatchsetError
from .state import load_state
from .targets import OVERLAY_DIRS, OVERLAY_TARGETS


def _imports(state: dict | None) -> str:
    """Import each overlay package and every module the applied series patched in it, then print the pid (imports
    may start helper processes with records of their own; the verdict is on this one)."""
    modules = set(OVERLAY_DIRS)
    for package in OVERLAY_TARGETS:
        for rel in (state or {}).get("files", {}).get(package, {}):
            if rel.endswith(".py"):
                modules.add(rel[:-3].removesuffix("/__init__").replace("/", "."))
    return f"import os, {', '.join(sorted(modules))}; print(os.getpid())"


def run_provenance(opts: Options) -> Outcome:
    """Fail unless every imported overlay-package file comes from the overlay and matches its post-patch hash."""
    checkout = resolve_checkout(opts, create=False)
    python = python_command(opts, checkout)
    state = load_state(checkout)
    overlay = overlay_for(opts, checkout, state)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(overlay), str(checkout / "src")]),
               "FLASHSAC_PROVENANCE_DIR": tmp, "FLASHSAC_UNILAB_ROOT": str(checkout)}
        proc = subprocess.run([*python, "-c", _imports(state)], env=env, cwd=checkout, capture_output=True, text=True, check=False)
        pid = (proc.stdout.strip().splitlines() or [""])[-1]
        record_file = Path(tmp) / f"provenance-{pid}.json"
        record = json.loads(record_file.read_text()) if proc.returncode == 0 and record_file.is_file() else None
    if record is None:
        last = (proc.stderr.strip().splitlines() or ["no provenance record written"])[-1]
        raise PatchsetError(f"importing {', '.join(OVERLAY_DIRS)} with the overlay failed: {last}")
    ours = {p: [m for m in record["modules"] if m["name"].split(".")[0] == p] for p in OVERLAY_DIRS}
    bad = [m["name"] for mods in ours.values() for m in mods if m["origin"] != "overlay" or m["matches"] is not True]
    bad += [f"{p} (not imported)" for p, mods in ours.items() if not mods]
    if record["flagged"] or bad:
        raise PatchsetError("; ".join(record["warnings"]) or f"modules not from the overlay: {', '.join(bad)}")
    lines = [f"{p}: {len(mods)} module(s) imported from {record['overlay_dir']}, all match the applied series"
             for p, mods in ours.items()]
    lines += [f"interpreter: {record['executable']}", f"versions: {record['versions']} ({record['versions_note']})"]
    return Outcome(lines, record)
