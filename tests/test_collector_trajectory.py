"""The task stays the task (issue 11, item 4): the patched UniLab tree steps the G1 Walk Flat MuJoCo env exactly
like the pristine pinned tree.

Each side is a fresh subprocess of `experiments/collector_profile.py --mode trajectory` run from its own tree
(`PYTHONPATH=<tree>/src`, the patched side with the overlay first, as a training run has it), with the same seed
and the same seeded random action sequence, for STEPS steps with autoreset. qpos, qvel, every observation group,
the final observations of reset envs, rewards, terminated, truncated and the episode counters must be bitwise
equal. qpos/qvel are the backend's bound float32 views (the task's dtype; the pinned mjbatch exposes no other host
view): a difference hidden below float32 in the float64 native state would surface through the chaotic dynamics
within a few steps. Negative control: one action component of one env at one step flipped on the patched side
must be reported, first at that step.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from conftest import PROJECT

sys.path.insert(0, str(PROJECT / "experiments"))
from collector_profile import compare_trajectories  # noqa: E402

ASSETS = PROJECT.parent / "shared" / "assets" / "unilab-1.3.2-g1-assets.tar.xz"
HARNESS = PROJECT / "experiments" / "collector_profile.py"
NUM_ENVS = 64
STEPS = 220
PERTURB_STEP = 100


def runnable_tree(source: Path, dest: Path) -> Path:
    """A copy of a UniLab tree with the G1 meshes unpacked into src/unilab/assets (never committed)."""
    if not ASSETS.is_file():
        raise FileNotFoundError(f"G1 assets not found at {ASSETS} (CI provides them at <project>/../shared/assets/)")
    shutil.copytree(source, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    with tarfile.open(ASSETS) as tar:
        tar.extractall(dest / "src" / "unilab" / "assets", filter="data")
    return dest


def trajectory(tree: Path, output: Path, *, overlay: Path | None = None, perturb_step: int = -1) -> dict:
    paths = ([str(overlay)] if overlay else []) + [str(tree / "src")]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHSAC_PROVENANCE_DIR")}
    env["PYTHONPATH"] = os.pathsep.join(paths)
    proc = subprocess.run(
        [sys.executable, str(HARNESS), "--mode", "trajectory", "--num-envs", str(NUM_ENVS), "--steps", str(STEPS),
         "--perturb-step", str(perturb_step), "--output", str(output)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with np.load(output) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory, pristine_template: Path,
          applied_session: tuple[Path, Path]) -> tuple[Path, Path, Path]:
    base = tmp_path_factory.mktemp("trajectory")
    checkout, overlay = applied_session
    return (runnable_tree(pristine_template, base / "pristine"), runnable_tree(checkout, base / "patched"), overlay)


@pytest.fixture(scope="module")
def pristine_run(trees: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    return trajectory(trees[0], tmp_path_factory.mktemp("run") / "pristine.npz")


def test_episodes_end_and_reset(pristine_run: dict) -> None:
    """The comparison covers the reset path: envs terminate (fall) and are reset many times."""
    assert pristine_run["qpos"].shape[:2] == (STEPS, NUM_ENVS)
    assert int(pristine_run["reset_mask"].sum()) > NUM_ENVS
    assert int(pristine_run["terminated"].sum()) > NUM_ENVS
    assert np.abs(pristine_run["final_obs/obs"]).sum() > 0


def test_patched_tree_steps_bitwise_like_pristine(trees: tuple[Path, Path, Path], pristine_run: dict,
                                                  tmp_path: Path) -> None:
    patched = trajectory(trees[1], tmp_path / "patched.npz", overlay=trees[2])
    assert compare_trajectories(pristine_run, patched) == []


def test_comparison_catches_one_flipped_action(trees: tuple[Path, Path, Path], pristine_run: dict,
                                               tmp_path: Path) -> None:
    perturbed = trajectory(trees[1], tmp_path / "perturbed.npz", overlay=trees[2], perturb_step=PERTURB_STEP)
    problems = compare_trajectories(pristine_run, perturbed)
    print("\n".join(problems))
    by_key = {p.split(":")[0]: p for p in problems}
    for key in ("qpos", "qvel", "obs/obs", "obs/critic", "reward"):
        assert by_key[key].endswith(f"first at step {PERTURB_STEP}"), problems
