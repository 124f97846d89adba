"""The benchmark's view of its surroundings: pins, applied state, assets, CUDA, versions.

Everything here is checked *before* a long GPU run starts, because a benchmark that
runs for an hour on the wrong learner, without assets or on a CPU is worse than one
that refuses in a second. Kept apart from the run logic so the checks are testable
on a CPU-only machine.

Imported by every bench module and by the learner studies (pins, drift: one reader for the
project); ``bench_env.py path NAME`` prints the paths the device scripts read (``PATHS``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT_DIR / "scripts"))
from patchset import api  # noqa: E402  (the applier's public API: pins, paths, status)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_configs  # noqa: E402  (the task table: scenes, motion clips)

BENCH_DIR = Path(__file__).resolve().parent
HOOK_DIR = BENCH_DIR / "hook"
OVERLAY_DIR = PROJECT_DIR / "overlay"
PINS = api.load_pins()
#: The applier's embedded tree (``make apply`` without UNILAB=): work/unilab-<UNILAB_VERSION>.
DEFAULT_UNILAB_ROOT = api.embedded_tree()
#: Where the bench keeps the pristine references' inputs (git-ignored work/bench/), named by their pins.
BASELINE_UNI_RL_DIR = PROJECT_DIR / "work" / "bench" / f"unilab-rl-{PINS['UNILAB_RL_BASE_VERSION']}"
PRISTINE_TREE_DIR = PROJECT_DIR / "work" / "bench" / f"unilab-{PINS['UNILAB_VERSION']}-pristine"
#: The paths the device scripts read (``bench_env.py path NAME``), relative to the project.
PATHS = {"unilab-tree": DEFAULT_UNILAB_ROOT, "baseline-uni-rl": BASELINE_UNI_RL_DIR, "pristine-tree": PRISTINE_TREE_DIR}
TRAIN_SCRIPT_REL = Path("src/unilab/scripts/train_flashsac.py")
FLASHSAC_CONFIG_REL = Path("src/unilab/conf/flashsac/config.yaml")
#: The G1 Walk Flat task names its scene relative to the UniLab root (see NOTES.md).
G1_SCENE_REL = Path("src/unilab/assets/robots/g1/scene_flat.xml")
ASSETS_REL = Path("src/unilab/assets")

#: VERSIONS.env key -> distribution name, for the drift record (the applier's installed-version pins).
PINNED_DISTRIBUTIONS = {key: dist for dist, key in api.INSTALLED_PINS.items()}
#: The same for UniLab's mjwarp extra: compared only for runs on MJWarp (a MuJoCo run does not need it).
MJWARP_DISTRIBUTIONS = {key: dist for dist, key in api.GPU_PHYSICS_PINS.items()}
#: Physics backends the benchmark runs: the collector's CPU MuJoCo, or MuJoCo Warp on the GPU.
SIMS = ("mujoco", "mjwarp")


class BenchSetupError(RuntimeError):
    """A precondition of a benchmark run is not met; the message says which and how to fix it."""


def runtime_drift(pins: dict[str, str], torch_version: str, device: str | None) -> dict[str, str | None]:
    """This process's torch and GPU against the pins (None where they match; device None: not compared).

    For the validation reports, which run outside UniLab and so have no distribution
    versions beyond torch to compare.
    """
    torch_pin, gpu_pin = pins.get("TORCH_VERSION"), pins.get("REFERENCE_GPU")
    return {
        "torch": None if torch_version == torch_pin else f"pinned {torch_pin}, ran {torch_version}",
        "device": None if device is None or device == gpu_pin else f"reference {gpu_pin}, ran {device}",
    }


def cuda_mps_state() -> str | None:
    """Whether a CUDA MPS control daemon serves this host: "on", "off", or None where the tool is absent.

    With the daemon running, the collector (Warp) and the learner (torch) run as clients of one MPS server and
    share the GPU instead of time-slicing between two contexts, which changes the figures; every run records it.
    """
    tool = shutil.which("nvidia-cuda-mps-control")
    if tool is None:
        return None
    try:
        probe = subprocess.run([tool], input="get_server_list\n", capture_output=True, text=True, timeout=10,
                               check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "off"
    return "on" if probe.returncode == 0 else "off"


def require_sim(sim: str) -> None:
    """MJWarp runs need UniLab's mjwarp extra importable here; say so before any GPU minute is spent."""
    if sim == "mjwarp" and any(importlib.util.find_spec(m) is None for m in ("mujoco_warp", "warp")):
        raise BenchSetupError("SIM=mjwarp needs mujoco-warp and warp-lang (VERSIONS.env MUJOCO_WARP_VERSION, "
                              "WARP_LANG_VERSION; `make setup` installs them, the offline wheelhouse carries them)")


