"""What a hostile new user tries: odd edits under FORCE, someone else's uni_rl, another OVERLAY=, broken JSON,
a stray patch, a closed pipe, racing first runs, modes. Each must end in one line and exact trees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CONFIG, PROJECT, Runner, make_overlay, patchset, patchset_env, tree_hashes
from faultcheck import output_problems


def one_line(proc: subprocess.CompletedProcess, needle: str, code: int = 1) -> None:
    assert output_problems(proc, {code}, needle) == [], proc.stderr


ODD_EDITS = {
    "crlf": lambda data: data.replace(b"\n", b"\r\n"),
    "no final newline": lambda data: data.rstrip(b"\n") + b"\n# tuned",
    "latin-1 bytes": lambda data: data + b"# r\xe9glage \xff\n",
    "binary with NUL": lambda data: data[:40] + b"\x00\x01\x02" + data[40:],
    "emptied": lambda data: b"",
}


@pytest.mark.parametrize("edit", sorted(ODD_EDITS))
def test_forced_revert_saves_odd_edits_byte_for_byte(checkout: Path, run_patchset: Runner, edit: str) -> None:
    before = tree_hashes(checkout)
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    config = checkout / CONFIG
    patched = config.read_bytes()
    edited = ODD_EDITS[edit](patched)
    config.write_bytes(edited)
    one_line(run_patchset("revert", "--unilab", str(checkout)), "refusing to revert: edited after apply")
    forced = run_patchset("revert", "--unilab", str(checkout), "--force")
    assert forced.returncode == 0, forced.stderr
    (saved,) = checkout.glob(".flashsac-overlay-user-edits-*")
    assert (saved / "files" / "unilab" / CONFIG).read_bytes() == edited
    diff = saved.parent.parent / "edits.diff"
    shutil.move(saved / "edits.diff", diff)
    shutil.rmtree(saved)
    assert tree_hashes(checkout) == before
    if b"\x00" not in edited:  # the diff is a convenience; it must still reproduce the edit with git apply
        scratch = checkout.parent / "scratch"
        (scratch / CONFIG).parent.mkdir(parents=True)
        (scratch / CONFIG).write_bytes(patched)
        subprocess.run(["git", "init", "-q", str(scratch)], check=True)
        subprocess.run(["git", "apply", str(diff)], cwd=scratch, check=True)
        assert (scratch / CONFIG).read_bytes() == edited


def test_forced_revert_of_a_deleted_file_and_a_symlink(checkout: Path, run_patchset: Runner, tmp_path: Path) -> None:
    before = tree_hashes(checkout)
    config = checkout / CONFIG
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    config.unlink()
    one_line(run_patchset("revert", "--unilab", str(checkout)), "(deleted)")
    assert run_patchset("revert", "--unilab", str(checkout), "--force").returncode == 0
    (saved,) = checkout.glob(".flashsac-overlay-user-edits-*")
    assert f"unilab:{CONFIG} had been deleted" in (saved / "README.txt").read_text()
    shutil.rmtree(saved)
    assert tree_hashes(checkout) == before
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    elsewhere = tmp_path / "my-config.yaml"
    elsewhere.write_text("mine\n")
    config.unlink()
    config.symlink_to(elsewhere)
    status = run_patchset("status", "--unilab", str(checkout))
    assert status.returncode == 0 and f"replaced by a symlink to {elsewhere}" in status.stdout
    one_line(run_patchset("revert", "--unilab", str(checkout)), "replaced by a symlink")
    forced = run_patchset("revert", "--unilab", str(checkout), "--force")
    assert forced.returncode == 0, forced.stderr
    assert not config.is_symlink() and elsewhere.read_text() == "mine\n"
    (saved,) = checkout.glob(".flashsac-overlay-user-edits-*")
    assert os.readlink(saved / "files" / "unilab" / CONFIG) == str(elsewhere)
    shutil.rmtree(saved)
    assert tree_hashes(checkout) == before


def test_user_mode_survives_revert_and_manifest_is_world_readable(checkout: Path, overlay: Path,
                                                                    run_patchset: Runner) -> None:
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    assert (overlay / "MANIFEST.json").stat().st_mode & 0o777 == 0o644
    (checkout / CONFIG).chmod(0o444)
    assert run_patchset("revert", "--unilab", str(checkout)).returncode == 0
    assert (checkout / CONFIG).stat().st_mode & 0o777 == 0o444


def test_failed_apply_keeps_the_users_uni_rl(checkout: Path, overlay: Path, run_patchset: Runner) -> None:
    mine = overlay / "uni_rl" / "mine.py"
    mine.parent.mkdir()
    mine.write_text("my own work\n")
    before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
    one_line(run_patchset("apply", "--unilab", str(checkout)), "was not built by patchset")
    assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before


def test_revert_uses_the_overlay_it_applied(checkout: Path, overlay: Path, tmp_path: Path) -> None:
    other = make_overlay(tmp_path / "other overlay")
    (other / "uni_rl").mkdir()
    (other / "uni_rl" / "mine.py").write_text("my own work\n")
    other_before, pristine = tree_hashes(other), tree_hashes(checkout)
    assert patchset(overlay, "apply", "--unilab", str(checkout)).returncode == 0
    applied = tree_hashes(overlay)
    for force in ([], ["--force"]):
        one_line(patchset(other, "revert", "--unilab", str(checkout), *force), f"was applied with the overlay {overlay}")
        assert tree_hashes(other) == other_before and tree_hashes(overlay) == applied
    plain = subprocess.run([sys.executable, "-m", "patchset", "revert", "--unilab", str(checkout)],
                           env=patchset_env(), capture_output=True, text=True, check=False)
    assert plain.returncode == 0 and "overlay removed" in plain.stdout, plain.stderr
    assert not (overlay / "uni_rl").exists() and tree_hashes(checkout) == pristine


@pytest.mark.parametrize("where", ["state", "overlay manifest", "patches manifest"])
def test_structurally_invalid_json_is_one_line(checkout: Path, overlay: Path, run_patchset: Runner,
                                               tmp_path: Path, where: str) -> None:
    patches = tmp_path / "patches"
    shutil.copytree(PROJECT / "patches", patches)
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    target = {"state": checkout / ".flashsac-overlay" / "state.json", "overlay manifest": overlay / "MANIFEST.json",
              "patches manifest": patches / "MANIFEST.json"}[where]
    target.write_text("{}\n")
    before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
    commands = {"state": ["status", "apply", "revert"], "overlay manifest": ["revert"],
                "patches manifest": ["status", "apply"]}[where]
    for command in commands:
        one_line(run_patchset(command, "--unilab", str(checkout), "--patches", str(patches)), "is corrupt")
    assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before


def test_stray_patch_is_refused(checkout: Path, run_patchset: Runner, tmp_path: Path) -> None:
    patches = tmp_path / "patches"
    shutil.copytree(PROJECT / "patches", patches)
    first = patches / "uni_rl" / "0001-learner-reads-no-host-scalars.patch"
    shutil.copy(first, patches / "uni_rl" / "0010-stray.patch")
    before = tree_hashes(checkout)
    one_line(run_patchset("apply", "--unilab", str(checkout), "--patches", str(patches)),
             "patch uni_rl/0010-stray.patch is not listed in")
    assert tree_hashes(checkout) == before


def test_injected_permission_denied_is_one_line(checkout: Path, overlay: Path, run_patchset: Runner) -> None:
    before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
    proc = run_patchset("apply", "--unilab", str(checkout), env={"PATCHSET_FAULT_AT": "4:errno=EACCES"})
    one_line(proc, "Permission denied")
    assert "rolled back, nothing changed" in proc.stderr
    assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before


def test_status_into_a_closed_pipe(checkout: Path, overlay: Path) -> None:
    command = (f"{sys.executable} -m patchset status --unilab '{checkout}' --overlay '{overlay}' | true; "
               "exit ${PIPESTATUS[0]}")  # 'true' has exited long before the interpreter prints
    proc = subprocess.run(["bash", "-c", command], env=patchset_env(), capture_output=True, text=True, check=False)
    one_line(proc, "the output pipe was closed", 141)


def test_two_first_time_applies_on_the_embedded_tree(tmp_path: Path, overlay: Path) -> None:
    env = patchset_env(PATCHSET_EMBEDDED_TREE=str(tmp_path / "embedded"))
    runs = [subprocess.Popen([sys.executable, "-m", "patchset", "apply", "--overlay", str(overlay)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
    assert 0 in [code for code, _ in results], results
    for code, err in results:
        assert code in (0, 3) and "Traceback" not in err and len(err.strip().splitlines()) == (code != 0), results
    assert json.loads((tmp_path / "embedded" / ".flashsac-overlay" / "state.json").read_text())["phase"] == "applied"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".flashsac-tmp-")] == []


def entries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_new_overlay_directory_exists_only_while_applied(checkout: Path, tmp_path: Path) -> None:
    """OVERLAY= a directory that does not exist yet: a refused apply creates nothing, a rolled back or recovered
    apply removes what it created, and revert removes what apply created but keeps what was there before."""
    base = tmp_path / "x"
    (base / "mine").mkdir(parents=True)
    new = base / "mine" / "new" / "deep" / "ov"
    config = checkout / CONFIG
    pristine = config.read_bytes()
    config.write_bytes(pristine + b"# local note\n")
    one_line(patchset(new, "apply", "--unilab", str(checkout)), "local edits")
    assert entries(base) == ["mine"]
    config.write_bytes(pristine)
    before, trace = tree_hashes(checkout), tmp_path / "trace"
    assert patchset(new, "apply", "--unilab", str(checkout), env={"PATCHSET_FAULT_TRACE": str(trace)}).returncode == 0
    assert (new / "uni_rl").is_dir() and (new / "unisim").is_dir()
    assert patchset(new, "revert", "--unilab", str(checkout)).returncode == 0
    assert entries(base) == ["mine"] and tree_hashes(checkout) == before
    made = next(int(line.split()[0]) for line in trace.read_text().splitlines() if line.endswith(f" mkdir {new}"))
    one_line(patchset(new, "apply", "--unilab", str(checkout), env={"PATCHSET_FAULT_AT": f"{made + 1}:errno=ENOSPC"}),
             "rolled back, nothing changed")
    assert entries(base) == ["mine"] and tree_hashes(checkout) == before
    killed = patchset(new, "apply", "--unilab", str(checkout), env={"PATCHSET_FAULT_AT": f"{made + 1}:kill"})
    assert killed.returncode == -9
    recovered = patchset(new, "revert", "--unilab", str(checkout))
    assert recovered.returncode == 0 and "rolled back an interrupted apply" in recovered.stdout, recovered.stderr
    assert entries(base) == ["mine"] and tree_hashes(checkout) == before


def test_a_shared_new_overlay_goes_with_its_last_checkout(checkout: Path, tmp_path: Path,
                                                          pristine_template: Path) -> None:
    """The directories one checkout's apply created for an overlay are removed when the last checkout using that
    overlay is reverted, whichever it is."""
    other = Path(shutil.copytree(pristine_template, tmp_path / "other checkout", symlinks=True))
    new = tmp_path / "x" / "new" / "ov"
    for tree in (checkout, other):
        assert patchset(new, "apply", "--unilab", str(tree)).returncode == 0
    for tree in (checkout, other):
        assert new.is_dir()
        assert patchset(new, "revert", "--unilab", str(tree)).returncode == 0
    assert entries(tmp_path / "x") == []


def _without(state: dict, key: str) -> dict:
    return {k: v for k, v in state.items() if k != key}


#: A state.json damaged in a key that only a later step reads, and the key the refusal must name.
STATE_DAMAGE = {
    "checkout_identity": lambda s: {**_without(s, "checkout_identity"), "flags": {**s["flags"],
                                                                                  "allow_other_commit": True}},
    "overlay_files": lambda s: {**s, "overlay_files": sorted(s["overlay_files"])},
    "overlay_before": lambda s: _without(s, "overlay_before"),
    f"files.unilab.{CONFIG}.mode": lambda s: {**s, "files": {**s["files"], "unilab": {
        **s["files"]["unilab"], CONFIG: {**s["files"]["unilab"][CONFIG], "mode": "0644"}}}},
    "versions": lambda s: {**s, "versions": [{"name": "torch"}], "flags": {**s["flags"], "allow_version_drift": True}},
    "created_dirs": lambda s: {**s, "created_dirs": ["../outside"]},
}


def test_a_state_damaged_where_a_later_step_reads_is_refused_up_front(checkout: Path, overlay: Path,
                                                                      run_patchset: Runner) -> None:
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    state_file = checkout / ".flashsac-overlay" / "state.json"
    good = json.loads(state_file.read_text())
    for key, damage in STATE_DAMAGE.items():
        state_file.write_text(json.dumps(damage(good)))
        before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
        for command in ("status", "apply", "revert"):
            one_line(run_patchset(command, "--unilab", str(checkout)), f"is corrupt: '{key}'")
            assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before, (key, command)
    state_file.write_text(json.dumps(good))
    assert run_patchset("revert", "--unilab", str(checkout)).returncode == 0  # the control: the undamaged state


def test_a_deleted_overlay_is_named_by_status_and_apply(checkout: Path, overlay: Path, run_patchset: Runner) -> None:
    """The overlay of an applied checkout deleted (wholly, or one package): status and apply say so in one line and
    what to do; the advice works."""
    pristine = tree_hashes(checkout)
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    applied = tree_hashes(checkout)
    shutil.rmtree(overlay / "unisim")
    for command in ("status", "apply"):
        one_line(run_patchset(command, "--unilab", str(checkout)), f"its overlay {overlay} lacks unisim")
    shutil.rmtree(overlay)
    for args in (["status"], ["status", "--json"], ["apply"]):
        proc = run_patchset(*args, "--unilab", str(checkout))
        one_line(proc, f"its overlay {overlay} is missing")
        assert "'revert'" in proc.stderr and tree_hashes(checkout) == applied and not overlay.exists()
    assert run_patchset("revert", "--unilab", str(checkout)).returncode == 0
    assert tree_hashes(checkout) == pristine
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0 and (overlay / "unisim").is_dir()


def test_an_overlay_no_checkout_uses_is_refused_with_what_to_delete(checkout: Path, overlay: Path,
                                                                    run_patchset: Runner) -> None:
    """An overlay whose manifest lists no checkout (another series, or its packages gone): the refusal says what to
    delete instead of sending the user to revert an empty list of checkouts."""
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    shutil.rmtree(checkout / ".flashsac-overlay")  # the state gone: nothing names this overlay's checkout any more
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=checkout, check=True)
    subprocess.run(["git", "clean", "-fdq"], cwd=checkout, check=True)  # the files the series added
    manifest_file = overlay / "MANIFEST.json"
    manifest = json.loads(manifest_file.read_text())
    manifest_file.write_text(json.dumps({**manifest, "owners": [], "files": {**manifest["files"], "uni_rl/x.py": "0"}}))
    proc = run_patchset("apply", "--unilab", str(checkout))
    one_line(proc, f"holds an overlay of another series or runtime/; no checkout uses it: delete "
                   f"{overlay / 'uni_rl'}, {overlay / 'unisim'}, {overlay / 'flashsac_runtime'}, {manifest_file}, "
                   "or choose another OVERLAY=")
    for package in ("uni_rl", "unisim", "flashsac_runtime"):
        shutil.rmtree(overlay / package)
    one_line(run_patchset("apply", "--unilab", str(checkout)), f"{manifest_file} remains but its packages are "
                                                               f"missing; no checkout uses it: delete {manifest_file},")


def project_with_versions(dest: Path, versions: bytes) -> Path:
    """A copy of the applier, its series and a VERSIONS.env of the test's own in a project folder dest (the applier
    reads those of its own project); returns the PYTHONPATH that runs it."""
    shutil.copytree(PROJECT / "scripts" / "patchset", dest / "scripts" / "patchset",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(PROJECT / "patches", dest / "patches")
    (dest / "VERSIONS.env").write_bytes(versions)
    return dest / "scripts"


#: VERSIONS.env damaged, the command run on it and what its one line must say.
BAD_VERSIONS = {
    "a key missing": (lambda text: b"".join(line for line in text.splitlines(True)
                                            if not line.startswith(b"UNILAB_COMMIT=")), "apply",
                      "VERSIONS.env has no UNILAB_COMMIT= line"),
    "empty": (lambda text: b"", "apply", "VERSIONS.env has no UNILAB_VERSION= line (the file is empty)"),
    "non-UTF-8 (apply)": (lambda text: text.replace(b"1.3.2", b"1.3.\xff", 1), "apply",
                          "VERSIONS.env:2 is not UTF-8 text (byte 0xff)"),
    "non-UTF-8 (status)": (lambda text: text.replace(b"1.3.2", b"1.3.\xff", 1), "status",
                           "VERSIONS.env:2 is not UTF-8 text (byte 0xff)"),
}


@pytest.mark.parametrize("damage", sorted(BAD_VERSIONS))
def test_a_damaged_versions_file_is_one_line(checkout: Path, overlay: Path, tmp_path: Path, damage: str) -> None:
    """A VERSIONS.env without a key the run reads, empty, or with non-UTF-8 bytes: one line naming the file and the
    key (or the line that is not UTF-8), exit 1 (not an internal error), nothing changed."""
    edit, command, needle = BAD_VERSIONS[damage]
    scripts = project_with_versions(tmp_path / "project", edit((PROJECT / "VERSIONS.env").read_bytes()))
    before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
    proc = patchset(overlay, command, "--unilab", str(checkout), "--patches", str(PROJECT / "patches"),
                    env={"PYTHONPATH": str(scripts)})
    one_line(proc, f"{tmp_path / 'project' / needle}")
    assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before


def edit_the_overlay(overlay: Path) -> dict[str, bytes | None]:
    """Change, add and delete files the series does not touch in the built uni_rl; returns what stands at each
    (None: deleted). unisim is left alone: a refusal must not name it."""
    init, mine = overlay / "uni_rl" / "__init__.py", overlay / "uni_rl" / "mine.py"
    seed = overlay / "uni_rl" / "utils" / "seed.py"
    with init.open("a") as handle:
        handle.write("# my note\n")
    mine.write_text("my own module\n")
    seed.unlink()
    return {"uni_rl/__init__.py": init.read_bytes(), "uni_rl/mine.py": mine.read_bytes(), "uni_rl/utils/seed.py": None}


#: edit_the_overlay's edits as a refusal names them.
EDIT_NAMES = "uni_rl:uni_rl/__init__.py, uni_rl:uni_rl/mine.py (added), uni_rl:uni_rl/utils/seed.py (deleted)"


def test_overlay_edits_are_named_refused_and_saved_by_force(checkout: Path, overlay: Path,
                                                            run_patchset: Runner) -> None:
    """Files changed, added or deleted in the built overlay after apply: status names them (no clean 'applied'),
    revert refuses up front in one line naming exactly them and changes nothing, and FORCE saves them as it saves
    a checkout's edits, then finishes."""
    pristine = tree_hashes(checkout)
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    edits = edit_the_overlay(overlay)
    status = run_patchset("status", "--unilab", str(checkout))
    assert status.returncode == 0 and f"EDITED since apply: {EDIT_NAMES};" in status.stdout, status.stdout[-2000:]
    for rel in edits:
        assert any(f"uni_rl:{rel}" in line and "edited" in line for line in status.stdout.splitlines()), rel
    before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
    one_line(run_patchset("revert", "--unilab", str(checkout)),
             f"refusing to revert: edited after apply: {EDIT_NAMES}; --force (FORCE=1) saves them")
    assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before
    forced = run_patchset("revert", "--unilab", str(checkout), "--force")
    assert forced.returncode == 0 and "overlay removed" in forced.stdout, forced.stderr
    (saved,) = checkout.glob(".flashsac-overlay-user-edits-*")
    for rel, data in edits.items():
        if data is not None:
            assert (saved / "files" / "uni_rl" / rel).read_bytes() == data
    assert "uni_rl:uni_rl/utils/seed.py had been deleted" in (saved / "README.txt").read_text()
    assert "+my own module" in (saved / "edits.diff").read_text()
    shutil.rmtree(saved)
    assert tree_hashes(checkout) == pristine and not (overlay / "uni_rl").exists() and not (overlay / "unisim").exists()


