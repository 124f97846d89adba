"""apply / revert / status: the orchestration of series -> plan -> check -> apply -> state.

Apply is all or nothing: every target (targets.py) is planned and checked in memory first; then the journal (the state
directory, phase 'applying', with pre-image backups) appears atomically before the first byte of a target
changes, so a crash at any point is rolled back by the next run (recovery.py), and an error or SIGINT/SIGTERM
is rolled back at once. Revert restores byte for byte from those backups. Every mutation goes through fsops.
"""

from __future__ import annotations

import sys
import tarfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import TOOL_VERSION, checks, fsops, recovery, signals, useredits
from . import overlay as ovl
from .errors import Interrupted, PatchsetError, os_error_message, with_note
from .fetch import pinned_artifact
from .locks import DirLocks
from .manifest import load_manifest, verify_series
from .paths import OVERLAY_DIR, PATCHES_DIR, embedded_tree
from .pins import load_pins
from .plan import FileChange, plan_target
from .series import Series, load_series
from .state import create_state, image_path, load_state, save_state
from .targets import CHECKOUT_TARGET as TARGET_CHECKOUT
from .targets import OVERLAY_DIRS, OVERLAY_PACKAGES, OVERLAY_TARGETS, OWN_PACKAGES
from .trees import create_embedded_tree, file_marker, marker_note, package_files, read_file, uv_python


@dataclass
class Options:
    """Everything a command needs to know; the CLI fills it from flags and the environment."""

    checkout: Path | None = None  # None: the embedded tree made from the pinned sdist
    overlay: Path | None = None  # None: the one the checkout's state names, else overlay/ of this project
    patches_dir: Path = PATCHES_DIR
    python: list[str] | None = None  # interpreter that runs UniLab; None: the checkout's uv env or ours
    allow_version_drift: bool = False
    allow_other_commit: bool = False
    force: bool = False
    wheel: Path | None = None  # the pinned unilab-rl base wheel (else cache/download)
    sdist: Path | None = None  # the pinned unilab sdist
    unisim_sdist: Path | None = None  # the pinned unisim-core sdist

    def artifact(self, package: str) -> Path | None:
        """The file the user gave for an overlay package's pinned artifact, if any."""
        return {"uni_rl": self.wheel, "unisim": self.unisim_sdist}[package]


@dataclass
class Outcome:
    """What a command did, as lines for people and a dict for --json."""

    lines: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def resolve_checkout(opts: Options, create: bool) -> Path:
    """The user's checkout, or the embedded tree (made from the verified sdist when create is set).

    Two first-time runs on the embedded tree may race: creation happens under a lock on its parent directory
    (the second waits, then finds the tree), whole under a temporary name that a killed run leaves for the next.
    """
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
        tree.parent.mkdir(parents=True, exist_ok=True)
        with ExitStack() as stack:
            DirLocks(stack, wait=True).take(tree.parent, "the directory of")
            fsops.remove_temporaries([tree.parent])
            if not tree.exists():
                create_embedded_tree(sdist, tree)
    return tree


def python_command(opts: Options, checkout: Path) -> list[str]:
    return opts.python or uv_python(checkout) or [sys.executable]


def overlay_for(opts: Options, checkout: Path, state: dict[str, Any] | None) -> Path:
    """The overlay of a patched checkout is the one its state names; another one given explicitly is refused."""
    wanted = (opts.overlay or OVERLAY_DIR).resolve()
    if state is None:
        return wanted
    recorded = Path(state["overlay"])
    if opts.overlay is not None and wanted != recorded:
        raise PatchsetError(f"{checkout} was applied with the overlay {recorded}, not {wanted}; "
                            "leave OVERLAY= (--overlay) out or pass that one")
    return recorded


def overlay_pristine(opts: Options, pins: dict[str, str]) -> tuple[dict[str, ovl.Files], dict[str, dict[str, str]]]:
    """Each overlay package as its verified pinned artifact holds it, and which artifact that was."""
    pristine, artifacts = {}, {}
    for package in OVERLAY_PACKAGES:
        name, sha256 = package.artifact(pins)
        pristine[package.name] = package_files(pinned_artifact(name, sha256, opts.artifact(package.name)),
                                               package.name)
        artifacts[package.name] = {"file": name, "sha256": sha256}
    return pristine, artifacts


