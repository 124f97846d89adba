"""apply / revert / status: the orchestration of series -> plan -> check -> apply -> state.

Apply is all or nothing: both trees are planned and checked in memory first; then a journal (state.json,
phase 'applying', with pre-image backups) is written before the first byte of a target changes, so a crash
at any point can be rolled back by the next run. Revert restores byte for byte from those backups.
"""

from __future__ import annotations

import difflib
import os
import shutil
import signal
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import TOOL_VERSION
from . import overlay as ovl
from .errors import PatchsetError
from .fetch import pinned_artifact
from .manifest import load_manifest, verify_series
from .paths import OVERLAY_DIR, PATCHES_DIR, embedded_tree
from .pins import VersionCheck, check_installed, load_pins
from .plan import FileChange, plan_target, sha256
from .series import Series, load_series
from .state import atomic_write, load_state, locked, save_state, state_dir
from .trees import (
    create_embedded_tree,
    extract_wheel_package,
    identify_checkout,
    is_writable_file,
    read_file,
    uv_python,
)

TARGET_CHECKOUT = "unilab"
TARGET_OVERLAY = "uni_rl"


@dataclass
class Options:
    """Everything a command needs to know; the CLI fills it from flags and the environment."""

    checkout: Path | None = None  # None: the embedded tree made from the pinned sdist
    overlay: Path = OVERLAY_DIR
    patches_dir: Path = PATCHES_DIR
    python: list[str] | None = None  # interpreter that runs UniLab; None: the checkout's uv env or ours
    allow_version_drift: bool = False
    allow_other_commit: bool = False
    force: bool = False
    wheel: Path | None = None
    sdist: Path | None = None


@dataclass
class Outcome:
    """What a command did, as lines for people and a dict for --json."""

    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


def _fault(step: str) -> None:
    """Fault injection for the crash tests: PATCHSET_FAULT=<step>:kill or <step>:pause=<seconds>."""
    spec = os.environ.get("PATCHSET_FAULT", "")
    name, _, action = spec.partition(":")
    if name != step:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action.startswith("pause="):
        time.sleep(float(action.split("=", 1)[1]))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def resolve_checkout(opts: Options, create: bool) -> Path:
    """The user's checkout, or the embedded tree (made from the verified sdist when create is set)."""
    if opts.checkout is not None:
        root = opts.checkout.resolve()
        if not (root / "src" / "unilab").is_dir():
            raise PatchsetError(f"{root} is not a UniLab checkout (no src/unilab)")
        return root
    tree = embedded_tree().resolve()
    if not tree.exists():
        if not create:
            raise PatchsetError(f"the embedded UniLab tree {tree} does not exist; run 'make apply' first")
        pins = load_pins()
        sdist = pinned_artifact(pins["UNILAB_SDIST"], pins["UNILAB_SDIST_SHA256"], opts.sdist)
        create_embedded_tree(sdist, tree)
    return tree


def python_command(opts: Options, checkout: Path) -> list[str]:
    return opts.python or uv_python(checkout) or [sys.executable]


def _load(opts: Options) -> tuple[dict[str, str], Series, dict[str, Any]]:
    pins = load_pins()
    series = load_series(opts.patches_dir)
    manifest = load_manifest(opts.patches_dir)
    verify_series(series, manifest)
    return pins, series, manifest


def _verify_pre_images(target: str, read: Callable[[str], bytes | None], manifest: dict[str, Any], where: Path) -> None:
    """Each touched file must be the pinned pre-image, checked before any hunk is tried."""
    for path, want in manifest["targets"][target].items():
        data = read(path)
        if sha256(data) != want["pre"]:
            hint = " (it has CRLF line endings)" if data and b"\r\n" in data else ""
            state = "is missing" if data is None else "differs from the pinned version"
            raise PatchsetError(f"{path} in {where} {state}{hint}; this is not an unmodified {target} tree")


def _verify_post_images(target: str, plan: dict[str, FileChange], manifest: dict[str, Any]) -> None:
    """The computed post-images must be the recorded ones (patches and manifest agree)."""
    expected = manifest["targets"][target]
    for path, change in plan.items():
        if path not in expected or change.post_sha256 != expected[path]["post"]:
            raise PatchsetError(f"series produced an unexpected {path}; patches and manifest disagree (make manifest?)")


def _check_clean(checkout: Path, touched: list[str]) -> None:
    dirty = identify_checkout(checkout, touched).dirty_paths
    if dirty:
        raise PatchsetError(f"{checkout} has local edits in {', '.join(dirty)}; commit or stash them first")