def test_overlay_edits_after_a_stopped_revert_do_not_wedge_it(checkout: Path, overlay: Path,
                                                               run_patchset: Runner) -> None:
    """A revert killed once it began (phase 'reverting'), then the overlay edited: the next apply or revert refuses in
    one line naming the edited files and changes nothing; revert with FORCE saves them and finishes."""
    pristine = tree_hashes(checkout)
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    stopped = run_patchset("revert", "--unilab", str(checkout), env={"PATCHSET_FAULT_AT": "4:kill"})
    assert stopped.returncode == -9
    assert json.loads((checkout / ".flashsac-overlay" / "state.json").read_text())["phase"] == "reverting"
    edit_the_overlay(overlay)
    before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
    one_line(run_patchset("revert", "--unilab", str(checkout)), f"edited after apply: {EDIT_NAMES}; --force")
    one_line(run_patchset("apply", "--unilab", str(checkout)),
             f"the overlay {overlay} was edited since it was built: {EDIT_NAMES}; 'revert' with --force")
    assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before
    forced = run_patchset("revert", "--unilab", str(checkout), "--force")
    assert forced.returncode == 0 and "completed an interrupted revert" in forced.stdout, forced.stderr
    (saved,) = checkout.glob(".flashsac-overlay-user-edits-*")
    assert (saved / "files" / "uni_rl" / "uni_rl" / "mine.py").read_text() == "my own module\n"
    shutil.rmtree(saved)
    assert tree_hashes(checkout) == pristine and not (overlay / "uni_rl").exists()


