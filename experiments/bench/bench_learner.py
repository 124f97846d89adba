"""Which ``uni_rl`` a run trains, and the environment its trainer process starts with.

The configuration names the learner's source (the overlay's patched ``uni_rl``, the pristine 1.3.2 one, or the
installed upstream wheel); this puts that one first on the trainer's ``PYTHONPATH``, keeps every other copy off
it, and afterwards checks that the trainer really imported it (``source_matches``), because a run that measured
another learner than its name says is worse than no run. Called by ``benchmark_flashsac_training.py``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import bench_env
from bench_env import BenchSetupError
from bench_options import selected_config


def resolve_learner(args: argparse.Namespace) -> tuple[str, Path | None]:
    """(source kind, folder to put first on PYTHONPATH or None for the installed uni_rl)."""
    config = selected_config(args)
    source = config.source if config else "overlay"
    if args.uni_rl_path is not None:
        path = args.uni_rl_path.resolve()
        if not (path / "uni_rl" / "__init__.py").is_file():
            raise BenchSetupError(f"--uni-rl-path {path} holds no uni_rl/ package")
        return source, path
    if source == "installed":
        return source, None
    if source == "baseline":
        if args.baseline_uni_rl is None:
            raise BenchSetupError("--config baseline-1.3.2 needs --baseline-uni-rl <folder with pristine uni_rl/>")
        path = args.baseline_uni_rl.resolve()
        if not (path / "uni_rl" / "__init__.py").is_file():
            raise BenchSetupError(f"--baseline-uni-rl {path} holds no uni_rl/ package")
        return source, path
    overlay = args.overlay.resolve()
    if not (overlay / "uni_rl" / "__init__.py").is_file():
        raise BenchSetupError(
            f"{overlay}/uni_rl is missing: run `make apply` first, or pass --uni-rl-path / --config <reference>"
        )
    return source, overlay


def provenance_site(overlay: Path, learner_path: Path | None, scratch: Path) -> Path | None:
    """A path entry that activates the overlay's provenance ``sitecustomize`` without its packages.

    For the overlay learner the overlay itself is on the path. For the references the
    overlay must not be (its uni_rl would shadow theirs, its unisim the installed one), yet
    every process should still write its provenance record; so the overlay's top-level
    runtime files, minus its packages, are linked into a scratch folder that goes on the
    path after the reference learner.
    """
    overlay = overlay.resolve()
    if learner_path is not None and learner_path == overlay:
        return None
    if not (overlay / "sitecustomize.py").is_file():
        return None
    site = scratch / "provenance-site"
    site.mkdir(parents=True, exist_ok=True)
    for entry in overlay.iterdir():
        if entry.name in ("uni_rl", "unisim", "__pycache__"):
            continue
        link = site / entry.name
        if not link.exists():
            link.symlink_to(entry)
    return site


def child_env(
    *, learner_path: Path | None, prov_site: Path | None, unilab_root: Path,
    overlay: Path, timings: Path, provenance_dir: Path,
) -> dict[str, str]:
    """Environment of the trainer: our learner first, then the hook, then the UniLab tree."""
    env = dict(os.environ)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    # An inherited overlay entry would silently replace a reference learner.
    inherited = [p for p in inherited if Path(p).resolve() != overlay.resolve()]
    front = [str(p) for p in (learner_path, prov_site) if p is not None]
    env["PYTHONPATH"] = os.pathsep.join(
        [*front, str(bench_env.HOOK_DIR), str(unilab_root / "src"), *inherited]
    )
    env["FLASHSAC_BENCH_TIMINGS"] = str(timings)
    env["FLASHSAC_PROVENANCE_DIR"] = str(provenance_dir)
    env["FLASHSAC_UNILAB_ROOT"] = str(unilab_root)
    env["PYTHONUNBUFFERED"] = "1"
    # Training needs no renderer, and the assets are verified locally before the run.
    env.setdefault("MUJOCO_GL", "disable")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("WANDB_MODE", "disabled")
    return env


def source_matches(source: str, learner_path: Path | None, flashsac_source: str | None, overlay: Path) -> bool:
    """Did the learner really import uni_rl from where this configuration says?"""
    if flashsac_source is None:
        return False
    imported = Path(flashsac_source).resolve()
    if learner_path is not None:
        return imported == (learner_path / "uni_rl").resolve()
    return overlay.resolve() not in imported.parents