def _check_identity(opts: Options, pins: dict[str, str], checkout: Path, touched: list[str]) -> dict:
    ident = identify_checkout(checkout, touched)
    pinned = pins["UNILAB_COMMIT"]
    known = ident.head == pinned or ident.head_tree == pins.get("UNILAB_SDIST_TREE")
    if ident.is_git and not known and not opts.allow_other_commit:
        head = ident.head[:12] if ident.head else "no commit"
        raise PatchsetError(
            f"{checkout} is at {head}, not UniLab {pins['UNILAB_VERSION']} ({pinned[:7]}); "
            "the touched files match, so --allow-other-commit (ALLOW_OTHER_COMMIT=1) would apply anyway"
        )
    return {"is_git": ident.is_git, "head": ident.head, "head_tree": ident.head_tree, "pinned_head": known}


def _check_versions(opts: Options, pins: dict[str, str], python: list[str]) -> list[VersionCheck]:
    checks = check_installed(python, pins)
    drift = [c for c in checks if not c.ok]
    if drift and not opts.allow_version_drift:
        raise PatchsetError(
            "installed versions differ from VERSIONS.env: " + "; ".join(c.describe() for c in drift)
            + f" (in {' '.join(python)}); --allow-version-drift (ALLOW_DRIFT=1) continues and records it"
        )
    return checks


def _check_writable(checkout: Path, plan: dict[str, FileChange]) -> None:
    for path in plan:
        full = checkout / path
        if not is_writable_file(full):
            raise PatchsetError(f"{path} in {checkout} is read-only; make it writable (chmod u+w) and retry")
        parent = full.parent if full.parent.exists() else checkout
        if not os.access(parent, os.W_OK):
            raise PatchsetError(f"cannot write in {parent}")


def _file_records(plan: dict[str, FileChange], root: Path) -> dict[str, dict[str, Any]]:
    records = {}
    for path, change in sorted(plan.items()):
        full = root / path
        mode = full.stat().st_mode & 0o7777 if full.exists() else None
        records[path] = {"pre": change.pre_sha256, "post": change.post_sha256, "mode": mode}
    return records


def _save_images(checkout: Path, target: str, plan: dict[str, FileChange]) -> None:
    """Pre-images for revert and post-images for the user-edit diff, inside the state dir."""
    for kind, attr in (("backup", "pre"), ("post", "post")):
        for path, change in plan.items():
            data = getattr(change, attr)
            if data is not None:
                atomic_write(state_dir(checkout) / kind / target / path, data)


def _write_checkout(checkout: Path, plan: dict[str, FileChange], records: dict[str, dict[str, Any]]) -> None:
    for path, change in plan.items():
        full = checkout / path
        if change.post is None:
            full.unlink(missing_ok=True)
        else:
            atomic_write(full, change.post, records[path]["mode"] or 0o644)


def _restore_checkout(checkout: Path, state: dict[str, Any]) -> list[str]:
    """Put back every pre-image whose file is not already pristine; returns the restored paths."""
    restored = []
    for path, rec in state["files"][TARGET_CHECKOUT].items():
        full = checkout / path
        current = sha256(read_file(checkout, path))
        if current == rec["pre"]:
            continue
        if rec["pre"] is None:
            full.unlink(missing_ok=True)
        else:
            data = (state_dir(checkout) / "backup" / TARGET_CHECKOUT / path).read_bytes()
            if sha256(data) != rec["pre"]:
                raise PatchsetError(f"backup of {path} is corrupt; restore it with git")
            atomic_write(full, data, rec["mode"] or 0o644)
        restored.append(path)
    return restored


def _release_overlay(overlay: Path, checkout: Path) -> bool:
    """Drop this checkout from the overlay's owners; remove the built package when none remain."""
    manifest = ovl.load_overlay_manifest(overlay)
    owners = [o for o in (manifest or {}).get("owners", []) if o != str(checkout)]
    if manifest is not None and owners:
        manifest["owners"] = owners
        ovl.save_overlay_manifest(overlay, manifest)
        return False
    ovl.remove_package(overlay)
    return True


def _finish_interrupted(opts: Options, checkout: Path, state: dict[str, Any]) -> list[str]:
    """Roll an interrupted apply back (or complete an interrupted revert) to the pristine tree."""
    for path, rec in state["files"][TARGET_CHECKOUT].items():
        current = sha256(read_file(checkout, path))
        if current not in (rec["pre"], rec["post"]):
            raise PatchsetError(
                f"an interrupted {state['phase'][:-3]} left {path} in an unknown state; "
                f"restore it with git and delete {state_dir(checkout)}"
            )
    restored = _restore_checkout(checkout, state)
    if state.get("overlay_owned"):
        _release_overlay(opts.overlay, checkout)
    ovl.remove_stale_staging(opts.overlay)
    shutil.rmtree(state_dir(checkout))
    verb = "rolled back an interrupted apply" if state["phase"] == "applying" else "completed an interrupted revert"
    return [f"{verb} in {checkout}: restored {len(restored)} file(s)"]


