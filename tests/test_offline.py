"""CPU tests of the offline GPU host path (scripts/offline/, `make wheelhouse`, `make ... OFFLINE=`).

A real wheelhouse is built from files already on this machine (the pinned unilab-rl 1.3.2 wheel in the download
cache, through pip with --no-index, and the G1 and Go2 asset archives CI keeps at ../shared/assets/), verified, tampered
with, and installed with pip into a private site folder. The full wheel set is not downloaded here (large, network).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import PROJECT, make

sys.path.insert(0, str(PROJECT / "scripts"))
sys.path.insert(0, str(PROJECT / "experiments" / "bench"))

import bench_env  # noqa: E402
from offline import OfflineError  # noqa: E402
from offline.wheellist import (  # noqa: E402
    REQUIREMENTS, WHEEL_LIST, check_agreement, disagreements, parse_pins, read_wheel_list)
from patchset.paths import cache_dir  # noqa: E402
from patchset.pins import load_pins  # noqa: E402
from test_readme import check_trained, paste, readme_commands  # noqa: E402  (the README's command, as it runs it)

ASSETS = PROJECT.parent / "shared" / "assets" / "unilab-1.3.2-g1-assets.tar.xz"  # test data, as CI has it
GO2_ASSETS = PROJECT.parent / "shared" / "assets" / "unilab-1.3.2-go2-assets.tar.xz"
#: ASSETS= of `make wheelhouse`: the G1 and the Go2 archives joined by ':'.
BOTH = f"{ASSETS}:{GO2_ASSETS}"
GO2_TASK = "go2_joystick_flat"  # the bench's name of the task
HERE_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
#: Files a user gets from the project: none may point at the lab's ../shared folder.
SHIPPED = ("README.md", "docs", "Makefile", "requirements.txt", "VERSIONS.env", "experiments", "scripts", "overlay")
UNREACHABLE = "http://127.0.0.1:9/simple"  # nothing listens on the discard port


def offline(*args: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m offline ...` as the Makefile runs it; pip resolves from the local cache only."""
    full_env = {**os.environ, "PYTHONPATH": str(PROJECT / "scripts"), "PATCHSET_CACHE": str(cache_dir()),
                "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(cache_dir()), **env}
    return subprocess.run([sys.executable, "-m", "offline", *args], env=full_env, capture_output=True, text=True,
                          timeout=600, check=False)


def one_line_error(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], proc.stderr


@pytest.fixture(scope="session")
def tiny_list(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    path = tmp_path_factory.mktemp("list") / "tiny-wheels.txt"
    path.write_text("# a wheel this machine has cached\nunilab-rl==1.3.2\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_list: Path) -> Path:
    """A real wheelhouse for this interpreter, built once by `python -m offline build`."""
    assert ASSETS.is_file() and GO2_ASSETS.is_file(), f"test data in {ASSETS.parent} is missing (CI keeps it there)"
    dest = tmp_path_factory.mktemp("built") / "wheelhouse"
    proc = offline("build", str(dest), "--python-version", HERE_PYTHON, "--assets", BOTH,
                   "--wheel-list", str(tiny_list))
    assert proc.returncode == 0, proc.stderr
    assert "1 wheels for CPython" in proc.stdout and "52 asset files (g1, go2)" in proc.stdout
    return dest


@pytest.fixture
def wheelhouse(tmp_path: Path, built: Path) -> Path:
    """A private copy each test may damage."""
    return Path(shutil.copytree(built, tmp_path / "wheelhouse"))


def test_wheel_list_agrees_with_versions_env_and_requirements() -> None:
    entries, pins = read_wheel_list(), load_pins()
    assert disagreements(entries, pins, parse_pins(REQUIREMENTS, allow_sdist=False)) == []
    listed = {e.key: e.version for e in entries}
    assert listed["unilab"] == pins["UNILAB_VERSION"] and listed["mujoco"] == pins["MUJOCO_VERSION"]
    # negative controls: a pin moved in VERSIONS.env, in requirements.txt, or a pinned project dropped
    moved = disagreements(entries, {**pins, "UNILAB_RL_VERSION": "1.3.2"}, [])
    assert moved == ["unilab-rl==1.4.0 but VERSIONS.env pins UNILAB_RL_VERSION=1.3.2"]
    reqs = parse_pins(REQUIREMENTS, allow_sdist=False)
    bumped = [r if r.key != "gitpython" else type(r)(r.name, "9.9.9", False) for r in reqs]
    assert disagreements(entries, pins, bumped) == ["GitPython==3.1.45 but requirements.txt pins GitPython==9.9.9"]
    assert "unisim-core is pinned" in disagreements([e for e in entries if e.key != "unisim-core"], pins, [])[0]
    # requirements.txt against VERSIONS.env directly, torch too (its PyPI 2.8.0 is the pinned 2.8.0+cu128)
    assert [r.version for r in reqs if r.key == "torch"] == ["2.8.0"]
    older = [r if r.key not in ("torch", "warp-lang") else type(r)(r.name, "1.0.0", False) for r in reqs]
    assert [p for p in disagreements(entries, pins, older) if p.startswith("requirements.txt pins")] == [
        "requirements.txt pins torch==1.0.0 but VERSIONS.env pins TORCH_VERSION=2.8.0+cu128",
        "requirements.txt pins warp-lang==1.0.0 but VERSIONS.env pins WARP_LANG_VERSION=1.16.0"]


def test_wheel_list_refuses_a_disagreeing_file(tmp_path: Path) -> None:
    bad = tmp_path / "list.txt"
    bad.write_text(WHEEL_LIST.read_text(encoding="utf-8").replace("mujoco==3.11.0", "mujoco==3.10.0"))
    with pytest.raises(OfflineError, match="mujoco==3.10.0 but VERSIONS.env pins MUJOCO_VERSION=3.11.0"):
        check_agreement(read_wheel_list(bad), load_pins())
    bad.write_text("unilab>=1.3\n")
    with pytest.raises(OfflineError, match="expected name==version"):
        read_wheel_list(bad)


def shared_references(paths: list[Path]) -> list[str]:
    hits = []
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        hits += [f"{path}:{n}" for n, line in enumerate(text.splitlines(), 1) if "shared/" in line]
    return hits


def test_no_shipped_file_points_at_the_labs_shared_folder(tmp_path: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *SHIPPED],
                            cwd=PROJECT, capture_output=True, text=True, check=True).stdout.split()
    files = [PROJECT / f for f in listed if (PROJECT / f).is_file()]
    assert any(f.name == "device_bench.sh" for f in files) and any(f.name == "README.md" for f in files)
    assert shared_references(files) == []
    planted = tmp_path / "doc.md"  # negative control: the scan finds such a reference
    planted.write_text("fetch the wheels with ../shared/device/fetch-wheels.sh\n")
    assert shared_references([planted]) == [f"{planted}:1"]


def test_wheelhouse_layout_and_manifest(built: Path) -> None:
    record = json.loads((built / "wheelhouse.json").read_text())
    assert record["python_version"] == HERE_PYTHON and record["wheel_list"] == ["unilab-rl==1.3.2"]
    assert sorted(record["files"]) == [
        "assets/unilab-1.3.2-g1-assets.tar.xz", "assets/unilab-1.3.2-go2-assets.tar.xz", "pinned/unilab-1.3.2.tar.gz",
        "pinned/unilab_rl-1.3.2-py3-none-any.whl", "pinned/unisim_core-1.7.8.tar.gz",
        "wheels/unilab_rl-1.3.2-py3-none-any.whl"]
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=built, capture_output=True, text=True)
    assert sums.returncode == 0 and sums.stdout.count(": OK") == 6


def test_verify_accepts_the_built_wheelhouse(wheelhouse: Path) -> None:
    proc = offline("verify", str(wheelhouse))
    assert proc.returncode == 0 and "6 files verified" in proc.stdout, proc.stderr


def test_tampered_wheel_is_refused_and_nothing_installed(wheelhouse: Path, tmp_path: Path) -> None:
    with (wheelhouse / "wheels" / "unilab_rl-1.3.2-py3-none-any.whl").open("ab") as handle:
        handle.write(b"\0")
    site = tmp_path / "site"
    proc = offline("install", str(wheelhouse), "--site", str(site))
    one_line_error(proc, "unilab_rl-1.3.2-py3-none-any.whl has sha256")
    assert not site.exists()


def test_missing_file_and_altered_sums_are_refused(wheelhouse: Path) -> None:
    archive = wheelhouse / "assets" / "unilab-1.3.2-g1-assets.tar.xz"
    archive.unlink()
    one_line_error(offline("verify", str(wheelhouse)), "unilab-1.3.2-g1-assets.tar.xz is missing")
    sums = wheelhouse / "SHA256SUMS"
    sums.write_text(sums.read_text().replace("pinned/unilab-1.3.2.tar.gz", "pinned/other.tar.gz"))
    one_line_error(offline("verify", str(wheelhouse)), "SHA256SUMS is missing or disagrees")
    one_line_error(offline("verify", str(wheelhouse / "wheels")), "is not a wheelhouse (no wheelhouse.json)")


def test_install_into_a_private_site_then_reuse(wheelhouse: Path, tiny_list: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    proc = offline("install", str(wheelhouse), "--site", str(site), "--wheel-list", str(tiny_list))
    assert proc.returncode == 0, proc.stderr
    assert "6 files verified" in proc.stdout and "installed 1 wheels" in proc.stdout
    assert (site / "uni_rl" / "__init__.py").is_file() and (site / ".wheelhouse-installed").is_file()
    # the site's modules were compiled (pip ran with --no-compile): Python imports them without compiling
    assert "Python bytecode:" in proc.stdout and str(site) in proc.stdout, proc.stdout
    assert Path(importlib.util.cache_from_source(str(site / "uni_rl" / "__init__.py"))).is_file()
    again = offline("install", str(wheelhouse), "--site", str(site), "--wheel-list", str(tiny_list))
    assert again.returncode == 0 and "already installed" in again.stdout, again.stderr
    # negative controls: a wheelhouse for another Python, one from another list, a foreign site folder
    record = json.loads((wheelhouse / "wheelhouse.json").read_text())
    (wheelhouse / "wheelhouse.json").write_text(json.dumps({**record, "python_version": "3.99"}))
    one_line_error(offline("install", str(wheelhouse), "--site", str(site), "--wheel-list", str(tiny_list)),
                   f"the wheelhouse is for Python 3.99, {sys.executable} is {HERE_PYTHON}")
    (wheelhouse / "wheelhouse.json").write_text(json.dumps(record))
    one_line_error(offline("install", str(wheelhouse), "--site", str(site)), "built from another wheel list")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    one_line_error(offline("install", str(wheelhouse), "--site", str(foreign), "--wheel-list", str(tiny_list)),
                   "was not made from a wheelhouse")
    assert [p.name for p in foreign.iterdir()] == ["keep.txt"]


def test_wheelhouse_assets_complete_the_g1_and_go2_scenes(built: Path, tmp_path: Path,
                                                          pristine_template: Path) -> None:
    tree = Path(shutil.copytree(pristine_template, tmp_path / "unilab", symlinks=True))
    g1, go2 = (built / "assets" / f"unilab-1.3.2-{robot}-assets.tar.xz" for robot in ("g1", "go2"))
    assert bench_env.missing_assets(tree)  # the sdist alone lacks the meshes
    bench_env.ensure_assets(tree, g1)
    assert bench_env.missing_assets(tree) == []
    assert bench_env.missing_assets(tree, GO2_TASK)  # control: G1's archive holds none of Go2's meshes
    bench_env.ensure_assets(tree, go2, task=GO2_TASK)
    assert bench_env.missing_assets(tree, GO2_TASK) == []


def seed_assets(wheelhouse: Path, tree: Path) -> subprocess.CompletedProcess:
    return offline("seed-assets", str(wheelhouse), "--tree", str(tree))


def test_seed_assets_fills_the_tree_once_and_never_overwrites(wheelhouse: Path, tmp_path: Path,
                                                             pristine_template: Path) -> None:
    """`make apply OFFLINE=`'s last step: every asset archive of the wheelhouse, sha256-checked, into the tree."""
    tree = Path(shutil.copytree(pristine_template, tmp_path / "unilab", symlinks=True))
    assert bench_env.missing_assets(tree)  # control: without the seeding the meshes are absent
    proc = seed_assets(wheelhouse, tree)
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1, proc.stderr
    assert "52 files put into" in proc.stdout and "0 already there" in proc.stdout
    assert bench_env.missing_assets(tree) == []
    again = seed_assets(wheelhouse, tree)  # idempotent
    assert again.returncode == 0 and "0 files put into" in again.stdout and "52 already there" in again.stdout
    # a file of the user's with other bytes: one line naming it, nothing written (a removed mesh stays removed)
    mesh = tree / "src" / "unilab" / "assets" / "robots" / "g1" / "assets" / "head_link.STL"
    mesh.write_bytes(b"mine")
    removed = mesh.with_name("pelvis.STL")
    removed.unlink()
    one_line_error(seed_assets(wheelhouse, tree), f"{mesh} differs from unilab-1.3.2-g1-assets.tar.xz's copy")
    assert mesh.read_bytes() == b"mine" and not removed.exists()
    mesh.unlink()
    # an archive whose bytes are not the recorded ones is refused before anything is written
    with (wheelhouse / "assets" / "unilab-1.3.2-g1-assets.tar.xz").open("ab") as handle:
        handle.write(b"\0")
    one_line_error(seed_assets(wheelhouse, tree), "unilab-1.3.2-g1-assets.tar.xz has sha256")
    assert not mesh.exists() and not removed.exists()


def test_build_refuses_bad_assets_and_a_foreign_destination(tmp_path: Path, tiny_list: Path) -> None:
    dest = tmp_path / "wheelhouse"
    args = ("--python-version", HERE_PYTHON, "--wheel-list", str(tiny_list))
    one_line_error(offline("build", str(dest), *args, "--assets", str(tmp_path / "none.tar.xz")), "does not exist")
    partial = tmp_path / "partial.tar.xz"
    with tarfile.open(ASSETS) as full, tarfile.open(partial, "w:xz") as out:
        member = next(m for m in full.getmembers() if m.name.endswith("floor.png"))
        out.addfile(member, full.extractfile(member))
    one_line_error(offline("build", str(dest), *args, "--assets", f"{partial}:{GO2_ASSETS}"),
                   "lack robots/g1/assets/head_link.STL")
    one_line_error(offline("build", str(dest), *args, "--assets", str(ASSETS)), "lack robots/go2/assets/base_0.obj")
    one_line_error(offline("build", str(dest), *args, "--assets", f"{ASSETS}:{tmp_path / 'none.tar.xz'}"),
                   "none.tar.xz does not exist")
    (tmp_path / "notes.tar.xz").write_text("not an archive")
    one_line_error(offline("build", str(dest), *args, "--assets", f"{tmp_path / 'notes.tar.xz'}:{ASSETS}"),
                   "notes.tar.xz is neither a folder nor a tar archive")
    assert not dest.exists()
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    one_line_error(offline("build", str(dest), *args, "--assets", BOTH), "exists and is not a wheelhouse")
    assert [p.name for p in dest.iterdir()] == ["notes.txt"]
    one_line_error(offline("build", str(dest), "--python-version", "twelve"), "PYTHON_VERSION='twelve'")


def test_make_setup_offline_verifies_then_installs(wheelhouse: Path, tmp_path: Path) -> None:
    """`make <target> OFFLINE=...` (here: setup, what bench runs first) on the host's python3, no venv."""
    site = tmp_path / "site"
    with (wheelhouse / "pinned" / "unilab-1.3.2.tar.gz").open("ab") as handle:
        handle.write(b"\0")
    proc = make("setup", f"OFFLINE={wheelhouse}", f"OFFLINE_SITE={site}", f"PYTHON={sys.executable}")
    assert proc.returncode != 0 and not site.exists()
    errors = [line for line in proc.stderr.splitlines() if line.startswith("offline install: error:")]
    assert len(errors) == 1 and "unilab-1.3.2.tar.gz has sha256" in errors[0], proc.stderr


def test_make_offline_points_everything_at_the_wheelhouse(built: Path, tmp_path: Path) -> None:
    """The Makefile's OFFLINE wiring: interpreter, site on PYTHONPATH, pinned cache, assets, no Hugging Face."""
    names = ("PY", "PYTHONPATH", "PATCHSET_CACHE", "UNILAB_ASSETS", "HF_HUB_OFFLINE")
    proc = make("-s", "--eval", "print-%: ; @echo $($*)", *(f"print-{n}" for n in names),
                f"OFFLINE={built}", f"OFFLINE_SITE={tmp_path / 'site'}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "python3", str(tmp_path / "site"), str(built / "pinned"),
        f"{built / 'assets' / 'unilab-1.3.2-g1-assets.tar.xz'}:{built / 'assets' / 'unilab-1.3.2-go2-assets.tar.xz'}",
        "1"]
    plain = make("-s", "--eval", "print-%: ; @echo $($*)", "print-PY", "print-PATCHSET_CACHE")
    assert plain.stdout.splitlines() == [".venv/bin/python", str(cache_dir())]  # negative control: the venv


def test_make_wheelhouse_checks_the_list_then_the_assets(tmp_path: Path) -> None:
    proc = make("wheelhouse", f"WHEELHOUSE={tmp_path / 'wh'}", f"ASSETS={tmp_path / 'none.tar.xz'}")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("offline build: error:")]
    assert proc.returncode != 0 and len(errors) == 1 and "does not exist" in errors[0], proc.stdout + proc.stderr
    assert not (tmp_path / "wh").exists()


def project_copy(dest: Path) -> Path:
    """The project as a user copies it to the GPU host: its files without .venv/, .cache/ or build outputs (and
    without the committed results, which nothing there reads)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=PROJECT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for rel in listed:
        if not rel.startswith("results/") and (PROJECT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT / rel, dest / rel)
    return dest


def offline_apply(built: Path, tiny_list: Path, tmp_path: Path
                  ) -> tuple[Path, subprocess.CompletedProcess, tuple[str, ...], dict[str, str]]:
    """The README's GPU host: project and wheelhouse copied, no venv, no cache, the package index unreachable,
    then `make apply OFFLINE=wheelhouse ALLOW_DRIFT=1`: the host project, the apply, its make flags and env."""
    host = project_copy(tmp_path / "host-project")
    shutil.copytree(built, host / "wheelhouse")
    (tmp_path / "no-links").mkdir()
    offline_host = {"PATCHSET_INDEX_URL": UNREACHABLE, "PIP_INDEX_URL": UNREACHABLE,
                    "PIP_FIND_LINKS": str(tmp_path / "no-links"), "PATCHSET_CACHE": str(tmp_path / "no-cache")}
    flags = ("OFFLINE=wheelhouse", f"WHEEL_LIST={tiny_list}", f"PYTHON={sys.executable}")
    applied = make("apply", *flags, "ALLOW_DRIFT=1", cwd=host, **offline_host)
    assert applied.returncode == 0, applied.stdout[-2000:] + applied.stderr
    return host, applied, flags, offline_host


def test_offline_host_applies_in_a_copied_project(built: Path, tiny_list: Path, tmp_path: Path) -> None:
    """The README's GPU host: `make apply OFFLINE=wheelhouse ALLOW_DRIFT=1` builds the whole overlay from the
    wheelhouse alone, and seeds the tree with its G1 and Go2 assets."""
    host, applied, flags, offline_host = offline_apply(built, tiny_list, tmp_path)
    assert (host / "overlay" / "uni_rl" / "__init__.py").is_file()
    assert (host / "overlay" / "unisim" / "__init__.py").is_file()
    # the host trains as it benchmarks: the wheelhouse's G1 meshes are in the applied tree, and apply says so
    assert bench_env.missing_assets(host / "work" / "unilab-1.3.2") == []
    seeded = [line for line in applied.stdout.splitlines() if line.startswith("assets: ")]
    assert len(seeded) == 1 and "52 files put into" in seeded[0] and "sha256 verified" in seeded[0], applied.stdout
    # and compiles G1 motion tracking's Numba kernels there, this host's machine code (tests/test_motion_device_env.py:
    # a run then compiles none)
    numba = [line for line in applied.stdout.splitlines() if line.startswith("G1 motion tracking's Numba kernels: ")]
    assert len(numba) == 1 and "7 compiled into" in numba[0], applied.stdout
    status = make("status", *flags, cwd=host, **offline_host)
    assert status.returncode == 0 and "work/unilab-1.3.2: applied" in status.stdout, status.stderr
    assert not (tmp_path / "no-cache").exists()


@pytest.mark.extended  # a CPU training run on top of the apply; the default test above checks the tree's meshes
def test_the_readme_training_command_trains_on_the_offline_applied_tree(built: Path, tiny_list: Path,
                                                                          tmp_path: Path) -> None:
    """The README's MuJoCo Warp command (as tests/test_readme.py runs it: short, headless, Warp's CPU device), pasted
    in the tree `make apply OFFLINE=` left, with Hugging Face out of reach: the meshes come from the wheelhouse. The
    interpreter is the project's venv (the README's; the small wheelhouse here holds no torch)."""
    host, *_ = offline_apply(built, tiny_list, tmp_path)
    (host / ".venv").symlink_to(PROJECT / ".venv")
    run = tmp_path / "run"
    run.mkdir()
    proc = paste(host, readme_commands()["g1_walk_flat/mjwarp"], run, UNISIM_MJWARP_ALLOW_CPU="1",
                 HF_HUB_OFFLINE="1")
    check_trained(proc, run)


def test_make_wheelhouse_builds_from_the_given_wheel_list(tiny_list: Path, tmp_path: Path) -> None:
    """WHEEL_LIST= reaches the build: only the given list is fetched (here from the local cache alone)."""
    dest = tmp_path / "wh"
    proc = make("wheelhouse", f"WHEELHOUSE={dest}", f"WHEEL_LIST={tiny_list}", f"ASSETS={BOTH}",
                f"PYTHON_VERSION={HERE_PYTHON}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert json.loads((dest / "wheelhouse.json").read_text())["wheel_list"] == ["unilab-rl==1.3.2"]
