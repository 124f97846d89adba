"""Go2 Joystick Flat's device env (``flashsac_runtime.envs.Go2JoystickDeviceEnv``) on Warp's CPU device.

``experiments/evidence/go2_device_env_check.py`` steps it beside UniLab's own Go2 env on MuJoCo Warp
(``task=go2_joystick_flat/mjwarp``), both from the same seed, the device env fed UniLab's NumPy draws: 16 envs,
200 steps of seeded random actions, 0.5 s episodes (every row times out and resets several times, some terminate),
the interval push every 0.3 s (UniLab's 15 s lies past the run). Observations of both groups, final observations,
qpos, qvel, dones and the randomized model rows (mass, CoM, gravity, gains) must be bitwise equal, rewards within
1e-6. Controls that must fail: a kp range wider by 0.05 (the reset's gains, then the physics), the root's
tracked-body sensors left a substep behind (the rewards). An event without a device form is refused in one line
naming it. UniLab's command line trains 3 iterations on it with ``training.collector=device``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import PROJECT, SideBySide, runnable_tree

CHECK = PROJECT / "experiments" / "evidence" / "go2_device_env_check.py"
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
        "test_the_device_env_steps_unilabs_go2_trajectory": lambda: check(tree, overlay, "--steps", "200"),
        "test_a_wider_kp_range_is_reported": lambda: check(tree, overlay, "--steps", "30", "--perturb-kp"),
        "test_stale_root_sensors_are_reported": lambda: check(tree, overlay, "--steps", "10",
                                                              "--skip-root-refresh"),
        "test_an_event_without_a_device_form_is_one_line": lambda: check(tree, overlay, "--steps", "1",
                                                                         NO_DEVICE_FORM),
        "test_unilabs_command_line_trains_on_it": lambda: train(tree, overlay, base / "run"),
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
    assert counts["truncated"] >= 16 * 7 and counts["pushes"] >= 10 and counts["done_mismatches"] == 0, counts


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