def _flag_lines(state: dict[str, Any]) -> list[str]:
    """Every output repeats the overrides the state was made with."""
    lines = []
    flags = state.get("flags", {})
    if flags.get("allow_version_drift"):
        drift = [c for c in state.get("versions", []) if not c["ok"]]
        desc = "; ".join(f"{c['name']} expected {c['expected']}, found {c['found']}" for c in drift) or "none found"
        lines.append(f"NOTE: applied with --allow-version-drift ({desc})")
    if flags.get("allow_other_commit"):
        lines.append(f"NOTE: applied with --allow-other-commit (HEAD {state['checkout_identity'].get('head')})")
    return lines


def _already_applied(opts: Options, checkout: Path, series: Series, manifest: dict, state: dict) -> Outcome:
    """A second apply of the same series is a no-op; anything else about an applied tree is an error."""
    if state["series_sha256"] != series.sha256:
        raise PatchsetError(f"{checkout} carries a different series ({state['series_sha256'][:12]}); revert it first")
    edited = [f["path"] for f in file_statuses(opts, checkout, manifest, state) if f["status"] != "applied"]
    if edited:
        raise PatchsetError(f"already applied, but {', '.join(edited)} changed since; see 'status'")
    lines = [f"already applied to {checkout} (series {series.sha256[:12]}); nothing to do", *_flag_lines(state)]
    return Outcome(lines, {"result": "already-applied", "checkout": str(checkout), "series_sha256": series.sha256})


@dataclass
class Prepared:
    """Everything apply will write, computed and checked before the first byte changes."""

    checkout_plan: dict[str, FileChange]
    overlay_plan: dict[str, FileChange]
    staging: Path  # holds the patched uni_rl, not yet visible
    overlay_files: dict[str, str]
    existing_overlay: dict[str, Any] | None
    state: dict[str, Any]


def _prepare(opts: Options, pins: dict[str, str], series: Series, manifest: dict, checkout: Path) -> Prepared:
    """Check pins and both trees, plan both, stage the overlay; the caller owns (and must remove) staging."""
    python = python_command(opts, checkout)
    versions = _check_versions(opts, pins, python)
    touched = sorted(manifest["targets"][TARGET_CHECKOUT])
    _check_clean(checkout, touched)
    _verify_pre_images(TARGET_CHECKOUT, lambda rel: read_file(checkout, rel), manifest, checkout)
    plan_u = plan_target(series.for_target(TARGET_CHECKOUT), lambda rel: read_file(checkout, rel))
    _verify_post_images(TARGET_CHECKOUT, plan_u, manifest)
    identity = _check_identity(opts, pins, checkout, touched)
    _check_writable(checkout, plan_u)
    wheel = pinned_artifact(pins["UNILAB_RL_BASE_WHEEL"], pins["UNILAB_RL_BASE_WHEEL_SHA256"], opts.wheel)
    staging, plan_r = ovl.stage(opts.overlay, wheel, series.for_target(TARGET_OVERLAY))
    try:
        _verify_pre_images(TARGET_OVERLAY, lambda rel: read_file(staging, rel), manifest, wheel)
        _verify_post_images(TARGET_OVERLAY, plan_r, manifest)
        overlay_records = _file_records(plan_r, staging)
        ovl.write_plan(staging, plan_r)
        files = ovl.hash_tree(staging)
        existing = ovl.load_overlay_manifest(opts.overlay)
        if existing is not None and existing.get("files") != files:
            raise PatchsetError(f"{opts.overlay} holds an overlay of another series or with edits; revert its owners")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    state = {
        "tool_version": TOOL_VERSION,
        "phase": "applying",
        "time": _now(),
        "series_sha256": series.sha256,
        "patches": [{"name": p.name, "target": p.target, "sha256": p.sha256} for p in series.patches],
        "files": {TARGET_CHECKOUT: _file_records(plan_u, checkout), TARGET_OVERLAY: overlay_records},
        "checkout": str(checkout),
        "checkout_identity": identity,
        "overlay": str(opts.overlay.resolve()),
        "overlay_owned": False,
        "python": python,
        "versions": [{"name": c.name, "expected": c.expected, "found": c.found, "ok": c.ok} for c in versions],
        "flags": {"allow_version_drift": opts.allow_version_drift, "allow_other_commit": opts.allow_other_commit},
        "wheel_sha256": pins["UNILAB_RL_BASE_WHEEL_SHA256"],
    }
    return Prepared(plan_u, plan_r, staging, files, existing, state)