def _load(opts: Options) -> tuple[dict[str, str], Series, dict[str, Any]]:
    pins = load_pins()
    series = load_series(opts.patches_dir)
    manifest = load_manifest(opts.patches_dir)
    verify_series(series, manifest)
    return pins, series, manifest


def _file_records(plan: dict[str, FileChange], root: Path) -> dict[str, dict[str, Any]]:
    records = {}
    for path, change in sorted(plan.items()):
        full = root / path
        mode = full.stat().st_mode & 0o7777 if full.exists() else None
        records[path] = {"pre": change.pre_sha256, "post": change.post_sha256, "mode": mode}
    return records


def _flag_lines(state: dict[str, Any]) -> list[str]:
    """Every output repeats the overrides the state was made with."""
    lines = []
    flags = state["flags"]
    if flags.get("allow_version_drift"):
        drift = [c for c in state["versions"] if not c["ok"]]
        desc = "; ".join(f"{c['name']} expected {c['expected']}, found {c['found']}" for c in drift) or "none found"
        lines.append(f"NOTE: applied with --allow-version-drift ({desc})")
    if flags.get("allow_other_commit"):
        lines.append(f"NOTE: applied with --allow-other-commit (HEAD {state['checkout_identity'].get('head')})")
    return lines


def _require_overlay(checkout: Path, overlay: Path) -> None:
    """An applied checkout's overlay packages must still be there: without them a run imports the installed,
    unpatched ones, and a per-file status would only list every overlay file as changed. So must its manifest,
    readable: the provenance hook checks every imported file against it, and the revert reads its owners."""
    missing = [p for p in OVERLAY_DIRS if not ovl.package_dir(overlay, p).is_dir()]
    if missing:
        what = "is missing" if not overlay.exists() else f"lacks {', '.join(missing)}"
        raise PatchsetError(f"{checkout} is applied, but its overlay {overlay} {what} (deleted since?); 'revert' "
                            "restores the checkout, then 'apply' builds the overlay again")
    if ovl.load_overlay_manifest(overlay) is None:  # a corrupt one is refused there, in its own line
        raise PatchsetError(f"{checkout} is applied, but its overlay manifest {overlay / ovl.MANIFEST} is missing "
                            "(deleted since?); 'revert' restores the checkout and removes the overlay, then 'apply' "
                            "builds it again")


def _already_applied(opts: Options, checkout: Path, series: Series, state: dict) -> Outcome:
    """A second apply of the same series is a no-op; anything else about an applied tree is an error."""
    overlay = overlay_for(opts, checkout, state)
    if state["series_sha256"] != series.sha256:
        raise PatchsetError(f"{checkout} carries a different series ({state['series_sha256'][:12]}); revert it first")
    _require_overlay(checkout, overlay)
    own = ovl.hash_files(ovl.own_files())
    if own != {rel: sha for rel, sha in state["overlay_files"].items() if rel.split("/")[0] in OWN_PACKAGES}:
        raise PatchsetError(f"runtime/ changed since {overlay} was built; 'revert', then 'apply' places it again")
    edited = [f["path"] for f in file_statuses(checkout, overlay, None, state) if f["status"] != "applied"]
    if edited:
        raise PatchsetError(f"already applied, but {', '.join(edited)} changed since; see 'status'")
    lines = [f"already applied to {checkout} (series {series.sha256[:12]}); nothing to do", *_flag_lines(state)]
    return Outcome(lines, {"result": "already-applied", "checkout": str(checkout), "series_sha256": series.sha256})


@dataclass
class Prepared:
    """Everything apply will write, computed and checked before the first byte changes."""

    checkout_plan: dict[str, FileChange]
    overlay_files: ovl.Files  # the whole patched package, in memory
    images: dict[str, tuple[bytes, int]]  # the journal's backup/ and post/ copies
    state: dict[str, Any]


