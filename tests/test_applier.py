"""The applier against the real pinned trees: round trip, refusals, crash recovery, locking, offline cache."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import git
import pytest
from conftest import CONFIG, PROJECT, Runner, patchset, patchset_env, tree_hashes
from patchset.errors import LockedError
from patchset.locks import DirLocks


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """Failures exit non-zero with exactly one line on stderr and nothing on stdout."""
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def commit_all(root: Path, message: str) -> str:
    repo = git.Repo(root)
    repo.git.add("-A")
    repo.git.execute(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message])
    return repo.head.commit.hexsha


def test_round_trip_is_byte_identical(checkout: Path, overlay: Path, run_patchset: Runner) -> None:
    before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
    applied = run_patchset("apply", "--unilab", str(checkout))
    assert applied.returncode == 0, applied.stderr
    assert tree_hashes(checkout)[CONFIG] != before[CONFIG]
    assert (overlay / "uni_rl" / "__init__.py").is_file() and (overlay / "unisim" / "__init__.py").is_file()
    state = json.loads((checkout / ".flashsac-overlay" / "state.json").read_text())
    assert state["phase"] == "applied" and state["files"]["unilab"][CONFIG]["pre"]
    assert {"tool_version", "series_sha256", "versions", "flags", "time"} <= set(state)
    # git sees exactly the files the series patches as modified and the files it adds as untracked, and nothing
    # of ours (state is self-ignored)
    files = state["files"]["unilab"]
    assert CONFIG in files
    expected = {(" M " if files[rel]["pre"] else "?? ") + rel for rel in files}
    status = git.Repo(checkout).git.status("--porcelain", "--untracked-files=all").splitlines()
    assert sorted(status) == sorted(expected)
    reverted = run_patchset("revert", "--unilab", str(checkout))
    assert reverted.returncode == 0, reverted.stderr
    assert tree_hashes(checkout) == before
    assert tree_hashes(overlay) == overlay_before


def test_the_own_package_is_placed_recorded_and_kept_current(checkout: Path, overlay: Path, tmp_path: Path) -> None:
    """runtime/flashsac_runtime lands in the overlay beside the patched packages, every file recorded like theirs:
    an edit there blocks the revert until forced, and an apply over an overlay built from another runtime/ is one
    line that changes nothing. Run from a copy of the project, whose runtime/ the test may change."""
    project = tmp_path / "project"
    for name in ("scripts", "patches", "runtime"):
        shutil.copytree(PROJECT / name, project / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(PROJECT / "VERSIONS.env", project / "VERSIONS.env")

    def run(*args: str) -> subprocess.CompletedProcess:
        return patchset(overlay, *args, "--unilab", str(checkout), env={"PYTHONPATH": str(project / "scripts")})

    assert run("apply").returncode == 0
    manifest = json.loads((overlay / "MANIFEST.json").read_text())
    own = {str(p.relative_to(project / "runtime")): hashlib.sha256(p.read_bytes()).hexdigest()
           for p in (project / "runtime").rglob("*.py")}
    assert own and {rel: manifest["files"][rel] for rel in own} == own
    assert set(tree_hashes(overlay / "flashsac_runtime")) == {rel.split("/", 1)[1] for rel in own}
    placed = overlay / "flashsac_runtime" / "staged_read.py"
    built = placed.read_bytes()
    placed.write_bytes(built + b"# mine\n")
    line = one_line_error(run("revert"))
    assert "flashsac_runtime:flashsac_runtime/staged_read.py" in line and "--force" in line
    placed.write_bytes(built)
    state = (checkout / ".flashsac-overlay" / "state.json").read_bytes()
    source = project / "runtime" / "flashsac_runtime" / "staged_read.py"
    source.write_bytes(source.read_bytes() + b"# changed\n")
    line = one_line_error(run("apply"))
    assert line.endswith("'revert', then 'apply' places it again") and "runtime/ changed since" in line
    assert (checkout / ".flashsac-overlay" / "state.json").read_bytes() == state and placed.read_bytes() == built
    assert run("revert").returncode == 0 and not (overlay / "flashsac_runtime").exists()
    assert run("apply").returncode == 0 and placed.read_bytes() == source.read_bytes()


def test_series_applies_with_git_too(checkout: Path) -> None:
    """Cross-check with git: the unilab patches apply to the pristine tree in series order with no fuzz (each
    on the tree the earlier ones left: two of them touch the same file)."""
    for line in (PROJECT / "patches" / "series").read_text().splitlines():
        if line.startswith("unilab "):
            subprocess.run(["git", "apply", "-C3", str(PROJECT / "patches" / line.split()[1])],
                           cwd=checkout, check=True)


def test_second_apply_is_a_noop(checkout: Path, run_patchset: Runner) -> None:
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    state_file = checkout / ".flashsac-overlay" / "state.json"
    state_before = state_file.read_bytes()
    again = run_patchset("apply", "--unilab", str(checkout))
    assert again.returncode == 0 and "already applied" in again.stdout
    assert state_file.read_bytes() == state_before


@pytest.fixture
def wrong_python(tmp_path: Path, wheel: Path) -> Path:
    """A real interpreter whose environment has unilab-rl 1.3.2 (not the pinned 1.4.0) and nothing else."""
    venv = tmp_path / "wrong-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(wheel)], check=True)
    return venv / "bin" / "python"


def test_wrong_installed_version_refused_then_drift_recorded(
    checkout: Path, overlay: Path, run_patchset: Runner, wrong_python: Path
) -> None:
    before = tree_hashes(checkout)
    proc = run_patchset("apply", "--unilab", str(checkout), "--python", str(wrong_python))
    line = one_line_error(proc)
    assert "unilab-rl expected 1.4.0, found 1.3.2" in line and "torch expected 2.8.0+cu128, found not installed" in line
    assert tree_hashes(checkout) == before and not (overlay / "uni_rl").exists()

    drift = run_patchset("apply", "--unilab", str(checkout), "--python", str(wrong_python), "--allow-version-drift")
    assert drift.returncode == 0, drift.stderr
    assert "--allow-version-drift" in drift.stdout
    status = run_patchset("status", "--unilab", str(checkout))
    assert "NOTE: applied with --allow-version-drift" in status.stdout and "unilab-rl expected 1.4.0" in status.stdout
    assert json.loads((overlay / "MANIFEST.json").read_text())["flags"]["allow_version_drift"] is True
    reverted = run_patchset("revert", "--unilab", str(checkout))
    assert "--allow-version-drift" in reverted.stdout


def test_wrong_commit_refused_unless_allowed(checkout: Path, run_patchset: Runner) -> None:
    (checkout / "README.md").write_text("a later commit\n")
    head = commit_all(checkout, "later")
    before = tree_hashes(checkout)
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout)))
    assert head[:12] in line and "--allow-other-commit" in line
    assert tree_hashes(checkout) == before
    allowed = run_patchset("apply", "--unilab", str(checkout), "--allow-other-commit")
    assert allowed.returncode == 0, allowed.stderr
    assert f"--allow-other-commit (HEAD {head})" in run_patchset("status", "--unilab", str(checkout)).stdout


def test_pre_image_mismatch_refused(checkout: Path, run_patchset: Runner) -> None:
    config = checkout / CONFIG
    config.write_text(config.read_text().replace("seed: 1", "seed: 2"))
    commit_all(checkout, "user change committed")
    before = tree_hashes(checkout)
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout)))
    assert CONFIG in line and "differs from the pinned version" in line
    assert tree_hashes(checkout) == before


def test_dirty_checkout_refused(checkout: Path, run_patchset: Runner) -> None:
    config = checkout / CONFIG
    config.write_text(config.read_text() + "# local note\n")
    before = tree_hashes(checkout)
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout)))
    assert "local edits" in line and CONFIG in line
    assert tree_hashes(checkout) == before


def test_user_edit_after_apply_blocks_revert_until_forced(checkout: Path, run_patchset: Runner) -> None:
    pristine = (checkout / CONFIG).read_bytes()
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    with (checkout / CONFIG).open("a") as handle:
        handle.write("# my tuning\n")
    line = one_line_error(run_patchset("revert", "--unilab", str(checkout)))
    assert "unilab:" + CONFIG in line and "--force" in line
    assert "edited" in run_patchset("status", "--unilab", str(checkout)).stdout
    edited = (checkout / CONFIG).read_bytes()
    forced = run_patchset("revert", "--unilab", str(checkout), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (checkout / CONFIG).read_bytes() == pristine
    (saved,) = checkout.glob(".flashsac-overlay-user-edits-*")
    assert (saved / "files" / "unilab" / CONFIG).read_bytes() == edited
    assert "+# my tuning" in (saved / "edits.diff").read_text()


@pytest.fixture
def patches_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "patches"
    shutil.copytree(PROJECT / "patches", dest)
    return dest


def first_patch(patches: Path) -> Path:
    name = next(line.split()[1] for line in (patches / "series").read_text().splitlines()
                if line and not line.startswith("#"))
    return patches / name


def test_tampered_patch_refused(checkout: Path, run_patchset: Runner, patches_copy: Path) -> None:
    patch = first_patch(patches_copy)
    lines = patch.read_text().split("\n")
    added = next(i for i, line in enumerate(lines) if line.startswith("+") and not line.startswith("+++"))
    lines[added] += "  # tampered"
    patch.write_text("\n".join(lines))
    before = tree_hashes(checkout)
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout), "--patches", str(patches_copy)))
    assert "was modified" in line and patch.name in line
    assert tree_hashes(checkout) == before


def test_a_patch_changed_with_its_manifest_sha256_is_named_as_such(checkout: Path, run_patchset: Runner,
                                                                   patches_copy: Path) -> None:
    """A patch file changed and its sha256 in MANIFEST.json changed to match: the series digest is what catches it,
    and the line says so (not only that the order differs)."""
    patch = first_patch(patches_copy)
    patch.write_bytes(b"X-Note: changed by hand\n" + patch.read_bytes())
    manifest_file = patches_copy / "MANIFEST.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["patches"][str(patch.relative_to(patches_copy))]["sha256"] = hashlib.sha256(patch.read_bytes()).hexdigest()
    manifest_file.write_text(json.dumps(manifest))
    before = tree_hashes(checkout)
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout), "--patches", str(patches_copy)))
    assert f"MANIFEST.json's series digest (series_sha256 {manifest['series_sha256'][:12]}) does not match" in line
    assert "a patch file was changed together with its sha256 in MANIFEST.json" in line
    assert tree_hashes(checkout) == before


def test_crlf_patch_refused(checkout: Path, run_patchset: Runner, patches_copy: Path) -> None:
    patch = first_patch(patches_copy)
    patch.write_bytes(patch.read_bytes().replace(b"\n", b"\r\n"))
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout), "--patches", str(patches_copy)))
    assert "CRLF" in line


def test_crlf_target_file_refused(checkout: Path, run_patchset: Runner) -> None:
    config = checkout / CONFIG
    config.write_bytes(config.read_bytes().replace(b"\n", b"\r\n"))
    commit_all(checkout, "autocrlf damage")
    before = tree_hashes(checkout)
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout)))
    assert "CRLF" in line and CONFIG in line
    assert tree_hashes(checkout) == before


def test_read_only_target_refused(checkout: Path, overlay: Path, run_patchset: Runner) -> None:
    (checkout / CONFIG).chmod(0o444)
    before = tree_hashes(checkout)
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout)))
    assert "read-only" in line and CONFIG in line
    assert tree_hashes(checkout) == before and not (overlay / "uni_rl").exists()


def test_concurrent_apply_is_refused(checkout: Path, overlay: Path, run_patchset: Runner, tmp_path: Path) -> None:
    """The lock is on the checkout itself: a second run is refused even with another TMPDIR, and no lock file
    is left anywhere (TMPDIR stays empty)."""
    trace, tmpdir = tmp_path / "trace", tmp_path / "tmpdir"
    tmpdir.mkdir()
    first = subprocess.Popen(
        [sys.executable, "-m", "patchset", "apply", "--unilab", str(checkout), "--overlay", str(overlay)],
        env=patchset_env(PATCHSET_FAULT_AT="1:pause=6", PATCHSET_FAULT_TRACE=str(trace)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    while not trace.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    second = run_patchset("apply", "--unilab", str(checkout), env={"TMPDIR": str(tmpdir)})
    assert second.returncode == 3
    assert f"pid {first.pid}" in one_line_error(second)
    assert first.wait(timeout=120) == 0
    assert list(tmpdir.iterdir()) == []


def test_a_lock_holder_that_cannot_be_named_is_not_called_unknown(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Where /proc/locks cannot be read the refusal names no pid (nor 'pid unknown'); where it can, the holder's."""
    held = tmp_path / "checkout"
    held.mkdir()
    code = ("import fcntl, os, sys, time; fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX); "
            "print(1, flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(held)], stdout=subprocess.PIPE, text=True)
    read_text = Path.read_text

    def without_proc_locks(path: Path, *args: object, **kwargs: object) -> str:
        if path == Path("/proc/locks"):
            raise PermissionError(13, "Permission denied", str(path))
        return read_text(path, *args, **kwargs)

    try:
        assert holder.stdout.readline() == "1\n"
        messages = []
        for hide in (False, True):
            if hide:
                monkeypatch.setattr(Path, "read_text", without_proc_locks)
            with ExitStack() as stack, pytest.raises(LockedError) as refused:
                DirLocks(stack).take(held, "the checkout")
            messages.append(str(refused.value))
    finally:
        holder.kill()
        holder.wait()
    assert messages == [f"another patchset run (pid {holder.pid}) is working on the checkout {held}; try again later",
                        f"another patchset run is working on the checkout {held}; try again later"]


def test_missing_cache_without_network(tmp_path: Path, overlay: Path, run_patchset: Runner) -> None:
    tree = tmp_path / "embedded"
    proc = run_patchset("apply", env={
        "PATCHSET_CACHE": str(tmp_path / "empty-cache"),
        "PATCHSET_INDEX_URL": "http://127.0.0.1:9/simple",  # nothing listens on the discard port
        "PATCHSET_EMBEDDED_TREE": str(tree),
    })
    line = one_line_error(proc)
    assert "unilab-1.3.2.tar.gz is not in the cache" in line and "cannot be downloaded" in line
    assert not tree.exists() and not (overlay / "uni_rl").exists()


def test_make_apply_and_revert_on_embedded_tree(tmp_path: Path, overlay: Path) -> None:
    """The README's main job, through make, on the embedded default tree."""
    env = patchset_env(PATCHSET_EMBEDDED_TREE=str(tmp_path / "embedded tree"))
    make = ["make", "-C", str(PROJECT), f"OVERLAY={overlay}"]
    applied = subprocess.run([*make, "apply"], env=env, capture_output=True, text=True, check=False)
    assert applied.returncode == 0, applied.stderr
    pristine_head = git.Repo(tmp_path / "embedded tree").head.commit.tree.hexsha
    assert pristine_head == (PROJECT / "VERSIONS.env").read_text().split("UNILAB_SDIST_TREE=")[1].split()[0]
    reverted = subprocess.run([*make, "revert"], env=env, capture_output=True, text=True, check=False)
    assert reverted.returncode == 0, reverted.stderr
    assert git.Repo(tmp_path / "embedded tree").git.status("--porcelain", "--ignored") == ""


def test_provenance_reports_overlay_origin(checkout: Path, overlay: Path, run_patchset: Runner) -> None:
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    proc = run_patchset("provenance", "--unilab", str(checkout), "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    uni_rl = [m for m in record["modules"] if m["name"].startswith("uni_rl")]
    assert uni_rl and all(m["origin"] == "overlay" and m["matches"] is True for m in uni_rl)
    assert record["versions"]["unilab-rl"] == "1.4.0" and "shadows" in record["versions_note"]


def test_provenance_flags_installed_wheel(tmp_path: Path, overlay: Path) -> None:
    """Overlay hook on the path but no built uni_rl: the installed compat wheel is imported and flagged loudly."""
    env = {**os.environ, "PYTHONPATH": str(overlay), "FLASHSAC_PROVENANCE_DIR": str(tmp_path / "prov")}
    proc = subprocess.run([sys.executable, "-c", "import uni_rl"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert "NOT from the overlay" in proc.stderr
    (record_file,) = (tmp_path / "prov").glob("provenance-*.json")
    record = json.loads(record_file.read_text())
    assert record["flagged"] is True and record["uni_rl_origin"] == "site-packages"


def test_revert_after_the_series_moved_on(checkout: Path, overlay: Path, run_patchset: Runner,
                                          patches_copy: Path) -> None:
    """A checkout applied with an older series reverts exactly, from its own state, under the newer series."""
    series = patches_copy / "series"
    series.write_text("".join(line for line in series.read_text().splitlines(True) if not line.startswith("uni_rl ")))
    shutil.rmtree(patches_copy / "uni_rl")  # a patch the series does not list would be refused
    assert run_patchset("manifest", "--patches", str(patches_copy)).returncode == 0
    before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
    assert run_patchset("apply", "--unilab", str(checkout), "--patches", str(patches_copy)).returncode == 0
    status = run_patchset("status", "--unilab", str(checkout))
    assert status.returncode == 0 and "OUTDATED" in status.stdout
    again = run_patchset("apply", "--unilab", str(checkout))
    assert "carries a different series" in one_line_error(again)
    reverted = run_patchset("revert", "--unilab", str(checkout))
    assert reverted.returncode == 0, reverted.stderr
    assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before


def test_status_and_a_refused_apply_leave_the_git_index_alone(checkout: Path, run_patchset: Runner) -> None:
    """patchset only reads the checkout's git: a refreshing `git status` would rewrite .git/index (here its stat
    data is stale: the checkout is a fresh copy, and the touched file's mtime moved)."""
    index = checkout / ".git" / "index"
    os.utime(checkout / CONFIG)
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    assert run_patchset("status", "--unilab", str(checkout)).returncode == 0
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    with (checkout / CONFIG).open("a") as handle:
        handle.write("# local note\n")
    assert "local edits" in one_line_error(run_patchset("apply", "--unilab", str(checkout)))
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    control = subprocess.run(["git", "status", "--porcelain"], cwd=checkout, capture_output=True, check=True)
    assert control.stdout and (index.read_bytes(), index.stat().st_mtime_ns) != before  # git itself refreshes it