def _commit(opts: Options, checkout: Path, prep: Prepared) -> None:
    """Journal first, then checkout files, then the overlay; each step is recoverable after a kill -9."""
    state = prep.state
    save_state(checkout, state)
    _save_images(checkout, TARGET_CHECKOUT, prep.checkout_plan)
    _save_images(checkout, TARGET_OVERLAY, prep.overlay_plan)
    _fault("journal")
    _write_checkout(checkout, prep.checkout_plan, state["files"][TARGET_CHECKOUT])
    _fault("checkout")
    state["overlay_owned"] = True
    save_state(checkout, state)
    if prep.existing_overlay is None:
        ovl.install(opts.overlay, prep.staging)
    owners = sorted({*(prep.existing_overlay or {}).get("owners", []), str(checkout)})
    ovl.save_overlay_manifest(opts.overlay, {
        "series_sha256": state["series_sha256"], "base_wheel_sha256": state["wheel_sha256"],
        "files": prep.overlay_files, "patched": state["files"][TARGET_OVERLAY], "owners": owners,
        "flags": state["flags"], "versions": state["versions"], "time": state["time"],
    })
    _fault("overlay")
    state["phase"] = "applied"
    save_state(checkout, state)


def apply(opts: Options) -> Outcome:
    pins, series, manifest = _load(opts)
    checkout = resolve_checkout(opts, create=True)
    out = Outcome()
    with locked(checkout, "the checkout"), locked(opts.overlay, "the overlay"):
        state = load_state(checkout)
        if state and state["phase"] != "applied":
            out.lines += _finish_interrupted(opts, checkout, state)
            state = None
        if state:
            return _already_applied(opts, checkout, series, manifest, state)
        prep = _prepare(opts, pins, series, manifest, checkout)
        try:
            _commit(opts, checkout, prep)
        except BaseException:
            journal = load_state(checkout)
            if journal is not None:
                _finish_interrupted(opts, checkout, journal)
            raise
        finally:
            shutil.rmtree(prep.staging, ignore_errors=True)
    out.lines += [
        f"applied {len(series.patches)} patch(es) (series {series.sha256[:12]}) to {checkout}",
        f"overlay: {opts.overlay.resolve()} (put it first on PYTHONPATH)",
        *_flag_lines(prep.state),
    ]
    out.data = {"result": "applied", "checkout": str(checkout), "series_sha256": series.sha256,
                "flags": prep.state["flags"]}
    return out


def file_statuses(opts: Options, checkout: Path, manifest: dict[str, Any] | None, state: dict | None) -> list[dict]:
    """Per touched file: applied (post-image), not applied (pre-image), edited (after apply) or drifted.

    An applied checkout is judged by its own state (what was really written, even if the project's series has
    moved on since); an unapplied one by the manifest of the current series.
    """
    applied = state is not None and state["phase"] == "applied"
    expected = state["files"] if state is not None else manifest["targets"]
    rows = []
    for target, files in expected.items():
        root = checkout if target == TARGET_CHECKOUT else opts.overlay
        for path, want in sorted(files.items()):
            if target == TARGET_OVERLAY and not ovl.package_dir(opts.overlay).exists():
                current = want["pre"]  # no overlay built: the wheel's pristine file is what imports would see
            else:
                current = sha256(read_file(root, path))
            if current == want["post"]:
                status = "applied"
            elif current == want["pre"]:
                status = "not applied"
            else:
                status = "edited" if applied else "drifted"
            rows.append({"target": target, "path": path, "status": status, "sha256": current})
    return rows


