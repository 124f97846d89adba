"""The mjwarp backend builds MuJoCo Warp's kernel modules before its first launch (unisim 0004).

experiments/evidence/mjwarp_kernel_build.py builds the G1 Walk Flat env on MJWarp (Warp's CPU device, unisim
0002's opt-in), resets and steps it while recording every Warp module load and who made it:
1. with ``UNISIM_MJWARP_BUILD_WORKERS=auto`` (one worker per usable CPU on CUDA, one on Warp's CPU device) every
   module the env loads is loaded by the build worker: the physics' core modules, the backend's own and the
   kernels MuJoCo Warp creates for the model (found by a recorded forward, step and reset on scratch data);
   none is loaded by a launch (the check holds);
2. unset (on Warp's CPU device the default is Warp's build at launch, unisim-core 1.7.8's) the launches load
   the physics' modules, the created kernels among them: the check must fail, the control;
3. the same kernels run either way, and the recorded calls leave the training data untouched: the
   trajectory's final qpos is bitwise the same with and without the build;
4. a malformed switch is one clear error;
5. the switch's defaults: unset builds ahead on one worker per usable CPU on CUDA, at launch on the CPU
   device, where any number builds on one worker.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import numpy as np
import pytest

from conftest import ONE_THREAD, PROJECT, SideBySide, runnable_tree

CHECK = PROJECT / "experiments" / "evidence" / "mjwarp_kernel_build.py"
STEPS = "30"
SWITCH = "UNISIM_MJWARP_BUILD_WORKERS"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> tuple[Path, Path]:
    return runnable_tree(applied_session[0], tmp_path_factory.mktemp("kernel-build") / "unilab"), applied_session[1]


def check(tree: tuple[Path, Path], workers: str | None,
          qpos: Path | None) -> tuple[int, dict, str, np.ndarray | None]:
    root, overlay = tree
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", SWITCH)}
    env.update(PYTHONPATH=os.pathsep.join([str(overlay), str(root / "src")]), MUJOCO_GL="disable",
               UNISIM_MJWARP_ALLOW_CPU="1", CUDA_VISIBLE_DEVICES="", **ONE_THREAD,
               **({SWITCH: workers} if workers is not None else {}))
    args = ["--steps", STEPS, *(["--qpos-output", str(qpos)] if qpos else [])]
    proc = subprocess.run([sys.executable, str(CHECK), *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=900, check=False)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    return proc.returncode, result, proc.stderr, (np.load(qpos) if qpos and qpos.is_file() else None)


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tree: tuple[Path, Path],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySide]:
    out = tmp_path_factory.mktemp("kernel-build-qpos")
    started = SideBySide(request).start(
        {"test_a_malformed_switch_is_one_clear_error": functools.partial(check, tree, "two", None)},
        shared={"built": functools.partial(check, tree, "auto", out / "built.npy"),
                "lazy": functools.partial(check, tree, None, out / "lazy.npy")})
    yield started
    started.close()


def test_every_module_the_env_loads_is_built_before_the_first_launch(runs: SideBySide) -> None:
    rc, result, err, _ = runs.shared("built")
    assert rc == 0, (result, err[-3000:])
    # On Warp's CPU device the build runs on one worker (its CPU loader is not safe for concurrent loads).
    assert result["kernel_build"]["workers"] == 1 and result["kernel_build"]["failed"] == []
    # The eight core modules of mujoco_warp, the backend's own and the kernels created for the model.
    assert result["kernel_build"]["modules"] == result["loads"]["by_build_workers"]["count"] > 30
    assert result["loads"]["built_ahead_modules_first_loaded_at_launch"]["count"] == 0
    assert result["loads"]["other_loads_at_launch"]["count"] == 0


def test_the_lazy_build_fails_the_check(runs: SideBySide) -> None:
    rc, result, err, _ = runs.shared("lazy")
    assert rc == 1 and result["holds"] is False, (result, err[-3000:])
    assert result["kernel_build"]["workers"] == 0
    launched = result["loads"]["built_ahead_modules_first_loaded_at_launch"]["modules"]
    assert "mujoco_warp._src.smooth" in launched and "mujoco_warp._src.solver" in launched
    assert result["loads"]["other_loads_at_launch"]["count"] > 20  # the created kernels, at their launch


def test_the_build_changes_no_physics(runs: SideBySide) -> None:
    built, lazy = runs.shared("built")[3], runs.shared("lazy")[3]
    assert built is not None and lazy is not None
    assert built.shape == lazy.shape and built.tobytes() == lazy.tobytes()
    assert np.isfinite(built).all() and np.ptp(built, axis=0).max() > 0.0  # the rows moved apart


def test_a_malformed_switch_is_one_clear_error(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err, _ = runs.result(request)
    assert rc != 0 and result == {}
    assert err.strip().splitlines()[-1] == (
        "ValueError: UNISIM_MJWARP_BUILD_WORKERS must be auto or a number of workers >= 0, got 'two'")


def _kernel_build_module(overlay: Path) -> Any:
    """The overlay's kernel_build, imported alone (it imports no Warp at module level)."""
    path = overlay / "flashsac_runtime" / "mjwarp" / "kernel_build.py"
    spec = importlib.util.spec_from_file_location("kernel_build_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves its annotations through sys.modules
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_unset_builds_ahead_on_cuda_and_at_launch_on_the_cpu_device_with_one_worker(applied_session: tuple[Path, Path]) -> None:
    module = _kernel_build_module(applied_session[1])
    cpus = len(os.sched_getaffinity(0))
    assert module.build_workers(True, {}) == cpus and module.build_workers(False, {}) == 0
    assert module.build_workers(True, {SWITCH: "0"}) == 0 and module.build_workers(True, {SWITCH: " 3 "}) == 3
    assert module.build_workers(False, {SWITCH: "auto"}) == module.build_workers(False, {SWITCH: "3"}) == 1
