"""GPU physics learns the same task: one control step of MuJoCo Warp from identical states and actuator targets
agrees with CPU MuJoCo, for G1 Walk Flat and Go2 Joystick Flat (experiments/evidence/mjwarp_agreement.py; its
docstring states the metric and the tolerance): the compiled models equal field by field (but for the visual-only
geoms and the backends' own tracked-body sensors), the same reset state and randomized model rows from the same
seed, and the same next state and foot contacts from every sampled state, on the default and on the reset rows.

Here the MJWarp side runs on Warp's CPU device (MuJoCo Warp's development path, opted into by unisim patch
0002's UNISIM_MJWARP_ALLOW_CPU); the same harness runs on CUDA on the GPU host (results/). Controls: a 0.01 rad
shift of one actuator target on the MJWarp side must fail the check, MuJoCo against itself must give exactly
zero, without the opt-in the adapter must still refuse the CPU device (1.7.8's behaviour), and for Go2 a kp range
changed on the MJWarp side only (``[31.5, 38.6]`` for ``[31.5, 38.5]``) must fail the reset check and the step
after it. Go2's meshes are the test assets' (tests/conftest.py: ``base_4.obj`` is a placeholder of a visual-only
geom, no collision, the body's inertia explicit, so the physics are the real model's). The runs are independent
and run side by side, one per core (conftest.SideBySide).
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
        "test_go2_mjwarp_owner_agrees_with_its_mujoco_owner":
            lambda: agreement(tree, out / "go2.json", "--task", "go2_joystick_flat"),
        "test_go2_changed_gain_on_one_side_fails":
            lambda: agreement(tree, out / "go2-kp.json", *SMALL, "--task", "go2_joystick_flat",
                              "--candidate-override", "env.events.pd_gains.params.kp_range=[31.5,38.6]"),
    })
    yield started
    started.close()


@pytest.fixture
def ran(request: pytest.FixtureRequest, runs: SideBySide) -> tuple[int, str, dict]:
    """This test's run: exit status, output, JSON result."""
    return runs.result(request)


def check_agrees(code: int, out: str, result: dict, task: str, substeps: int, feet: int) -> None:
    """Every part of the check passed on Warp's CPU device, with contacts and motion to compare."""
    assert code == 0, out[-3000:]
    assert result["passed"] and result["candidate_task"] == f"{task}/mjwarp" and result["substeps"] == substeps
    assert result["versions"]["warp_device"] == "cpu" and result["versions"]["mujoco-warp"] == "3.11.0"
    model = result["model"]
    assert model["passed"] and model["whole_fields"] > 300 and model["colliding_geoms"] > 0, model
    assert model["sensors_compared"] >= feet and not model["device_options"], model
    reset = result["reset"]
    assert reset["passed"] and {"body_mass", "body_ipos", "gravity", "actuator_gainprm"} <= set(reset["compared"])
    assert reset["largest_abs_difference"]["qpos"] == 0.0, reset  # the same draws, the same float32 state
    for group in ("relative_error", "relative_error_after_reset"):
        for stats in result[group].values():
            assert stats["rows"] == 64 * 12 and stats["q0.99"] <= 1e-3
            assert stats["max_abs_error"] > 0.0  # another implementation: not bitwise, or the sides were the same
    for group in ("contacts", "contacts_after_reset"):
        contacts = result[group]
        assert contacts["passed"] and contacts["pairs"] == 64 * 12 * feet, contacts
        assert 0 < contacts["in_contact"] < contacts["pairs"], contacts  # feet on and off the floor


def test_mjwarp_step_agrees_with_mujoco(ran: tuple[int, str, dict]) -> None:
    check_agrees(*ran, task="g1_walk_flat", substeps=3, feet=8)


def test_go2_mjwarp_owner_agrees_with_its_mujoco_owner(ran: tuple[int, str, dict]) -> None:
    check_agrees(*ran, task="go2_joystick_flat", substeps=2, feet=4)
    # the mass, centre-of-mass, gravity and gain randomization of the MuJoCo owner reached MuJoCo Warp's worlds
    assert {"body_mass", "body_ipos", "gravity", "actuator_gainprm", "actuator_biasprm"} <= set(ran[2]["reset"]["compared"])


def test_go2_changed_gain_on_one_side_fails(ran: tuple[int, str, dict]) -> None:
    """Negative control: the MJWarp side's kp range changed in its last digit fails the reset check and the step
    on the reset rows; the model and the step on the default rows still agree."""
    code, out, result = ran
    assert code == 1 and "FAILED" in out, out[-3000:]
    assert result["model"]["passed"] and all(s["passed"] for s in result["relative_error"].values())
    assert {"actuator_gainprm", "actuator_biasprm"} <= set(result["reset"]["differ"]), result["reset"]
    assert not any(s["passed"] for s in result["relative_error_after_reset"].values())


def test_small_control_shift_fails(ran: tuple[int, str, dict]) -> None:
    code, out, result = ran
    assert code == 1, out[-3000:]
    assert result["passed"] is False and "FAILED" in out


def test_mujoco_against_itself_is_exact(ran: tuple[int, str, dict]) -> None:
    code, out, result = ran
    assert code == 0, out[-3000:]
    for group in ("relative_error", "relative_error_after_reset"):
        assert all(s["max_abs_error"] == 0.0 for s in result[group].values())
    assert result["contacts"]["mismatched"] == 0 and result["reset"]["passed"] and result["model"]["passed"]


def test_cpu_device_still_needs_the_opt_in(ran: tuple[int, str, dict]) -> None:
    code, out, _ = ran
    assert code != 0 and "mjwarp backend requires an active CUDA Warp device" in out