def _prepare(opts: Options, pins: dict[str, str], series: Series, manifest: dict, checkout: Path,
             overlay: Path) -> Prepared:
    """Check pins and every target and plan them, in memory; nothing is written."""
    python = python_command(opts, checkout)
    versions = checks.check_versions(pins, python, opts.allow_version_drift)
    touched = sorted(manifest["targets"][TARGET_CHECKOUT])
    checks.check_clean(checkout, touched)
    checks.verify_pre_images(TARGET_CHECKOUT, lambda rel: read_file(checkout, rel), manifest, checkout)
    plan_u = plan_target(series.for_target(TARGET_CHECKOUT), lambda rel: read_file(checkout, rel))
    checks.verify_post_images(TARGET_CHECKOUT, plan_u, manifest)
    identity = checks.check_identity(pins, checkout, touched, opts.allow_other_commit)
    checks.check_writable(checkout, plan_u)
    pristine, artifacts = overlay_pristine(opts, pins)
    for package, own in pristine.items():
        checks.verify_pre_images(package, lambda rel, own=own: own[rel][0] if rel in own else None,
                                 manifest, Path(artifacts[package]["file"]))
    files, overlay_plans = ovl.build(pristine, series)
    for package, plan in overlay_plans.items():
        checks.verify_post_images(package, plan, manifest)
    package_there, overlay_manifest = ovl.check_existing(overlay, files)
    images = {f"backup/{TARGET_CHECKOUT}/{p}": (c.pre, 0o644) for p, c in plan_u.items() if c.pre is not None}
    for target, plan in ((TARGET_CHECKOUT, plan_u), *overlay_plans.items()):
        images.update({f"post/{target}/{p}": (c.post, 0o644) for p, c in plan.items() if c.post is not None})
    created = {d for p, c in plan_u.items() if c.post is not None
               for d in fsops.missing_parents((checkout / p).parent, checkout)}
    state = {
        "tool_version": TOOL_VERSION,
        "phase": "applying",
        "time": _now(),
        "series_sha256": series.sha256,
        "patches": [{"name": p.name, "target": p.target, "sha256": p.sha256} for p in series.patches],
        "files": {TARGET_CHECKOUT: _file_records(plan_u, checkout),
                  **{package: {p: {"pre": c.pre_sha256, "post": c.post_sha256,
                                   "mode": pristine[package][p][1] if p in pristine[package] else None}
                               for p, c in sorted(plan.items())}
                     for package, plan in overlay_plans.items()}},
        "checkout": str(checkout),
        "checkout_identity": identity,
        "overlay": str(overlay),
        "overlay_files": ovl.hash_files(files),
        "overlay_before": {"package": package_there, "manifest": overlay_manifest},
        "created_dirs": sorted(str(d.relative_to(checkout)) for d in created),
        "overlay_created_dirs": [str(d) for d in fsops.missing_parents(overlay, Path(overlay.anchor))],
        "python": python,
        "versions": [{"name": c.name, "expected": c.expected, "found": c.found, "ok": c.ok} for c in versions],
        "flags": {"allow_version_drift": opts.allow_version_drift, "allow_other_commit": opts.allow_other_commit},
        "artifacts": artifacts,
    }
    return Prepared(plan_u, files, images, state)


def _create_overlay_dir(overlay: Path, created: list[str], locks: DirLocks) -> None:
    """Make the overlay directory and the parents that _prepare found missing (the journal already lists them, so
    a rollback removes them), then lock it like an existing overlay: a run started meanwhile cannot work in it."""
    for directory in created:
        fsops.mkdir(Path(directory))
    if created:
        locks.take(overlay, "the overlay")


