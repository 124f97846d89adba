"""GPU physics learns the same task: one control step of MuJoCo Warp from identical G1 states
and actuator targets agrees with CPU MuJoCo (experiments/evidence/mjwarp_agreement.py; its docstring states the metric
and the tolerance).

Here the MJWarp side runs on Warp's CPU device (MuJoCo Warp's development path, opted into by unisim patch
0002's UNISIM_MJWARP_ALLOW_CPU); the same harness runs on CUDA on the GPU host (results/). Controls: a 0.01 rad
shift of one actuator target on the MJWarp side must fail the check, MuJoCo against itself must give exactly
zero, and without the opt-in the adapter must still refuse the CPU device (1.7.8's behaviour). The four runs are
independent and run side by side, one per core (conftest.SideBySide).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ONE_THREAD, PROJECT, SideBySide, runnable_tree

HARNESS = PROJECT / "experiments" / "evidence" / "mjwarp_agreement.py"
#: Fewer states than the harness default: the CPU device steps MJWarp slowly, and the controls need only a few.
SMALL = ("--num-envs", "32", "--source-steps", "60", "--every", "10")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> tuple[Path, Path]:
    checkout, overlay = applied_session
    return runnable_tree(checkout, tmp_path_factory.mktemp("mjwarp") / "unilab"), overlay


def agreement(tree: tuple[Path, Path], output: Path, *args: str, allow_cpu: bool = True) -> tuple[int, str, dict]:
    root, overlay = tree
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "UNISIM_MJWARP_ALLOW_CPU")}
    env.update(PYTHONPATH=os.pathsep.join([str(overlay), str(root / "src")]), MUJOCO_GL="disable", **ONE_THREAD)
    if allow_cpu:
        env["UNISIM_MJWARP_ALLOW_CPU"] = "1"
    proc = subprocess.run([sys.executable, str(HARNESS), *args, "--output", str(output)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    result = json.loads(output.read_text()) if output.is_file() else {}
    return proc.returncode, proc.stdout + proc.stderr, result


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tree: tuple[Path, Path],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySide]:
    """Each test's harness run, side by side (one torch thread each)."""
    out = tmp_path_factory.mktemp("agreement")
    started = SideBySide(request).start({
        "test_mjwarp_step_agrees_with_mujoco": lambda: agreement(tree, out / "agree.json"),
        "test_small_control_shift_fails": lambda: agreement(tree, out / "shift.json", *SMALL, "--perturb-ctrl", "0.01"),
        "test_mujoco_against_itself_is_exact": lambda: agreement(tree, out / "same.json", *SMALL, "--mujoco-both"),
        "test_cpu_device_still_needs_the_opt_in":
            lambda: agreement(tree, out / "refused.json", *SMALL, allow_cpu=False),
    })
    yield started
    started.close()


@pytest.fixture
def ran(request: pytest.FixtureRequest, runs: SideBySide) -> tuple[int, str, dict]:
    """This test's run: exit status, output, JSON result."""
    return runs.result(request)


def test_mjwarp_step_agrees_with_mujoco(ran: tuple[int, str, dict]) -> None:
    code, out, result = ran
    assert code == 0, out[-3000:]
    assert result["passed"] and result["candidate_task"] == "g1_walk_flat/mjwarp" and result["substeps"] == 3
    assert result["versions"]["warp_device"] == "cpu" and result["versions"]["mujoco-warp"] == "3.11.0"
    for stats in result["relative_error"].values():
        assert stats["rows"] == 64 * 12 and stats["q0.99"] <= 1e-3
        assert stats["max_abs_error"] > 0.0  # another implementation: not bitwise, or the sides were the same


def test_small_control_shift_fails(ran: tuple[int, str, dict]) -> None:
    code, out, result = ran
    assert code == 1, out[-3000:]
    assert result["passed"] is False and "FAILED" in out


def test_mujoco_against_itself_is_exact(ran: tuple[int, str, dict]) -> None:
    code, out, result = ran
    assert code == 0, out[-3000:]
    assert all(s["max_abs_error"] == 0.0 for s in result["relative_error"].values())


def test_cpu_device_still_needs_the_opt_in(ran: tuple[int, str, dict]) -> None:
    code, out, _ = ran
    assert code != 0 and "mjwarp backend requires an active CUDA Warp device" in out
