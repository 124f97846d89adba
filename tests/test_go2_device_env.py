"""Go2 Joystick Flat's device env (``flashsac_runtime.envs.Go2JoystickDeviceEnv``) on Warp's CPU device.

``experiments/evidence/go2_device_env_check.py`` steps it beside UniLab's own Go2 env on MuJoCo Warp
(``task=go2_joystick_flat/mjwarp``), both from the same seed, the device env fed UniLab's NumPy draws: 16 envs,
150 steps of seeded random actions, 0.5 s episodes (every row times out and resets several times, some terminate),
the interval push every 0.3 s (UniLab's 15 s lies past the run). Observations of both groups, final observations,
qpos, qvel, dones and the randomized model rows (mass, CoM, gravity, gains) must be bitwise equal, rewards within
1e-6. Controls that must fail: a kp range wider by 0.05 (the reset's gains, then the physics), the root's
tracked-body sensors left a substep behind (the rewards). An event without a device form is refused in one line
naming it. UniLab's command line trains 3 iterations on it with ``training.collector=device``.

Its own torch draws, as training takes them (``--mode distribution``, 256 envs, 2 steps with the push every step):
every randomized quantity it writes (the reset's root state, kp and kd, the base's mass, centre of mass and gravity,
the command and its resampling time, the push's kicks) against the ranges of UniLab's own Go2 config: inside,
covering, centred and uniform (Kolmogorov-Smirnov). Control: the env built with a narrower kp range, mass range and
push range fails exactly those three checks, and the range test fails a sample of the right range and mean but the
wrong shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import PROJECT, SideBySide, runnable_tree

CHECK = PROJECT / "experiments" / "evidence" / "go2_device_env_check.py"
sys.path.insert(0, str(CHECK.parent))

import device_env_distribution  # noqa: E402

#: The push's interval one control step (0.02 s), so that each step pushes every row.
DISTRIBUTION = ("--mode", "distribution", "--num-envs", "256", "--push-interval", "0.02")
#: Narrower ranges for the env only (the check reads the tree's): the negative control.
WRONG_RANGES = ("env.events.pd_gains.params.kp_range=[33.25,36.75]",
                "env.events.randomize_rigid_body_mass.params.mass_distribution_params=[-0.75,0.75]",
                "env.events.push_by_setting_velocity.params.velocity_range.x=[-0.5,0.5]")
#: Every quantity Go2 Joystick Flat's config randomizes, as the distribution check names it.
QUANTITIES = [*(f"root {q}" for q in ("x offset", "y offset", "z offset", "roll", "pitch", "yaw",
                                      "linear velocity x", "linear velocity y", "linear velocity z",
                                      "angular velocity roll", "angular velocity pitch", "angular velocity yaw")),
              "kp", "kd", "mass add (base)", "CoM offset x (base)", "CoM offset y (base)", "CoM offset z (base)",
              "gravity x", "gravity y", "gravity z", "command resampling time", "command lin_vel_x",
              "command lin_vel_y", "command ang_vel_z", "push linear velocity x", "push linear velocity y",
              "push linear velocity z"]
FACTORY = "flashsac_runtime.envs:make_go2_joystick_device_env"
SHORT = ("algo.num_envs=16", "algo.batch_size=32", "algo.replay_buffer_n=8", "algo.learning_starts=2",
         "algo.max_iterations=3", "algo.save_interval=0", "training.no_play=true", "training.export_onnx=false",
         "training.logger=no_print")
NO_DEVICE_FORM = ("+env.events.mass_inertia={func: unilab.envs.mdp.randomize_body_mass_inertia, mode: reset, "
                  "params: {asset_cfg: {_target_: SceneEntityCfg, name: robot, body_names: base}, "
                  "scale_range: [0.9, 1.1]}}")


def child_env(tree: Path, overlay: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_CURRENT_TEST")}
    env.update(PYTHONPATH=os.pathsep.join(map(str, (overlay, tree / "src"))), CUDA_VISIBLE_DEVICES="",
               MUJOCO_GL="disable", HF_HUB_OFFLINE="1", UNISIM_MJWARP_ALLOW_CPU="1", OMP_NUM_THREADS="1")
    return env


def check(tree: Path, overlay: Path, *args: str) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, str(CHECK), *args], cwd=tree, env=child_env(tree, overlay),
                          capture_output=True, text=True, timeout=900, check=False)
    lines = proc.stdout.strip().splitlines()
    return proc.returncode, (json.loads(lines[-1]) if proc.returncode in (0, 1) and lines else {}), proc.stderr


def train(tree: Path, overlay: Path, run: Path) -> tuple[subprocess.CompletedProcess, Path]:
    argv = [sys.executable, "src/unilab/scripts/train_flashsac.py", "task=go2_joystick_flat/mjwarp",
            "training.collector=device", f"+training.device_env_factory={FACTORY}", *SHORT,
            f"training.log_dir='{run / 'log'}'"]
    return subprocess.run(argv, cwd=tree, env=child_env(tree, overlay), capture_output=True, text=True,
                          timeout=900, check=False), run


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, applied_session: tuple[Path, Path],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySide]:
    checkout, overlay = applied_session
    base = tmp_path_factory.mktemp("go2-device-env")
    tree = runnable_tree(checkout, base / "unilab")
    started = SideBySide(request).start({
        "test_the_device_env_steps_unilabs_go2_trajectory": lambda: check(tree, overlay, "--steps", "150"),
        "test_a_wider_kp_range_is_reported": lambda: check(tree, overlay, "--steps", "30", "--perturb-kp"),
        "test_stale_root_sensors_are_reported": lambda: check(tree, overlay, "--steps", "10",
                                                              "--skip-root-refresh"),
        "test_an_event_without_a_device_form_is_one_line": lambda: check(tree, overlay, "--steps", "1",
                                                                         NO_DEVICE_FORM),
        "test_unilabs_command_line_trains_on_it": lambda: train(tree, overlay, base / "run"),
        "test_its_own_draws_have_the_configs_distributions": lambda: check(tree, overlay, *DISTRIBUTION, "--steps", "2"),
        "test_a_wrong_range_fails_the_distribution_check": lambda: check(tree, overlay, *DISTRIBUTION, "--steps", "1",
                                                                          *WRONG_RANGES),
    })
    yield started
    started.close()


def test_the_device_env_steps_unilabs_go2_trajectory(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 0 and result["equal"], (result, err[-3000:])
    worst = result["max_abs_diff"]
    assert all(worst[k] == 0.0 for k in ("obs", "critic", "final_obs", "final_critic", "qpos", "qvel", "model")), worst
    assert worst["reward"] <= result["reward_atol"]
    counts = result["counts"]
    assert counts["truncated"] >= 16 * 5 and counts["pushes"] >= 9 and counts["done_mismatches"] == 0, counts


def test_a_nan_on_one_side_is_never_an_equal_state() -> None:
    """The comparisons' ``max_abs``: a NaN on one side only is an infinite difference (NaN passes every ``>`` limit
    check, so a state gone NaN would read as equal); the same NaN or infinity on both sides is none."""
    from device_env_compare import max_abs

    assert max_abs(np.array([0.0, np.nan]), np.zeros(2)) == np.inf
    assert max_abs(np.array([np.nan, np.inf, 1.0]), np.array([np.nan, np.inf, 1.0])) == 0.0
    assert max_abs(np.array([1.0, 2.0]), np.array([1.0, 2.5])) == 0.5


def test_a_wider_kp_range_is_reported(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1 and not result["equal"], (result, err[-3000:])
    first = result["first_mismatch_step"]
    assert first["model"] == -1 and first["qpos"] == 0, first


def test_stale_root_sensors_are_reported(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1 and result["first_mismatch_step"].get("reward") == 0, (result, err[-3000:])


def test_an_event_without_a_device_form_is_one_line(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, _, err = runs.result(request)
    last = err.strip().splitlines()[-1]
    assert rc == 2 and last == ("go2_device_env_check: the device env has no device form of event terms "
                                "['reset/mass_inertia']; use training.collector=host for this task"), err[-3000:]


def test_unilabs_command_line_trains_on_it(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    proc, run = runs.result(request)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((run / "log" / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["completed_iterations"] == 3, summary
    manifest = summary["runtime_manifest"]
    assert manifest["collector"] == "device-resident", manifest
    assert manifest["device_env"]["draws_ahead"] == "true" and manifest["device_env"]["terms"] == "torch", manifest


def test_its_own_draws_have_the_configs_distributions(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 0 and result["equal"] and result["failed"] == [], (result.get("failed"), err[-3000:])
    checks = {c["name"]: c for c in result["checks"]}
    assert list(checks) == QUANTITIES and result["pushes"] == 2
    assert checks["kp"]["range"] == [31.5, 38.5] and checks["push linear velocity z"]["range"] == [-0.5, 0.5]
    assert checks["kp"]["samples"] == 256 * 12 and checks["push linear velocity x"]["samples"] == 2 * 256
    spread = [c for c in checks.values() if c["range"][0] < c["range"][1]]
    assert len(spread) == 19 and all(c["inside"] and c["covers"] and c["centred"] and c["uniform"] for c in spread)


def test_a_wrong_range_fails_the_distribution_check(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1, (result, err[-3000:])
    assert result["failed"] == ["kp", "mass add (base)", "push linear velocity x"]
    failed = [c for c in result["checks"] if not c["ok"]]
    assert all(c["inside"] and not c["covers"] and not c["uniform"] for c in failed), failed


def test_the_range_test_fails_a_wrong_shape_of_the_right_range_and_mean() -> None:
    """A triangular sample on [-1, 1] (mean 0, reaching both ends) passes every criterion but the uniformity test;
    a uniform one of the same size passes all; an empty one fails."""
    rng = np.random.default_rng(5)
    uniform = device_env_distribution.range_check("uniform", rng.uniform(-1.0, 1.0, 3072), -1.0, 1.0)
    assert uniform["ok"] and uniform["ks_sqrt_n_d"] < device_env_distribution.KS_CRITICAL
    triangle = device_env_distribution.range_check("triangle", rng.triangular(-1.0, 0.0, 1.0, 3072), -1.0, 1.0)
    assert (triangle["inside"], triangle["covers"], triangle["centred"], triangle["uniform"]) == (True, True, True, False)
    assert not device_env_distribution.range_check("empty", np.zeros(0), -1.0, 1.0)["ok"]
