"""The row-wise reset of the mjwarp adapter (unisim 0003) changes no result.

1. Its scratch forward reads each reset row's own per-world model values: experiments/evidence/mjwarp_scratch_check.py
   compares a forward over every world with the scratch forward of a few rows, bitwise, on a small actuated
   model with per-world gains, masses and frictions. Controls: without the gather, and over the main model as
   unisim-core 1.7.8's scratch did, the check must fail.
2. A G1 Walk Flat trajectory on MJWarp (Warp's CPU device, unisim 0002's opt-in) with autoreset and the pd_gains
   reset randomization is bitwise the same through the row route and through the whole-array route of 1.7.8 (an
   overlay built from the series without the row-wise reset and the build ahead, unisim 0003-0004). Control: a
   copy of the overlay whose scatter writes every reset row from the first row's values must differ, which also
   shows that the row route ran.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ONE_THREAD, PROJECT, runnable_tree, side_by_side

sys.path.insert(0, str(PROJECT / "experiments" / "profile"))
from collector_profile import compare_trajectories  # noqa: E402
from patchset.overlay import build  # noqa: E402
from patchset.scratch import pristine_trees  # noqa: E402
from patchset.series import load_series  # noqa: E402
from series_images import write_tree  # noqa: E402

CHECK = PROJECT / "experiments" / "evidence" / "mjwarp_scratch_check.py"
HARNESS = PROJECT / "experiments" / "profile" / "collector_profile.py"
ROW_COMMIT = Path("flashsac_runtime/mjwarp/row_commit.py")
SCATTER_LINE = "target[rows[row], column] = source[row, column]"
#: The patches of the row-wise reset and of the build ahead (which builds the row commit's kernels too).
ROW_RESET_PATCHES = ("unisim/0003-mjwarp-reset-commits-only-reset-rows.patch",
                     "unisim/0004-mjwarp-builds-its-kernels-ahead.patch")
#: Steps of the G1 trajectory: the first row-route resets come after about 28 steps of random actions.
STEPS = 45
NUM_ENVS = 64


def warp_cpu_env(pythonpath: list[str], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join(pythonpath), MUJOCO_GL="disable", UNISIM_MJWARP_ALLOW_CPU="1",
               **ONE_THREAD, **extra)
    return env


def scratch_check(overlay: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), *args], env=warp_cpu_env([str(overlay)]),
                          capture_output=True, text=True, timeout=600, check=False)


def test_scratch_forward_reads_the_rows_model(applied_session: tuple[Path, Path]) -> None:
    proc = scratch_check(applied_session[1])
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert '"equal": true' in proc.stdout and '"main_contacts": 0' not in proc.stdout


@pytest.mark.parametrize("control", ["--no-gather", "--main-model"])
def test_scratch_check_fails_on_the_wrong_model_rows(applied_session: tuple[Path, Path], control: str) -> None:
    proc = scratch_check(applied_session[1], control)
    assert proc.returncode == 1 and '"equal": false' in proc.stdout, proc.stdout + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> Path:
    return runnable_tree(applied_session[0], tmp_path_factory.mktemp("row-reset") / "unilab")


def trajectory(tree: Path, overlay: Path, output: Path, **extra: str) -> dict[str, np.ndarray]:
    proc = subprocess.run(
        [sys.executable, str(HARNESS), "--mode", "trajectory", "--task", "g1_walk_flat/mjwarp",
         "--num-envs", str(NUM_ENVS), "--steps", str(STEPS), "--output", str(output)],
        cwd=tree, env=warp_cpu_env([str(overlay), str(tree / "src")], **extra), capture_output=True, text=True,
        timeout=900, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with np.load(output) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.extended  # a G1 trajectory twice on Warp's CPU device (half a minute on two cores); the scratch
# forward's bitwise check stays in the default suite
def test_row_route_trajectory_is_bitwise_the_whole_array_route(
    tree: Path, applied_session: tuple[Path, Path], tmp_path: Path
) -> None:
    overlay = applied_session[1]
    whole_array = tmp_path / "overlay-whole-array-reset"
    series = load_series(PROJECT / "patches")
    older = type(series)([p for p in series.patches if p.name not in ROW_RESET_PATCHES], "")
    assert len(older.patches) == len(series.patches) - len(ROW_RESET_PATCHES)
    files, _ = build({t: pristine_trees()[t] for t in ("uni_rl", "unisim")}, older)
    write_tree(whole_array, files)
    broken = tmp_path / "overlay-broken-scatter"
    shutil.copytree(overlay, broken)
    source = (broken / ROW_COMMIT).read_text()
    assert source.count(SCATTER_LINE) == 1
    (broken / ROW_COMMIT).write_text(source.replace(SCATTER_LINE, "target[rows[row], column] = source[0, column]"))
    # Three independent processes (one torch thread each): side by side, one per core.
    whole, rows, broken_rows = side_by_side(
        lambda: trajectory(tree, whole_array, tmp_path / "whole.npz"),
        lambda: trajectory(tree, overlay, tmp_path / "rows.npz"),
        lambda: trajectory(tree, broken, tmp_path / "broken.npz"))
    assert int(whole["reset_mask"].sum()) > 0
    assert compare_trajectories(whole, rows) == []
    problems = compare_trajectories(whole, broken_rows)
    assert any(p.startswith("qpos:") for p in problems), problems
