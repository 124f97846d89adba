"""The state a checkout carries while patched: a journal that survives kill -9, with pre-/post-image copies.

Layout inside the checkout: .flashsac-overlay/{state.json, backup/<target>/<path>, post/<target>/<path>,
.gitignore}. The directory appears whole (filled under a temporary name, then renamed), so it exists exactly
when state.json does; state.json is then only ever replaced atomically. Its 'phase' says how far a run got:
'applying' (targets may be half written: roll back), 'applied', 'reverting' (finish the revert).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import fsops
from .errors import PatchsetError
from .paths import STATE_DIRNAME

STATE_FILE = "state.json"
PHASES = ("applying", "applied", "reverting")
GITIGNORE = b"# patchset state: never commit\n*\n"


def state_dir(checkout: Path) -> Path:
    return checkout / STATE_DIRNAME


def _encode(state: dict[str, Any]) -> bytes:
    return (json.dumps(state, indent=2, sort_keys=True) + "\n").encode()


def _structure_error(state: Any) -> str | None:
    """What is structurally wrong with a parsed state.json (None: usable)."""
    if not isinstance(state, dict):
        return "not a JSON object"
    for key, kind in (("phase", str), ("series_sha256", str), ("files", dict), ("overlay", str), ("flags", dict)):
        if not isinstance(state.get(key), kind):
            return f"'{key}' is missing or not a {kind.__name__}"
    if state["phase"] not in PHASES:
        return f"unknown phase {state['phase']!r}"
    for target, files in state["files"].items():
        if not isinstance(files, dict):
            return f"'files.{target}' is not an object"
        for path, rec in files.items():
            if not (isinstance(rec, dict) and all(k in rec for k in ("pre", "post", "mode"))):
                return f"'files.{target}.{path}' lacks pre/post/mode"
    return None


def load_state(checkout: Path) -> dict[str, Any] | None:
    """The checkout's journal, validated; None when it carries none."""
    path = state_dir(checkout) / STATE_FILE
    try:
        state = json.loads(path.read_bytes())
    except FileNotFoundError:
        if state_dir(checkout).exists():
            raise PatchsetError(f"{state_dir(checkout)} has no {STATE_FILE}; restore the patched files with git "
                                "and delete that directory") from None
        return None
    except (OSError, ValueError) as exc:
        problem = f"unreadable ({exc})"
    else:
        problem = _structure_error(state)
        if problem is None:
            return state
    raise PatchsetError(f"{path} is corrupt: {problem}; restore the patched files with git and delete "
                        f"{state_dir(checkout)}")


def create_state(checkout: Path, state: dict[str, Any], images: dict[str, tuple[bytes, int]]) -> None:
    """Write the journal with its image copies (relative path -> bytes, mode) as one atomic directory."""
    files = {".gitignore": (GITIGNORE, 0o644), STATE_FILE: (_encode(state), 0o644), **images}
    tmp = fsops.fill_dir(checkout, "state", files)
    fsops.rename(tmp, state_dir(checkout))


def save_state(checkout: Path, state: dict[str, Any]) -> None:
    fsops.write_file(state_dir(checkout) / STATE_FILE, _encode(state))


def image_path(checkout: Path, kind: str, target: str, rel: str) -> Path:
    """Where the journal keeps a pre-image ('backup') or post-image ('post') of one touched file."""
    return state_dir(checkout) / kind / target / rel
