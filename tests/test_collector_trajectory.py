"""The task stays the task: the patched UniLab tree steps the G1 Walk Flat MuJoCo env exactly
like the pristine pinned tree.

Each side is a fresh subprocess of `experiments/profile/collector_profile.py --mode trajectory` run from its own tree
(`PYTHONPATH=<tree>/src`, the patched side with the overlay first, as a training run has it), with the same seed
and the same seeded random action sequence, for STEPS steps with autoreset. qpos, qvel, every observation group,
the final observations of reset envs, rewards, terminated, truncated and the episode counters must be bitwise
equal. qpos/qvel are the backend's bound float32 views (the task's dtype; the pinned mjbatch exposes no other host
view): a difference hidden below float32 in the float64 native state would surface through the chaotic dynamics
within a few steps. Negative control: one action component of one env at one step flipped on the patched side
must be reported, first at that step. The four trajectories are independent and run side by side, one per core
(conftest.SideBySide).

The patched side runs the overlay's unisim (the unisim-core set_const cut): its provenance record must show the
patched unisim module imported from the overlay with the manifest's post-image hash. For this task skipping
set_const always is bitwise equal too (every reset model write is NONE-level), so a broken cut condition cannot
show up here; the control that the overlay's unisim is in the compared path is a copy of the overlay whose
reset skips its model writes: the comparison must report it from step 0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import ONE_THREAD, PROJECT, SideBySide, runnable_tree

sys.path.insert(0, str(PROJECT / "experiments" / "profile"))
from collector_profile import compare_trajectories  # noqa: E402

HARNESS = PROJECT / "experiments" / "profile" / "collector_profile.py"
NUM_ENVS = 64
STEPS = 220
PERTURB_STEP = 100


UNISIM_BACKEND = "unisim/backend/mujoco/backend.py"


def trajectory(tree: Path, output: Path, *, overlay: Path | None = None, perturb_step: int = -1,
               provenance: Path | None = None) -> dict:
    paths = ([str(overlay)] if overlay else []) + [str(tree / "src")]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHSAC_PROVENANCE_DIR")}
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(ONE_THREAD)
    if provenance is not None:
        env["FLASHSAC_PROVENANCE_DIR"] = str(provenance)
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


def _broken_overlay(overlay: Path, dest: Path) -> Path:
    """A copy of the overlay whose unisim reset skips its model writes."""
    shutil.copytree(overlay, dest, ignore=shutil.ignore_patterns("__pycache__"))
    backend = dest / UNISIM_BACKEND
    loop = "            for write in plan.model_writes:\n"
    assert backend.read_text().count(loop) == 1
    backend.write_text(backend.read_text().replace(loop, "            for write in plan.model_writes[:0]:\n"))
    return dest


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the trajectories (and the patched run's provenance records) are written."""
    return tmp_path_factory.mktemp("run")


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, trees: tuple[Path, Path, Path], out: Path) -> Iterator[SideBySide]:
    """The pristine trajectory and each test's patched-side trajectory, side by side (one torch thread each)."""
    started = SideBySide(request).start({
        "test_patched_tree_steps_bitwise_like_pristine":
            lambda: trajectory(trees[1], out / "patched.npz", overlay=trees[2], provenance=out / "prov"),
        "test_comparison_sees_the_overlay_unisim":
            lambda: trajectory(trees[1], out / "broken.npz", overlay=_broken_overlay(trees[2], out / "overlay")),
        "test_comparison_catches_one_flipped_action":
            lambda: trajectory(trees[1], out / "perturbed.npz", overlay=trees[2], perturb_step=PERTURB_STEP),
    }, shared={"pristine": lambda: trajectory(trees[0], out / "pristine.npz")})
    yield started
    started.close()


@pytest.fixture
def pristine_run(runs: SideBySide) -> dict:
    return runs.shared("pristine")


@pytest.fixture
def ran(request: pytest.FixtureRequest, runs: SideBySide) -> dict:
    """This test's patched-side trajectory."""
    return runs.result(request)


def test_episodes_end_and_reset(pristine_run: dict) -> None:
    """The comparison covers the reset path: envs terminate (fall) and are reset many times."""
    assert pristine_run["qpos"].shape[:2] == (STEPS, NUM_ENVS)
    assert int(pristine_run["reset_mask"].sum()) > NUM_ENVS
    assert int(pristine_run["terminated"].sum()) > NUM_ENVS
    assert np.abs(pristine_run["final_obs/obs"]).sum() > 0


def test_patched_tree_steps_bitwise_like_pristine(out: Path, pristine_run: dict, ran: dict) -> None:
    patched = ran
    assert compare_trajectories(pristine_run, patched) == []
    post = json.loads((PROJECT / "patches" / "MANIFEST.json").read_text())["targets"]["unisim"][UNISIM_BACKEND]["post"]
    records = [json.loads(p.read_text()) for p in (out / "prov").glob("provenance-*.json")]
    backends = [m for r in records for m in r["modules"] if m["name"] == "unisim.backend.mujoco.backend"]
    assert backends and all(m["origin"] == "overlay" and m["sha256"] == post for m in backends), backends
    assert not any(r["flagged"] for r in records)


def test_comparison_sees_the_overlay_unisim(pristine_run: dict, ran: dict) -> None:
    """Control: the overlay's unisim with its reset model writes skipped is caught, first at step 0."""
    broken = ran
    by_key = {p.split(":")[0]: p for p in compare_trajectories(pristine_run, broken)}
    assert by_key["qpos"].endswith("first at step 0"), by_key


def test_comparison_catches_one_flipped_action(pristine_run: dict, ran: dict) -> None:
    perturbed = ran
    problems = compare_trajectories(pristine_run, perturbed)
    print("\n".join(problems))
    by_key = {p.split(":")[0]: p for p in problems}
    for key in ("qpos", "qvel", "obs/obs", "obs/critic", "reward"):
        assert by_key[key].endswith(f"first at step {PERTURB_STEP}"), problems