def version_drift(found: dict[str, str | None], pins: dict[str, str], *, sim: str = "mujoco") -> dict[str, dict[str, str | None]]:
    """Distributions whose installed version differs from the pin (e.g. the GPU machine's torch).

    Recorded, not fatal: the lent machine has its own torch, and the report must say so
    next to the numbers rather than refuse to produce them.
    """
    drift: dict[str, dict[str, str | None]] = {}
    compared = {**PINNED_DISTRIBUTIONS, **(MJWARP_DISTRIBUTIONS if sim == "mjwarp" else {})}
    for key, dist in compared.items():
        if key not in pins:
            continue
        have = found.get(dist)
        if have != pins[key]:
            drift[dist] = {"pinned": pins[key], "found": have}
    return drift


def require_cuda() -> dict[str, Any]:
    """GPU facts of this process; raises BenchSetupError when CUDA is unusable.

    The benchmark measures a CUDA learner: a CPU fallback would produce numbers that
    look like results and mean nothing.
    """
    try:
        import torch
    except Exception as exc:
        raise BenchSetupError(f"CUDA is required but torch cannot be imported ({exc})") from exc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        available = torch.cuda.is_available()
    if not available:
        raise BenchSetupError(
            f"CUDA is required: torch {torch.__version__} sees no usable CUDA device "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})"
        )
    index = torch.cuda.current_device()
    return {
        "cuda": True,
        "gpu": torch.cuda.get_device_name(index),
        "capability": list(torch.cuda.get_device_capability(index)),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
    }


def patchset_status(unilab_root: Path | None = None, overlay: Path | None = None) -> dict[str, Any]:
    """The applier's status of this tree (what ``python -m patchset status --json`` prints); raises if it cannot answer."""
    try:
        return api.status(unilab_root, overlay)
    except (api.PatchsetError, OSError) as exc:
        raise BenchSetupError(f"the applier's status failed: {' '.join(str(exc).split())}") from exc


def require_applied(status: dict[str, Any]) -> str:
    """The series sha256 of a fully applied tree; raises when the series is not (all) applied.

    ``status`` reports the series' sha256 whether or not it is applied, so the phase and
    every patch's state are what prove the measured tree is the patched one.
    """
    phase = status.get("phase")
    pending = [p.get("name") for p in status.get("patches", []) if p.get("status") != "applied"]
    if phase != "applied" or pending:
        raise BenchSetupError(
            f"the series is not applied to {status.get('checkout')} (phase: {phase}; "
            f"not applied: {', '.join(map(str, pending)) or 'none'}): run `make apply UNILAB=...` or pass --apply"
        )
    sha = status.get("series_sha256")
    if not sha:
        raise BenchSetupError("`python -m patchset status --json` reports no series_sha256")
    return str(sha)


def scene_asset_files(scene: Path) -> list[Path]:
    """Every file a MuJoCo scene references (meshes, textures, ...), following <include>.

    Read from the tree's own XML so the check follows the scene rather than a list
    maintained here.
    """
    files: list[Path] = []
    seen: set[Path] = set()

    def visit(xml_path: Path, meshdir: Path, texturedir: Path) -> None:
        xml_path = xml_path.resolve()
        if xml_path in seen:
            return
        seen.add(xml_path)
        root = ET.parse(xml_path).getroot()
        base = xml_path.parent
        compiler = root.find("compiler")
        if compiler is not None:
            if compiler.get("meshdir"):
                meshdir = base / compiler.get("meshdir", "")
            if compiler.get("texturedir"):
                texturedir = base / compiler.get("texturedir", "")
        for element in root.iter():
            file = element.get("file")
            if not file:
                continue
            if element.tag == "include":
                visit(base / file, meshdir, texturedir)
            elif element.tag == "mesh":
                files.append(meshdir / file)
            elif element.tag in ("texture", "hfield", "skin"):
                files.append(texturedir / file)
            else:
                files.append(base / file)

    visit(scene, scene.parent, scene.parent)
    return files


def task_scene(task: str) -> Path:
    """The MuJoCo scene of a bench task, relative to the tree's root (``bench_configs.TASKS``)."""
    entry = bench_configs.TASKS.get(task)
    if entry is None:
        raise BenchSetupError(str(bench_configs.task_refusal(task)))
    return Path(entry.scene)


def missing_assets(unilab_root: Path, task: str = bench_configs.DEFAULT_TASK) -> list[Path]:
    """Referenced asset files of the task's scene absent from the tree (UniLab would try Hugging Face for them)."""
    scene = unilab_root / task_scene(task)
    if not scene.is_file():
        raise BenchSetupError(f"{scene} is missing: {unilab_root} is not a UniLab {PINS['UNILAB_VERSION']} tree")
    return [p for p in scene_asset_files(scene) if not p.is_file()]


def seed_assets(unilab_root: Path, source: Path) -> int:
    """Copy an offline asset set (a folder or .tar.xz laid out like src/unilab/assets/) in.

    Returns how many files were written. Existing files are left alone: the tree's own
    files win over a seed.
    """
    dest = unilab_root / ASSETS_REL
    written = 0
    if source.is_dir():
        for path in sorted(source.rglob("*")):
            if path.is_file():
                target = dest / path.relative_to(source)
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)
                    written += 1
        return written
    if not tarfile.is_tarfile(source):
        raise BenchSetupError(f"UNILAB_ASSETS={source} is neither a folder nor a tar archive")
    with tarfile.open(source) as archive:
        for member in archive.getmembers():
            if not member.isfile():
                continue
            target = (dest / member.name).resolve()
            if dest.resolve() not in target.parents:
                raise BenchSetupError(f"{source}: member {member.name} escapes the assets folder")
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            extracted = archive.extractfile(member)
            assert extracted is not None
            target.write_bytes(extracted.read())
            written += 1
    return written


