"""`make wheelhouse`: everything an offline GPU host needs, into one folder, every file sha256-recorded.

Layout: wheels/ (the list, for the host's Python and manylinux x86_64), pinned/ (the pinned UniLab sdist,
unilab-rl base wheel and unisim-core sdist, which the applier and the bench read through PATCHSET_CACHE),
assets/ (one .tar.xz per robot, G1's and Go2's meshes, laid out like src/unilab/assets/), warp-kernels/ (MuJoCo
Warp's CUDA kernels for the task owners, G1 Walk Flat and Go2 Joystick Flat, built from the applied tree with those
archives unpacked: warp_kernels.py says why; only when the list holds warp-lang),
compile-artifacts/ (the learner's, built on a GPU host: compile_artifacts.py; only when given), wheelhouse.json and
SHA256SUMS. It is
built in a temporary sibling folder and renamed into place, so a failed build leaves the previous wheelhouse as it
was.
"""

from __future__ import annotations

import datetime
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.api import OVERLAY_DIR, PINNED_ARTIFACTS, PatchsetError, embedded_tree, load_pins, pinned_artifact, status

from . import OfflineError, assets, compile_artifacts, manifest, warp_kernels
from .wheellist import Entry, canonical, check_agreement, read_wheel_list

#: The GPU host's platform: x86_64 Linux; pip picks the newest manylinux wheel each project offers among these.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64")


def python_version(text: str) -> str:
    """'3.12' from '3.12' or '3.12.7' (images export PYTHON_VERSION with the patch level)."""
    match = re.fullmatch(r"(3)\.(\d+)(?:\.\d+)?", text.strip())
    if not match:
        raise OfflineError(f"PYTHON_VERSION={text!r}: expected 3.X (the GPU host's Python, e.g. 3.12)")
    return f"{match.group(1)}.{match.group(2)}"