def _hard_linked(checkout: Path, plan: dict[str, FileChange]) -> dict[str, Path]:
    """The journal's link/ entries: each touched file that has other hard links, so that the revert can put that
    very file back (apply replaces the path with a new file and never writes through the other names)."""
    links = {}
    for path, change in plan.items():
        live = checkout / path
        if change.pre is not None and not live.is_symlink() and live.is_file() and live.stat().st_nlink > 1:
            links[f"link/{TARGET_CHECKOUT}/{path}"] = live
    return links


def _commit(checkout: Path, overlay: Path, prep: Prepared, locks: DirLocks) -> None:
    """Journal first (atomically, with backups), then checkout files, then the overlay, then phase 'applied'."""
    state = prep.state
    if state["overlay_before"]["manifest"] is not None:  # a shared overlay: its rollback's manifest, put aside
        state["overlay_manifest_ready"] = str(ovl.put_aside_manifest(overlay, state["overlay_before"]["manifest"]))
    create_state(checkout, state, prep.images, _hard_linked(checkout, prep.checkout_plan))
    for rel in state["created_dirs"]:
        fsops.mkdir(checkout / rel)
    for path, change in prep.checkout_plan.items():
        if change.post is None:
            fsops.unlink(checkout / path)
        else:
            fsops.write_file(checkout / path, change.post, state["files"][TARGET_CHECKOUT][path]["mode"] or 0o644)
    _create_overlay_dir(overlay, state["overlay_created_dirs"], locks)
    if not state["overlay_before"]["package"]:
        ovl.install(overlay, prep.overlay_files)
    before = state["overlay_before"]["manifest"] or {}
    ovl.save_overlay_manifest(overlay, {
        "series_sha256": state["series_sha256"], "artifacts": state["artifacts"],
        "files": state["overlay_files"], "patched": {p: state["files"][p] for p in OVERLAY_TARGETS},
        "owners": sorted({*before.get("owners", []), str(checkout)}),
        "created_dirs": sorted({*before.get("created_dirs", []), *state["overlay_created_dirs"]}),
        "flags": state["flags"], "versions": state["versions"], "time": state["time"],
    })
    state["phase"] = "applied"
    ready = state.pop("overlay_manifest_ready", None)
    save_state(checkout, state)
    if ready:
        fsops.unlink(Path(ready))


def _roll_back_now(checkout: Path, exc: BaseException, dirs: list[Path]) -> PatchsetError:
    """After a failed or interrupted commit: roll back at once (signals held), say so in the error's one line."""
    with signals.deferred():
        try:
            journal = load_state(checkout)
            if journal is not None:
                recovery.roll_back_apply(checkout, journal)
            fsops.remove_temporaries(dirs)
            note = "rolled back, nothing changed"
        except (OSError, PatchsetError) as again:
            why = os_error_message(again) if isinstance(again, OSError) else str(again)
            note = f"the rollback stopped too ({why}); the next 'apply' or 'revert' finishes it"
    return with_note(exc, note)


def _lock_overlays(locks: DirLocks, overlays: set[Path]) -> None:
    """Lock each overlay directory; one that does not exist yet through its nearest existing parent, where apply
    will create it (only once everything is checked), so that two runs cannot both create and fill it."""
    for overlay in sorted(overlays):
        if overlay.is_dir():
            locks.take(overlay, "the overlay")
        else:
            locks.take(next(p for p in overlay.parents if p.is_dir()), f"the new overlay {overlay} in")