def test_a_damaged_or_deleted_overlay_manifest_is_named_by_status_and_apply(checkout: Path, overlay: Path,
                                                                           run_patchset: Runner) -> None:
    """An applied checkout whose overlay's MANIFEST.json is corrupt or gone: status and apply say so in one line
    (exit 1) and change nothing, rather than 'applied' and 'already applied'; the advice (revert) works."""
    pristine = tree_hashes(checkout)
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    manifest = overlay / "MANIFEST.json"
    manifest.write_text("{\n")
    for damage, needle in (("corrupt", f"{manifest} is corrupt"), ("deleted", f"its overlay manifest {manifest} is "
                                                                              "missing (deleted since?); 'revert'")):
        if damage == "deleted":
            manifest.unlink()
        before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
        for command in ("status", "apply"):
            one_line(run_patchset(command, "--unilab", str(checkout)), needle)
            assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before, (damage, command)
    reverted = run_patchset("revert", "--unilab", str(checkout))
    assert reverted.returncode == 0 and "overlay removed" in reverted.stdout, reverted.stderr
    assert tree_hashes(checkout) == pristine and not (overlay / "uni_rl").exists()


def test_an_overlay_among_the_projects_sources_or_in_the_journal_is_refused(checkout: Path, tmp_path: Path) -> None:
    """OVERLAY= the project's patches/ folder (whose MANIFEST.json the overlay's would be mistaken for), a new folder
    in another of its source folders, or the checkout's journal folder: one line naming the place and why, nothing
    created or changed."""
    project = tmp_path / "project"
    scripts = project_with_versions(project, (PROJECT / "VERSIONS.env").read_bytes())
    before, project_before = tree_hashes(checkout), tree_hashes(project)
    for place, why in ((project / "patches", "which holds this project's own files"),
                       (project / "docs" / "overlay", "which holds this project's own files"),
                       (checkout / ".flashsac-overlay", "where patchset keeps the journal of the checkout")):
        proc = patchset(place, "apply", "--unilab", str(checkout), env={"PYTHONPATH": str(scripts)})
        where = f"lies in {place.parent}" if place.name == "overlay" else f"is the folder {place}"
        one_line(proc, f"the overlay {place} {where}, {why}; choose another OVERLAY=")
        assert tree_hashes(checkout) == before and tree_hashes(project) == project_before, place
        assert not (project / "docs").exists() and not (checkout / ".flashsac-overlay").exists()