def asset_sources(source: Path | str | None) -> list[Path]:
    """UNILAB_ASSETS / --assets: one folder or .tar.xz, or several joined by the path separator (``:``), e.g. the
    G1 and the Go2 archives."""
    return [Path(part) for part in str(source).split(os.pathsep) if part] if source else []


def motion_clip(unilab_root: Path, task: str, synthesize: bool = False) -> dict[str, Any] | None:
    """The motion clip a task tracks, as the run's record (path, sha256, whether synthetic), or None for a task
    without one. UniLab downloads a missing clip from Hugging Face at the env's start; the bench refuses before
    that in one line, or, with ``synthesize``, writes the synthetic clip (scripts/offline/motion_clip.py)."""
    entry = bench_configs.TASKS[task]
    if entry.motion_clip is None:
        return None
    from offline import motion_clip as generator  # scripts/ is on sys.path (above)

    path = unilab_root / ASSETS_REL / entry.motion_clip
    if not path.is_file() and synthesize:
        try:
            print(f"[bench] {generator.write_clip(path, unilab_root / task_scene(task))}", flush=True)
        except generator.ClipError as exc:
            raise BenchSetupError(str(exc)) from exc
    if not path.is_file():
        raise BenchSetupError(
            f"the motion clip {path} of task {task} is missing (UniLab downloads it from Hugging Face at the env's "
            f"start): fetch it there, or pass SYNTHETIC_CLIP=1 / --synthetic-motion-clip for the synthetic one")
    import hashlib

    return {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "synthetic": generator.is_synthetic(path)}


def ensure_assets(unilab_root: Path, source: Path | str | None, task: str = bench_configs.DEFAULT_TASK,
                  synthetic_clip: bool = False) -> dict[str, Any]:
    """Seed (if sources are given) and verify the task scene's assets and motion clip; raises if incomplete."""
    sources = asset_sources(source)
    seeded = sum(seed_assets(unilab_root, one) for one in sources)
    missing = missing_assets(unilab_root, task)
    if missing:
        shown = ", ".join(str(p.relative_to(unilab_root)) for p in missing[:3])
        raise BenchSetupError(
            f"{len(missing)} {bench_configs.TASKS[task].robot} asset file(s) of task {task} missing under {unilab_root / ASSETS_REL} "
            f"(e.g. {shown}); pass UNILAB_ASSETS=<dir or .tar.xz>[:<another>] / --assets to seed them"
        )
    record: dict[str, Any] = {"seeded_files": seeded, "source": os.pathsep.join(map(str, sources)) or None}
    if task != bench_configs.DEFAULT_TASK:
        record["task"] = task
        if bench_configs.TASKS[task].robot == "Go2":
            record["note"] = ("Go2 meshes: base_4.obj is a visual-only placeholder (no collision, explicit "
                              "inertia): the physics are the real model's")
    clip = motion_clip(unilab_root, task, synthetic_clip)
    if clip is not None:
        record["motion_clip"] = clip
    return record


def require_unilab_root(root: Path) -> Path:
    """The UniLab tree the trainer runs from; it must hold the FlashSAC entry script."""
    root = root.resolve()
    if not (root / TRAIN_SCRIPT_REL).is_file():
        raise BenchSetupError(
            f"{root / TRAIN_SCRIPT_REL} not found: --unilab-root/UNILAB must be a UniLab checkout"
        )
    return root


def flashsac_config_keys(unilab_root: Path) -> set[str]:
    """Dotted keys under ``algo.algo_params`` and ``training`` of the tree's FlashSAC config.

    Decides whether a configuration that needs a patched switch can run on this tree (Hydra rejects
    ``key=`` for a key the config lacks, e.g. an unpatched tree).
    """
    import yaml  # PyYAML comes with hydra/omegaconf in the UniLab environment

    data = yaml.safe_load((unilab_root / FLASHSAC_CONFIG_REL).read_text(encoding="utf-8")) or {}
    params = (data.get("algo") or {}).get("algo_params") or {}
    training = data.get("training") or {}
    return {f"algo.algo_params.{k}" for k in params} | {f"training.{k}" for k in training}


def main(argv: list[str]) -> int:
    """``bench_env.py path NAME``: one of the bench's paths, relative to the project, for the device scripts."""
    if len(argv) != 2 or argv[0] != "path" or argv[1] not in PATHS:
        print(f"usage: bench_env.py path {'|'.join(PATHS)}", file=sys.stderr)
        return 2
    path = PATHS[argv[1]]
    print(path.relative_to(PROJECT_DIR) if path.is_relative_to(PROJECT_DIR) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