def apply(opts: Options) -> Outcome:
    pins, series, manifest = _load(opts)
    checkout = resolve_checkout(opts, create=True)
    overlay = (opts.overlay or OVERLAY_DIR).resolve()
    checks.check_overlay_place(overlay, checkout, opts.patches_dir)
    out = Outcome()
    with ExitStack() as stack:
        locks = DirLocks(stack)
        locks.take(checkout, "the checkout")
        state = load_state(checkout)
        overlays = {overlay, *([Path(state["overlay"])] if state else [])}
        _lock_overlays(locks, overlays)
        removed = fsops.remove_temporaries(recovery.sweep_dirs(checkout, state, manifest, overlays))
        if removed and not (state and state["phase"] != "applied"):
            out.lines.append(f"removed {removed} temporary file(s) left by an interrupted run")
        if state and state["phase"] != "applied":
            with signals.deferred() as late:
                out.lines.append(recovery.finish_interrupted(checkout, state, out.lines))
            if late:
                raise Interrupted(late[0], f"interrupted by {signals.name(late[0])}; before stopping it "
                                           f"{out.lines[-1]}")
            state = None
        if state:
            return _already_applied(opts, checkout, series, state)
        prep = _prepare(opts, pins, series, manifest, checkout, overlay)
        try:
            _commit(checkout, overlay, prep, locks)
            late = signals.hold()  # committed: a signal before this line rolls back, one after it stops nothing
        except BaseException as exc:
            raise _roll_back_now(checkout, exc, recovery.sweep_dirs(checkout, prep.state, None, overlays)) from exc
    out.lines += [
        f"applied {len(series.patches)} patch(es) (series {series.sha256[:12]}) to {checkout}",
        f"overlay: {overlay} (put it first on PYTHONPATH)",
        *_flag_lines(prep.state),
    ]
    if late:
        out.lines.append(f"NOTE: {signals.name(late[0])} arrived once the apply had committed; it stays applied")
    out.data = {"result": "applied", "checkout": str(checkout), "series_sha256": series.sha256,
                "flags": prep.state["flags"]}
    return out


def file_statuses(checkout: Path, overlay: Path, manifest: dict[str, Any] | None, state: dict | None) -> list[dict]:
    """Per touched file: applied (post-image), not applied (pre-image), edited (after apply) or drifted.

    An applied checkout is judged by its own state (what was really written, even if the project's series has
    moved on since); an unapplied one by the manifest of the current series. Links are never followed. An applied
    checkout's rows also name every other file of its overlay's packages changed, added or deleted since the
    apply built them: revert would delete those with the overlay.
    """
    applied = state is not None and state["phase"] == "applied"
    expected = state["files"] if state is not None else manifest["targets"]
    rows = []
    for target, files in expected.items():
        root = checkout if target == TARGET_CHECKOUT else overlay
        for path, want in sorted(files.items()):
            if target != TARGET_CHECKOUT and not ovl.package_dir(overlay, target).exists():
                current = want["pre"]  # no overlay built: the artifact's pristine file is what imports would see
            else:
                current = file_marker(root, path)
            if current == want["post"]:
                status = "applied"
            elif current == want["pre"]:
                status = "not applied"
            else:
                status = "edited" if applied else "drifted"
            detail = marker_note(current) if status in ("edited", "drifted") else ""
            rows.append({"target": target, "path": path, "status": status, "sha256": current, "detail": detail})
    if applied:
        rows += [f for f in recovery.overlay_edits(state) if f["path"] not in expected.get(f["target"], {})]
    return rows


def _names(rows: list[dict[str, Any]]) -> str:
    return ", ".join(f"{f['target']}:{f['path']}{f['detail']}" for f in rows)


def _edited(rows: list[dict[str, Any]], state: dict[str, Any]) -> list[dict[str, Any]]:
    """What a revert would overwrite or delete unsaved: checkout files that are neither as applied nor pristine, and
    overlay files that are not as built (a file of the series put back to its pristine bytes included: the revert
    deletes it with the overlay)."""
    return [f for f in rows if f["target"] == TARGET_CHECKOUT and f["status"] not in ("applied", "not applied")
            ] + recovery.overlay_edits(state)


