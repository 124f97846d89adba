"""Bringing a checkout back to pristine from its journal: an interrupted apply rolled back, a revert finished.

Both end the same way: touched files restored byte for byte from the backups, the overlay as the journal says
it was (an interrupted apply) or released (a revert), directories the apply created removed, the state directory
discarded last. Every step is idempotent, so a kill during recovery is recovered by the next run. Only what the
run created is removed: the journal records what existed before.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from . import fsops
from . import overlay as ovl
from .errors import PatchsetError
from .plan import sha256
from .state import image_path, state_dir
from .targets import CHECKOUT_TARGET as TARGET_CHECKOUT
from .targets import OVERLAY_DIRS
from .trees import file_marker, marker_note


def sweep_dirs(checkout: Path, state: dict[str, Any] | None, manifest: dict[str, Any] | None,
               overlays: set[Path]) -> list[Path]:
    """Every directory a run may leave temporaries in: beside the state, each touched file, the overlays."""
    paths = set((state or {}).get("files", {}).get(TARGET_CHECKOUT, {}))
    paths |= set((manifest or {}).get("targets", {}).get(TARGET_CHECKOUT, {}))
    return sorted({checkout, state_dir(checkout), *overlays, *((checkout / p).parent for p in paths)})


def expected_overlay(state: dict[str, Any]) -> dict[str, str | None]:
    """What the overlay's packages must hold for recovery to remove them: the files the apply built, with the
    edits a forced revert saved in their place (overlay-relative path -> marker; None: deleted)."""
    saved = (state.get("user_edits") or {}).get("markers", {})
    edits = {key.split(":", 1)[1]: marker for key, marker in saved.items() if key.split(":", 1)[0] in OVERLAY_DIRS}
    return {**state["overlay_files"], **edits}


def overlay_edits(state: dict[str, Any]) -> list[dict[str, Any]]:
    """A status row (target, path, status, sha256, detail) per overlay file that recovery would delete although it
    is not as the apply built it, nor as a forced revert saved it: changed, added or deleted since. A rollback
    leaves packages that were there before the apply alone, so it finds none in them."""
    if state["phase"] == "applying" and state["overlay_before"]["package"]:
        return []
    built = state["overlay_files"]
    return [{"target": rel.split("/")[0], "path": rel, "status": "edited", "sha256": marker,
             "detail": " (added)" if rel not in built else marker_note(marker)}
            for rel, marker in ovl.changes(Path(state["overlay"]), expected_overlay(state)).items()]


def _check_overlay(state: dict[str, Any]) -> None:
    """Refuse before anything changes when the overlay holds edits that recovery would delete unsaved."""
    edits = overlay_edits(state)
    if edits:
        names = ", ".join(f"{f['target']}:{f['path']}{f['detail']}" for f in edits)
        raise PatchsetError(f"the overlay {state['overlay']} was edited since it was built: {names}; 'revert' with "
                            "--force (FORCE=1) saves them (byte for byte) first")


def _check_files(checkout: Path, state: dict[str, Any]) -> None:
    """Each touched file must be what the journal allows: pre- or post-image, or the edits a FORCE run saved."""
    saved = (state.get("user_edits") or {}).get("markers", {})
    verb = "apply" if state["phase"] == "applying" else "revert"
    for path, rec in state["files"][TARGET_CHECKOUT].items():
        current = file_marker(checkout, path)
        allowed = {rec["pre"], rec["post"]}
        if f"{TARGET_CHECKOUT}:{path}" in saved:
            allowed.add(saved[f"{TARGET_CHECKOUT}:{path}"])
        if current not in allowed:
            raise PatchsetError(f"an interrupted {verb} left {path} changed since; restore it with git and delete "
                                f"{state_dir(checkout)}")


def _pristine_file(checkout: Path, path: str, rec: dict[str, Any], notes: list[str]) -> Path:
    """The journal's file to put back at path: its link to the very file the apply replaced, where the file had
    other hard links and still holds the pre-image (a note says so where its bytes were changed through another of
    its names since), else its backup copy, checked."""
    link = image_path(checkout, "link", TARGET_CHECKOUT, path)
    if link.is_file() and not link.is_symlink():
        if sha256(link.read_bytes()) == rec["pre"]:
            return link
        notes.append(f"NOTE: {path} had other hard links, and its bytes were changed through them since apply: "
                     "restored as a file of its own (its other names keep theirs)")
    backup = image_path(checkout, "backup", TARGET_CHECKOUT, path)
    if backup.is_symlink() or not backup.is_file() or sha256(backup.read_bytes()) != rec["pre"]:
        raise PatchsetError(f"backup of {path} is corrupt; restore it with git and delete {state_dir(checkout)}")
    return backup


def _restore_checkout(checkout: Path, state: dict[str, Any], notes: list[str]) -> list[str]:
    """Put back every pre-image whose file is not already pristine; a mode the user set on the file is kept.

    The journal's own file is renamed into place (the very file, linked again, where it had other hard links; else
    the backup copy), so that a restore needs no new space on the disk: a disk that filled up during the apply
    cannot stop its rollback. A journal on another filesystem than the file (a mount inside the checkout) has its
    copy written instead."""
    restored = []
    for path, rec in state["files"][TARGET_CHECKOUT].items():
        live = checkout / path
        if file_marker(checkout, path) == rec["pre"]:
            continue
        if rec["pre"] is None:
            fsops.unlink(live)
            restored.append(path)
            continue
        source = _pristine_file(checkout, path, rec, notes)
        if live.is_file() and not live.is_symlink():
            mode = live.stat().st_mode & 0o7777
        elif source == image_path(checkout, "link", TARGET_CHECKOUT, path):
            mode = source.stat().st_mode & 0o7777  # the very file, as it was
        else:
            mode = rec["mode"] or 0o644
        if source.stat().st_mode & 0o7777 != mode:
            fsops.chmod(source, mode)
        try:
            fsops.move_file(source, live)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            fsops.write_file(live, source.read_bytes(), mode)
        restored.append(path)
    return restored


def _remove_created_dirs(checkout: Path, state: dict[str, Any], overlay_too: bool) -> None:
    """Remove, deepest first, the directories the apply created in the checkout (and, with overlay_too, for the
    overlay), each only while it is still empty: anything put there since is not ours to delete."""
    dirs = [checkout / rel for rel in state["created_dirs"]]
    if overlay_too:
        dirs += [Path(d) for d in state.get("overlay_created_dirs", [])]
    for path in sorted(dirs, reverse=True):
        if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
            fsops.rmdir(path)


def _ready(state: dict[str, Any]) -> Path | None:
    """The overlay manifest's bytes the run put aside before its first change (a shared overlay), if any."""
    ready = state.get("overlay_manifest_ready")
    return Path(ready) if ready else None


