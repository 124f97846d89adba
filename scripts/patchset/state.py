"""The state a checkout carries while patched: a journal that survives kill -9, with pre-/post-image copies.

Layout inside the checkout: .flashsac-overlay/{state.json, backup/<target>/<path>, post/<target>/<path>,
link/<target>/<path>, .gitignore}; link/ holds, for a touched file that had other hard links, one more link to
that very file (no copy of its bytes), so that the revert can put the file itself back where the apply replaced
it. The directory appears whole (filled under a temporary name, then renamed), so it exists exactly
when state.json does; state.json is then only ever replaced atomically. Its 'phase' says how far a run got:
'applying' (targets may be half written: roll back), 'applied', 'reverting' (finish the revert).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from . import fsops
from .errors import PatchsetError
from .paths import STATE_DIRNAME
from .targets import CHECKOUT_TARGET as TARGET_CHECKOUT
from .targets import TARGETS

STATE_FILE = "state.json"
PHASES = ("applying", "applied", "reverting")
GITIGNORE = b"# patchset state: never commit\n*\n"


def state_dir(checkout: Path) -> Path:
    return checkout / STATE_DIRNAME


def _encode(state: dict[str, Any]) -> bytes:
    return (json.dumps(state, indent=2, sort_keys=True) + "\n").encode()


def _is_str_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _is_mode(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _is_inside(value: Any) -> bool:
    """A relative path that stays inside the tree it is joined to."""
    return isinstance(value, str) and not PurePosixPath(value).is_absolute() and ".." not in PurePosixPath(value).parts


def _is_absolute(value: Any) -> bool:
    return isinstance(value, str) and PurePosixPath(value).is_absolute()


def _is_list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A check of a list whose every item passes check."""
    return lambda value: isinstance(value, list) and all(check(item) for item in value)


#: Every key a later step (status, the flag notes, rollback, revert) reads, with what it must be. Checked when the
#: state is loaded, so a damaged one is refused before anything changes rather than failing half way.
_REQUIRED: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("phase", lambda v: v in PHASES, f"one of {', '.join(PHASES)}"),
    ("series_sha256", lambda v: isinstance(v, str), "a string"),
    ("overlay", _is_absolute, "an absolute path"),
    ("flags", lambda v: isinstance(v, dict), "an object"),
    ("checkout_identity", lambda v: isinstance(v, dict) and _is_str_or_none(v.get("head")),
     "an object whose 'head' is a string or null"),
    ("overlay_files", lambda v: isinstance(v, dict) and all(isinstance(h, str) for h in v.values()),
     "an object of sha256 strings"),
    ("overlay_before", lambda v: isinstance(v, dict) and isinstance(v.get("package"), bool)
     and (v.get("manifest") is None or isinstance(v.get("manifest"), dict)),
     "an object with 'package' true or false and 'manifest' an object or null"),
    ("versions", _is_list_of(lambda c: isinstance(c, dict) and {"name", "expected", "found", "ok"} <= set(c)),
     "a list of objects with name, expected, found, ok"),
    ("created_dirs", _is_list_of(_is_inside), "a list of paths inside the checkout"),
)
#: Keys a state may lack (written by an older patchset, or only once a revert saved edits), checked when present.
_OPTIONAL: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("overlay_created_dirs", _is_list_of(_is_absolute), "a list of absolute paths"),
    ("overlay_manifest_ready", lambda v: v is None or _is_absolute(v), "an absolute path or null"),
    ("user_edits", lambda v: isinstance(v, dict) and isinstance(v.get("dir"), str)
     and isinstance(v.get("markers"), dict), "an object with 'dir' and 'markers'"),
)


def _file_record_error(target: str, path: Any, rec: Any) -> str | None:
    """What is wrong with one touched file's record (None: usable)."""
    where = f"files.{target}.{path}"
    if not _is_inside(path):
        return f"'{where}' is not a path inside its tree"
    if not (isinstance(rec, dict) and all(k in rec for k in ("pre", "post", "mode"))):
        return f"'{where}' lacks pre/post/mode"
    if not (_is_str_or_none(rec["pre"]) and _is_str_or_none(rec["post"])):
        return f"'{where}.pre' or '{where}.post' is not a sha256 string or null"
    if not _is_mode(rec["mode"]):
        return f"'{where}.mode' is not an integer or null"
    return None


def _files_error(files: Any) -> str | None:
    """What is wrong with 'files' (None: usable): recovery reads the checkout target's records, status all of them."""
    if not isinstance(files, dict) or TARGET_CHECKOUT not in files or not set(files) <= set(TARGETS):
        return f"'files' is missing or not an object of the targets {', '.join(TARGETS)}"
    for target, records in files.items():
        if not isinstance(records, dict):
            return f"'files.{target}' is not an object"
        problem = next(filter(None, (_file_record_error(target, p, r) for p, r in records.items())), None)
        if problem:
            return problem
    return None


def _structure_error(state: Any) -> str | None:
    """What is wrong with a parsed state.json (None: usable): the first key, by name, that is not as written."""
    if not isinstance(state, dict):
        return "not a JSON object"
    for key, check, kind in _REQUIRED:
        if key not in state or not check(state[key]):
            return f"'{key}' is missing or not {kind}"
    for key, check, kind in _OPTIONAL:
        if key in state and not check(state[key]):
            return f"'{key}' is not {kind}"
    return _files_error(state["files"])


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


def create_state(checkout: Path, state: dict[str, Any], images: dict[str, tuple[bytes, int]],
                 hard_links: dict[str, Path] | None = None) -> None:
    """Write the journal with its image copies (relative path -> bytes, mode) and its hard links to hard-linked
    touched files (relative path -> the file) as one atomic directory."""
    files = {".gitignore": (GITIGNORE, 0o644), STATE_FILE: (_encode(state), 0o644), **images}
    tmp = fsops.fill_dir(checkout, "state", files, hard_links=hard_links)
    fsops.rename(tmp, state_dir(checkout))


def save_state(checkout: Path, state: dict[str, Any]) -> None:
    fsops.write_file(state_dir(checkout) / STATE_FILE, _encode(state))


def image_path(checkout: Path, kind: str, target: str, rel: str) -> Path:
    """Where the journal keeps a pre-image ('backup'), a post-image ('post') or a hard link to the file itself
    ('link') of one touched file."""
    return state_dir(checkout) / kind / target / rel