def status(opts: Options) -> Outcome:
    _, series, manifest = _load(opts)
    checkout = resolve_checkout(opts, create=False)
    state = load_state(checkout)
    overlay = overlay_for(opts, checkout, state)
    if state and state["phase"] == "applied":
        _require_overlay(checkout, overlay)
    files = file_statuses(checkout, overlay, manifest, state)
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
    leftovers = fsops.temporaries(recovery.sweep_dirs(checkout, state, manifest, {overlay}))
    out = Outcome(data={
        "checkout": str(checkout), "overlay": str(overlay), "phase": phase,
        "series_sha256": applied_series, "project_series_sha256": series.sha256, "state": state,
        "patches": patches, "files": files, "temporaries": [str(p) for p in leftovers],
    })
    if state and phase != "applied":
        verb = "rolls it back" if phase == "applying" else "finishes it"
        out.lines.append(f"INTERRUPTED {phase} in {checkout}: the next 'apply' or 'revert' {verb}")
    if leftovers:
        out.lines.append(f"LEFTOVER: {len(leftovers)} temporary file(s) of an interrupted run; "
                         "the next 'apply' or 'revert' removes them")
    edited = [] if state is None else _edited(files, state) if phase == "applied" else recovery.overlay_edits(state)
    if edited:
        out.lines.append(f"EDITED since apply: {_names(edited)}; 'revert' refuses until --force (FORCE=1) saves "
                         "them")
    out.lines.append(f"{checkout}: {phase} (series {applied_series[:12]})")
    if not current_series:
        out.lines.append(f"OUTDATED: this project's series is now {series.sha256[:12]}; 'revert' then 'apply' to update")
    out.lines += [f"  patch {p['name']:<60} {p['status']}" for p in patches]
    out.lines += [f"  file  {f['target']}:{f['path']:<55} {f['status']}{f['detail']}" for f in files]
    if state:
        out.lines += _flag_lines(state)
    return out


def _refuse_unforced(opts: Options, edited: list[dict[str, Any]]) -> None:
    """A revert over edits to files it restores or deletes needs FORCE, which saves them first."""
    if edited and not opts.force:
        raise PatchsetError(f"refusing to revert: edited after apply: {_names(edited)}; "
                            "--force (FORCE=1) saves them (byte for byte) first")


def _built(checkout: Path, state: dict[str, Any], target: str, path: str) -> bytes | None:
    """An edited file as the apply left it, for the diff of the saved edits: its post-image (empty where the series
    deletes the file or the user added it), None where the journal keeps no copy (an overlay file the series does
    not touch: its built bytes are the pinned artifact's)."""
    if path in state["files"].get(target, {}):
        return _post_image(checkout, target, path) or b""
    if target != TARGET_CHECKOUT and path not in state["overlay_files"]:
        return b""
    return None


def _save_edits(checkout: Path, overlay: Path, state: dict[str, Any], edited: list[dict[str, Any]]) -> Path:
    """Save the edited files byte for byte and record what was saved in the state (in memory), so that recovery
    accepts exactly those files where it expects the built ones."""
    saved, markers = useredits.save(checkout, [
        (f["target"], f["path"], checkout if f["target"] == TARGET_CHECKOUT else overlay,
         _built(checkout, state, f["target"], f["path"])) for f in edited])
    earlier = (state.get("user_edits") or {}).get("markers", {})
    state["user_edits"] = {"dir": str(saved), "markers": {**earlier, **markers}}
    return saved


def _revert_applied(opts: Options, checkout: Path, overlay: Path, state: dict[str, Any]) -> Outcome:
    """Revert an applied checkout: refuse over edits unless forced (then save them first), then restore."""
    manifest = ovl.load_overlay_manifest(overlay)  # a corrupt one stops the revert before anything changes
    state["overlay_created_dirs"] = ovl.created_dirs(overlay, manifest, state.get("overlay_created_dirs", []))
    edited = _edited(file_statuses(checkout, overlay, None, state), state)
    _refuse_unforced(opts, edited)
    notes = _flag_lines(state)  # before anything changes: once the revert is done, nothing may fail
    saved, started = None, False
    late = signals.hold()  # a revert, once begun, completes; what it reports then must not be cut short either
    try:
        if edited:
            saved = _save_edits(checkout, overlay, state, edited)
        others = [o for o in (manifest or {}).get("owners", []) if o != str(checkout)]
        if manifest is not None and others and others != manifest["owners"]:  # what the release will write
            state["overlay_manifest_ready"] = str(ovl.put_aside_manifest(overlay, {**manifest, "owners": others}))
        state["phase"] = "reverting"
        save_state(checkout, state)
        started = True
        restored, removed = recovery.finish_revert(checkout, state, notes)
    except (OSError, PatchsetError) as exc:
        if started:
            raise with_note(exc, "the revert stopped part way; run 'revert' again to finish it") from exc
        fsops.remove_temporaries(recovery.sweep_dirs(checkout, state, None, {overlay}))
        raise with_note(exc, "nothing was reverted") from exc
    done = f"reverted {checkout}: restored {len(restored)} file(s)" + (
        "; overlay removed" if removed else "; overlay kept for its other checkouts")
    if late:
        raise Interrupted(late[0], f"interrupted by {signals.name(late[0])} after the revert completed ({done})"
                                   + (f"; your edits were saved to {saved}" if saved else ""))
    out = Outcome(notes + [done])
    if saved:
        out.lines.append(f"your edits were saved to {saved}")
    out.data = {"result": "reverted", "checkout": str(checkout), "restored": restored,
                "user_edits": str(saved) if saved else None}
    return out