def test_a_hard_linked_patched_file_is_linked_again_after_revert(checkout: Path, run_patchset: Runner,
                                                                 tmp_path: Path) -> None:
    """A patched file with another name (a hard link, here outside the checkout): apply never writes through it,
    and revert puts the very same file back, linked as before; where its bytes were changed through the other
    name meanwhile, revert restores the pristine bytes as a file of its own and says so in one line."""
    config = checkout / CONFIG
    pristine = config.read_bytes()
    before = tree_hashes(checkout)
    other = tmp_path / "my-config-link.yaml"
    os.link(config, other)
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    assert config.read_bytes() != pristine and other.read_bytes() == pristine  # apply wrote no other name
    reverted = run_patchset("revert", "--unilab", str(checkout))
    assert reverted.returncode == 0 and "NOTE" not in reverted.stdout, reverted.stdout + reverted.stderr
    assert os.path.samefile(config, other) and config.stat().st_nlink == 2
    assert tree_hashes(checkout) == before
    # the other name edited while applied: the checkout still gets its pristine bytes, the other name keeps its own
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    other.write_bytes(b"mine\n")
    reverted = run_patchset("revert", "--unilab", str(checkout))
    assert reverted.returncode == 0, reverted.stderr
    notes = [line for line in reverted.stdout.splitlines() if line.startswith("NOTE")]
    assert len(notes) == 1 and CONFIG in notes[0] and "hard link" in notes[0], reverted.stdout
    assert config.read_bytes() == pristine and other.read_bytes() == b"mine\n"
    assert not os.path.samefile(config, other)