def status(opts: Options) -> Outcome:
    _, series, manifest = _load(opts)
    checkout = resolve_checkout(opts, create=False)
    state = load_state(checkout)
    files = file_statuses(opts, checkout, manifest, state)
    current_series = state is None or state["series_sha256"] == series.sha256
    by_file = {(f["target"], f["path"]): f["status"] for f in files}
    patches = []
    for patch in series.patches if current_series else []:
        states = {by_file[(patch.target, p)] for p in patch.files()}
        worst = next((s for s in ("edited", "drifted") if s in states), None)
        patches.append({"name": patch.name, "target": patch.target,
                        "status": worst or (states.pop() if len(states) == 1 else "partially applied")})
    phase = state["phase"] if state else "not applied"
    applied_series = state["series_sha256"] if state else series.sha256
    out = Outcome(data={
        "checkout": str(checkout), "overlay": str(opts.overlay.resolve()), "phase": phase,
        "series_sha256": applied_series, "project_series_sha256": series.sha256, "state": state,
        "patches": patches, "files": files,
    })
    if state and phase != "applied":
        out.lines.append(f"INTERRUPTED {phase} in {checkout}: the next 'apply' or 'revert' rolls it back")
    out.lines.append(f"{checkout}: {phase} (series {applied_series[:12]})")
    if not current_series:
        out.lines.append(f"OUTDATED: this project's series is now {series.sha256[:12]}; 'revert' then 'apply' to update")
    out.lines += [f"  patch {p['name']:<60} {p['status']}" for p in patches]
    out.lines += [f"  file  {f['target']}:{f['path']:<55} {f['status']}" for f in files]
    if state:
        out.lines += _flag_lines(state)
    return out


def revert(opts: Options) -> Outcome:
    """Restore from the checkout's own state: needs neither the series nor the manifest of this project."""
    checkout = resolve_checkout(opts, create=False)
    out = Outcome()
    with locked(checkout, "the checkout"), locked(opts.overlay, "the overlay"):
        state = load_state(checkout)
        if state is None:
            raise PatchsetError(f"nothing to revert: {checkout} carries no patchset state")
        if state["phase"] == "applying":
            out.lines += _finish_interrupted(opts, checkout, state)
            out.data = {"result": "rolled-back", "checkout": str(checkout)}
            return out
        edited = [f for f in file_statuses(opts, checkout, None, state) if f["status"] not in ("applied", "not applied")]
        if edited and not opts.force:
            names = ", ".join(f"{f['target']}:{f['path']}" for f in edited)
            raise PatchsetError(f"refusing to revert: edited after apply: {names}; --force (FORCE=1) saves them as a diff first")
        saved = _save_user_edits(opts, checkout, edited) if edited else None
        state["phase"] = "reverting"
        save_state(checkout, state)
        restored = _restore_checkout(checkout, state)
        removed = _release_overlay(opts.overlay, checkout)
        shutil.rmtree(state_dir(checkout))
    out.lines += _flag_lines(state)
    out.lines.append(f"reverted {checkout}: restored {len(restored)} file(s)"
                     + ("; overlay removed" if removed else "; overlay kept for its other checkouts"))
    if saved:
        out.lines.append(f"your edits were saved to {saved}")
    out.data = {"result": "reverted", "checkout": str(checkout), "restored": restored, "user_edits": str(saved) if saved else None}
    return out


def _save_user_edits(opts: Options, checkout: Path, edited: list[dict]) -> Path:
    """A unified diff from the patched file to the user's version, beside the state dir, before restoring."""
    chunks: list[str] = []
    for f in edited:
        root = checkout if f["target"] == TARGET_CHECKOUT else opts.overlay
        post_file = state_dir(checkout) / "post" / f["target"] / f["path"]
        before = post_file.read_text(encoding="utf-8", errors="replace") if post_file.exists() else ""
        after = (root / f["path"]).read_text(encoding="utf-8", errors="replace") if (root / f["path"]).exists() else ""
        chunks += difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                       f"a/{f['path']}", f"b/{f['path']}")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dest = checkout / f"{state_dir(checkout).name}-user-edits-{stamp}.diff"
    dest.write_text("".join(chunks), encoding="utf-8")
    return dest


def plan_pristine(opts: Options) -> tuple[Series, dict[str, dict[str, FileChange]]]:
    """Plan the series over the pristine pinned trees (sdist, wheel); used to (re)write the manifest."""
    pins = load_pins()
    series = load_series(opts.patches_dir)
    sdist = pinned_artifact(pins["UNILAB_SDIST"], pins["UNILAB_SDIST_SHA256"], opts.sdist)
    wheel = pinned_artifact(pins["UNILAB_RL_BASE_WHEEL"], pins["UNILAB_RL_BASE_WHEEL_SHA256"], opts.wheel)
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if m.isfile() and "/" in m.name}
        def read_sdist(rel: str) -> bytes | None:
            member = members.get(rel)
            return tar.extractfile(member).read() if member else None
        plan_u = plan_target(series.for_target(TARGET_CHECKOUT), read_sdist)
    with tempfile.TemporaryDirectory() as tmp:
        extract_wheel_package(wheel, ovl.PACKAGE, Path(tmp))
        plan_r = plan_target(series.for_target(TARGET_OVERLAY), lambda rel: read_file(Path(tmp), rel))
    return series, {TARGET_CHECKOUT: plan_u, TARGET_OVERLAY: plan_r}