def _post_image(checkout: Path, target: str, path: str) -> bytes | None:
    image = image_path(checkout, "post", target, path)
    return image.read_bytes() if image.exists() else None


def _recover_interrupted(opts: Options, checkout: Path, overlay: Path, state: dict[str, Any]) -> Outcome:
    """Recover a run that was killed (roll an apply back, complete a revert), over edits to its overlay only when
    forced, saving them first as a revert of an applied checkout does."""
    edited = recovery.overlay_edits(state)
    _refuse_unforced(opts, edited)
    saved = None
    late = signals.hold()  # as in a revert of an applied checkout
    if edited:
        saved = _save_edits(checkout, overlay, state, edited)
        save_state(checkout, state)
    notes: list[str] = []
    line = recovery.finish_interrupted(checkout, state, notes)
    if late:
        raise Interrupted(late[0], f"interrupted by {signals.name(late[0])}; before stopping it {line}"
                                   + (f"; your edits were saved to {saved}" if saved else ""))
    return Outcome([*notes, line, *([f"your edits were saved to {saved}"] if saved else [])],
                   {"result": "recovered", "checkout": str(checkout), "user_edits": str(saved) if saved else None})


def revert(opts: Options) -> Outcome:
    """Restore from the checkout's own state: needs neither the series nor the manifest of this project."""
    checkout = resolve_checkout(opts, create=False)
    with ExitStack() as stack:
        locks = DirLocks(stack)
        locks.take(checkout, "the checkout")
        state = load_state(checkout)
        overlay = overlay_for(opts, checkout, state)
        _lock_overlays(locks, {overlay})
        removed = fsops.remove_temporaries(recovery.sweep_dirs(checkout, state, None, {overlay}))
        if state is None:
            if removed:
                return Outcome([f"removed {removed} temporary file(s) left by an interrupted run in {checkout}; "
                                "nothing else to revert"], {"result": "cleaned", "checkout": str(checkout)})
            raise PatchsetError(f"nothing to revert: {checkout} carries no patchset state")
        if state["phase"] != "applied":
            return _recover_interrupted(opts, checkout, overlay, state)
        return _revert_applied(opts, checkout, overlay, state)


def plan_pristine(opts: Options) -> tuple[Series, dict[str, dict[str, FileChange]]]:
    """Plan the series over the pristine pinned trees (sdists, wheel); used to (re)write the manifest."""
    pins = load_pins()
    series = load_series(opts.patches_dir)
    sdist = pinned_artifact(pins["UNILAB_SDIST"], pins["UNILAB_SDIST_SHA256"], opts.sdist)
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if m.isfile() and "/" in m.name}
        def read_sdist(rel: str) -> bytes | None:
            member = members.get(rel)
            return tar.extractfile(member).read() if member else None
        plan_u = plan_target(series.for_target(TARGET_CHECKOUT), read_sdist)
    _, overlay_plans = ovl.build(overlay_pristine(opts, pins)[0], series)
    return series, {TARGET_CHECKOUT: plan_u, **overlay_plans}