def _pip(args: list[str], what: str) -> None:
    print(f"[wheelhouse] {what}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if proc.returncode != 0:
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        reason = next((line for line in reversed(lines) if "ERROR" in line), lines[-1] if lines else "no output")
        raise OfflineError(f"pip could not {what} (exit {proc.returncode}): {reason.strip()}")


def _wheel_key(filename: str) -> tuple[str, str, str]:
    """(normalized name, version, tags) of a wheel filename."""
    parts = filename[: -len(".whl")].split("-")
    return canonical(parts[0]), parts[1], "-".join(parts[-3:])


def fetch_wheels(entries: list[Entry], dest: Path, version: str) -> list[str]:
    """Download (binary only, host-tagged) or build (source-only, must be pure) every entry; returns the files."""
    dest.mkdir(parents=True)
    binary = [e.spec for e in entries if not e.from_sdist]
    source = [e.spec for e in entries if e.from_sdist]
    platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    if binary:
        _pip(["download", "--no-deps", "--only-binary=:all:", "--python-version", version, "--implementation",
              "cp", *platforms, "--dest", str(dest), *binary], f"download {len(binary)} wheels for CPython {version}")
    if source:
        _pip(["wheel", "--no-deps", "--wheel-dir", str(dest), *source], f"build {', '.join(source)} from source")
    files = sorted(p.name for p in dest.iterdir())
    by_key = {_wheel_key(f)[:2]: f for f in files if f.endswith(".whl")}
    for entry in entries:
        name = by_key.get((entry.key, entry.version))
        if name is None:
            raise OfflineError(f"pip produced no wheel for {entry.spec} in {dest}")
        if entry.from_sdist and not _wheel_key(name)[2].endswith("-none-any"):
            raise OfflineError(f"{name} (built from source) is not pure Python: it would not run on the host")
    extra = sorted(set(files) - {by_key[(e.key, e.version)] for e in entries})
    if extra:
        raise OfflineError(f"pip left files beyond the list in {dest}: {', '.join(extra)}")
    return files


def copy_pinned(dest: Path, pins: dict[str, str]) -> None:
    """Every pinned artifact an apply reads (the UniLab sdist, the unilab-rl base wheel, the unisim-core sdist),
    through the applier's verified cache/download: the host applies with these as its only cache."""
    dest.mkdir(parents=True)
    for name_key, sha_key in PINNED_ARTIFACTS:
        try:
            verified = pinned_artifact(pins[name_key], pins[sha_key])
        except PatchsetError as exc:
            raise OfflineError(str(exc)) from exc
        shutil.copy2(verified, dest / pins[name_key])


def _replace(built: Path, dest: Path) -> None:
    """Rename the finished build into place; an existing dest must itself be a wheelhouse (or empty)."""
    if dest.exists():
        if dest.is_dir() and any(dest.iterdir()) and not (dest / manifest.MANIFEST).is_file():
            raise OfflineError(f"{dest} exists and is not a wheelhouse: remove it or choose another WHEELHOUSE=")
        if dest.is_dir():
            shutil.rmtree(dest)
        else:
            dest.unlink()
    built.rename(dest)


@dataclass(frozen=True)
class WarpKernels:
    """Where the task owners' Warp kernels are built from (the applied tree) and for what (each owner's own
    default world count is added to ``worlds``)."""

    tree: Path | None = None  # None: the applier's embedded tree (its overlay is the project's)
    worlds: tuple[int, ...] = warp_kernels.WORLDS
    archs: tuple[int, ...] = warp_kernels.ARCHS


def _applied_tree(options: WarpKernels) -> tuple[Path, Path, str]:
    """The tree and overlay the Warp kernels are built from, with the series applied (checked before the wheels
    are downloaded), and the series' sha256."""
    tree = (options.tree or embedded_tree()).resolve()
    overlay = OVERLAY_DIR.resolve()
    try:
        state = status(tree, overlay)
    except (PatchsetError, OSError) as exc:
        raise OfflineError(f"MuJoCo Warp's kernels are built from the applied tree ({exc}): run `make apply "
                           f"wheelhouse`, or give a WHEEL_LIST without warp-lang") from exc
    if state.get("phase") != "applied" or state.get("series_sha256") != state.get("project_series_sha256"):
        raise OfflineError(f"MuJoCo Warp's kernels are built from the applied tree and {tree} is "
                           f"{state.get('phase')}: run `make apply wheelhouse`, or give a WHEEL_LIST without warp-lang")
    return tree, overlay, str(state["series_sha256"])


def _build_warp_kernels(dest: Path, options: WarpKernels, applied: tuple[Path, Path, str],
                        assets_archives: list[Path], entries: list[Entry]) -> dict:
    """The task owners' Warp kernels into dest, from the applied tree with the robots' asset archives unpacked;
    their record for the manifest (the tasks and the world counts each was planned at)."""
    warp = next((e for e in entries if e.key == "warp-lang"), None)
    tree, overlay, series = applied
    print(f"[wheelhouse] MuJoCo Warp's CUDA kernels for {', '.join(warp_kernels.TASKS)} ("
          f"{', '.join(map(str, options.worlds))} worlds and each task's own default, sm_"
          f"{', sm_'.join(map(str, options.archs))})", flush=True)
    record = warp_kernels.build(dest, tree, overlay, assets_archives, worlds=options.worlds, archs=options.archs)
    if warp is not None and record["warp_version"] != warp.version:
        raise OfflineError(f"the kernels were built with warp-lang {record['warp_version']}, the wheel list holds "
                           f"{warp.version}: build the wheelhouse in a venv with the listed warp-lang")
    return {"warp_version": record["warp_version"], "tasks": record["tasks"], "archs": record["archs"],
            "output": record["output"], "modules": len(record["modules"]), "series_sha256": series}


def _copy_compile_artifacts(source: Path, dest: Path) -> dict:
    """The learner's compile artifacts built on a GPU host (``make compile-artifacts``), checked against their
    record and copied; their record for the manifest."""
    record = compile_artifacts.load(source)
    dest.mkdir(parents=True)
    for name in (*record["files"], compile_artifacts.RECORD):
        shutil.copyfile(source / name, dest / name)
    return {key: record[key] for key in ("torch", "triton", "cuda", "gpu", "arch", "settings")}


def build(dest: Path, version: str, assets_sources: Sequence[Path], wheel_list: Path | None = None,
          kernels: WarpKernels | None = None, artifacts: Path | None = None) -> list[str]:
    """Build the wheelhouse at dest (with the learner's compile artifacts from ``artifacts``, when given);
    returns the lines to print. ``assets_sources``: the robots' asset archives or folders (ASSETS=, in order);
    none: UniLab's download."""
    version = python_version(version)
    pins = load_pins()
    entries = read_wheel_list(wheel_list) if wheel_list else read_wheel_list()
    if wheel_list is None:
        check_agreement(entries, pins)
    kernels = kernels or WarpKernels()
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}-building-", dir=dest.parent) as tmp:
        work = Path(tmp) / "wheelhouse"
        work.mkdir()
        print(f"[wheelhouse] {', '.join(assets.ROBOTS)} assets from "
              + (":".join(map(str, assets_sources)) if assets_sources else "Hugging Face"), flush=True)
        asset_source, asset_files = assets.collect(work / assets.FOLDER, pins["UNILAB_VERSION"], assets_sources)
        applied = _applied_tree(kernels) if any(e.key == "warp-lang" for e in entries) else None
        artifact_record = (None if artifacts is None else
                           _copy_compile_artifacts(artifacts.resolve(), work / compile_artifacts.FOLDER))
        wheels = fetch_wheels(entries, work / "wheels", version)
        copy_pinned(work / "pinned", pins)
        archives = [work / assets.FOLDER / assets.archive_name(pins["UNILAB_VERSION"], robot)
                    for robot in assets.ROBOTS]
        kernel_record = (None if applied is None else
                         _build_warp_kernels(work / warp_kernels.FOLDER, kernels, applied, archives, entries))
        digest = manifest.write(work, {
            "warp_kernels": kernel_record,
            "compile_artifacts": artifact_record,
            "python_version": version,
            "platforms": list(PLATFORMS),
            "wheel_list": [e.spec for e in entries],
            "assets_source": asset_source,
            "unilab_version": pins["UNILAB_VERSION"],
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        })
        size = sum(p.stat().st_size for p in work.rglob("*") if p.is_file())
        _replace(work, dest)
    return [
        f"wheelhouse {dest}: {len(wheels)} wheels for CPython {version}, {asset_files} asset files ("
        f"{', '.join(assets.ROBOTS)}), "
        f"{len(PINNED_ARTIFACTS)} pinned files, "
        + (f"{kernel_record['modules']} Warp kernel modules, " if kernel_record else "")
        + (f"compile artifacts for torch {artifact_record['torch']} on {artifact_record['gpu']}, "
           if artifact_record else "")
        + f"{size / 2**20:.1f} MiB",
        f"{manifest.MANIFEST} sha256 {digest} (compare it on the GPU host: `make bench OFFLINE=...` prints it)",
    ]