def _drop_ready(state: dict[str, Any]) -> None:
    """Remove the put-aside manifest where the step did not need it."""
    ready = _ready(state)
    if ready is not None and (ready.is_file() or ready.is_symlink()):
        fsops.unlink(ready)


def roll_back_apply(checkout: Path, state: dict[str, Any], notes: list[str] | None = None) -> list[str]:
    """Undo an apply that did not finish; returns the restored paths (notes: gets the lines to add, if any)."""
    _check_files(checkout, state)
    _check_overlay(state)
    restored = _restore_checkout(checkout, state, notes if notes is not None else [])
    ovl.restore(Path(state["overlay"]), state["overlay_before"], expected_overlay(state), _ready(state))
    _drop_ready(state)
    _remove_created_dirs(checkout, state, overlay_too=True)
    fsops.discard(state_dir(checkout))
    return restored


def finish_revert(checkout: Path, state: dict[str, Any], notes: list[str] | None = None) -> tuple[list[str], bool]:
    """Complete a revert (phase 'reverting'); returns the restored paths and whether the overlay was removed
    (notes: gets the lines to add, if any)."""
    _check_files(checkout, state)
    _check_overlay(state)
    restored = _restore_checkout(checkout, state, notes if notes is not None else [])
    removed = ovl.release(Path(state["overlay"]), checkout, expected_overlay(state), _ready(state))
    _drop_ready(state)
    _remove_created_dirs(checkout, state, overlay_too=removed)
    fsops.discard(state_dir(checkout))
    return restored, removed


def finish_interrupted(checkout: Path, state: dict[str, Any], notes: list[str] | None = None) -> str:
    """Recover a run that was killed: roll an apply back, complete a revert. Returns the line to print (notes: gets
    the lines to add, if any)."""
    if state["phase"] == "applying":
        restored = roll_back_apply(checkout, state, notes)
        return f"rolled back an interrupted apply in {checkout}: restored {len(restored)} file(s)"
    restored, _ = finish_revert(checkout, state, notes)
    return f"completed an interrupted revert in {checkout}: restored {len(restored)} file(s)"
