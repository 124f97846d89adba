"""Exact tree comparison for the fault tests: every entry (hidden ones included), its kind, mode and bytes.

Kept apart from the tests so that the negative controls can show these checks catch a stray temporary, a
changed mode or a changed byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

STATE = ".flashsac-overlay/state.json"
OVERLAY_MANIFEST = "MANIFEST.json"
JSON_FILES = (STATE, OVERLAY_MANIFEST)  # carry absolute paths and times: compared after parsing


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> kind, mode and sha256 (or link target) of every entry under root except .git/."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and ".git" in dirnames:
            dirnames.remove(".git")
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel, st = str(path.relative_to(root)), os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = f"link -> {os.readlink(path)}"
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = f"dir {oct(st.st_mode & 0o7777)}"
            elif rel in JSON_FILES:
                out[rel] = f"json {oct(st.st_mode & 0o7777)}"
            else:
                out[rel] = f"file {oct(st.st_mode & 0o7777)} {hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"
    return out


def differences(got: dict[str, str], want: dict[str, str], where: str) -> list[str]:
    """Entries that are extra, missing or different, as short lines."""
    return [f"{where}/{key}: {got.get(key, 'missing')} (want {want.get(key, 'absent')})"
            for key in sorted(set(got) | set(want)) if got.get(key) != want.get(key)][:6]


def json_problems(checkout: Path, overlay: Path) -> list[str]:
    """The applied state and overlay manifest name this checkout and overlay and agree with each other."""
    state = json.loads((checkout / STATE).read_text())
    manifest = json.loads((overlay / OVERLAY_MANIFEST).read_text())
    problems = []
    if state["phase"] != "applied" or state["checkout"] != str(checkout) or state["overlay"] != str(overlay):
        problems.append(f"state.json: phase {state['phase']}, checkout {state['checkout']}, overlay {state['overlay']}")
    if manifest["owners"] != [str(checkout)] or manifest["files"] != state["overlay_files"]:
        problems.append(f"overlay MANIFEST.json: owners {manifest['owners']}, files differ from the state's")
    return problems


def output_problems(proc: subprocess.CompletedProcess, codes: set[int], needle: str = "") -> list[str]:
    """Exit status among codes; a failure is exactly one stderr line (holding needle); never a traceback."""
    problems = []
    err = proc.stderr.strip().splitlines()
    if proc.returncode not in codes:
        problems.append(f"exit {proc.returncode}, want {sorted(codes)}: {proc.stderr.strip()[-300:]}")
    if "Traceback" in proc.stderr or "Traceback" in proc.stdout:
        problems.append(f"traceback: {proc.stderr.strip()[-300:]}")
    if proc.returncode > 0 and (len(err) != 1 or needle not in err[0]):
        problems.append(f"want one stderr line with {needle!r}, got {err}")
    if proc.returncode == 0 and err:
        problems.append(f"stderr on success: {err}")
    return problems
