"""G1 motion tracking's device env (``flashsac_runtime.envs.MotionTrackingDeviceEnv``) on Warp's CPU device.

``experiments/evidence/motion_device_env_check.py`` steps it beside UniLab's own motion tracking env on MuJoCo Warp
(``task=g1_motion_tracking/mjwarp``, the synthetic clip of ``scripts/offline/motion_clip.py``), both from the same
seed, the device env fed UniLab's NumPy draws: 16 envs, 100 steps of seeded random actions, 0.6 s episodes (rows
terminate, time out and reach the clip's end, and reset with adaptive start frames). Observations of both groups,
final observations, qpos, qvel, dones, each row's frame and the adaptive sampler's failure statistics must be
bitwise equal, rewards within 1e-6; also with ``sampling_mode=uniform``. Controls that must fail: a root pose range
wider by 0.01 (the first reset), the tracked bodies' sensors left a substep behind (the first step's rewards). A
sampling mode without a device form is refused in one line naming it. As training builds it (its own torch draws,
draws ahead, the reset only on a step with a done row) its step reads nothing on the host, which a CUDA capture
forbids (control: a 0-d tensor index in the clip-end termination is found), and every tensor of its state keeps its
storage from step to step, since the step's CUDA graph reads the addresses of its capture (control: the command's
robot and relative state bound anew are found). UniLab's command line trains 3 iterations on
it with ``training.collector=device``, which finds its factory by task and backend (unilab 0009).
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
from offline import numba_kernels

CHECK = PROJECT / "experiments" / "evidence" / "motion_device_env_check.py"
GENERATOR = PROJECT / "scripts" / "offline" / "motion_clip.py"
SHORT = ("algo.num_envs=16", "algo.batch_size=32", "algo.replay_buffer_n=8", "algo.learning_starts=2",
         "algo.max_iterations=3", "algo.save_interval=0", "training.no_play=true", "training.export_onnx=false",
         "training.logger=no_print")
EXACT = ("obs", "critic", "final_obs", "final_critic", "qpos", "qvel", "frames", "bin_failed")


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
    argv = [sys.executable, "src/unilab/scripts/train_flashsac.py", "task=g1_motion_tracking/mjwarp",
            "training.collector=device", *SHORT,
            f"training.log_dir='{run / 'log'}'"]
    return subprocess.run(argv, cwd=tree, env=child_env(tree, overlay), capture_output=True, text=True,
                          timeout=900, check=False), run


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, applied_session: tuple[Path, Path],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySide]:
    checkout, overlay = applied_session
    base = tmp_path_factory.mktemp("motion-device-env")
    tree = runnable_tree(checkout, base / "unilab")
    clip = subprocess.run([sys.executable, str(GENERATOR), "--tree", str(tree)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert clip.returncode == 0 and "synthetic G1 motion clip written" in clip.stdout, clip.stderr
    # The host's set-up step first (`make apply OFFLINE=`), into a cache emptied of any copied from the checkout:
    # the checks below then load UniLab's Numba kernels rather than each compiling them.
    for stale in (tree / numba_kernels.CACHE).glob("kernels.*.nb[ic]"):
        stale.unlink()
    warmed = numba_kernels.compile_into(tree, overlay)
    compiled = numba_kernels.cached(tree)
    started = SideBySide(request).start({
        "test_the_device_env_steps_unilabs_motion_tracking_trajectory": lambda: check(tree, overlay, "--steps", "100"),
        "test_uniform_start_frames_hold_too": lambda: check(
            tree, overlay, "--steps", "40", "env.commands.motion.params.sampling_mode=uniform"),
        "test_a_wider_root_pose_range_is_reported": lambda: check(tree, overlay, "--steps", "5", "--perturb-pose"),
        "test_stale_body_sensors_are_reported": lambda: check(tree, overlay, "--steps", "5", "--skip-body-refresh"),
        "test_a_sampling_mode_without_a_device_form_is_one_line": lambda: check(
            tree, overlay, "--steps", "1", "env.commands.motion.params.sampling_mode=mixed"),
        "test_the_training_step_reads_nothing_on_the_host": lambda: check(tree, overlay, "--host-reads",
                                                                          "--steps", "40"),
        "test_a_0d_tensor_index_is_a_host_read": lambda: check(tree, overlay, "--host-reads", "--steps", "3",
                                                               "--broken-index"),
        "test_a_state_bound_anew_is_reported": lambda: check(tree, overlay, "--host-reads", "--steps", "3",
                                                             "--rebind-state"),
        "test_unilabs_command_line_trains_on_it": lambda: train(tree, overlay, base / "run"),
        "test_after_the_hosts_numba_step_nothing_compiles": lambda: (
            warmed, compiled, check(tree, overlay, "--steps", "5"), numba_kernels.cached(tree)),
    })
    yield started
    started.close()


def holds(rc: int, result: dict, err: str) -> None:
    assert rc == 0 and result["equal"], (result, err[-3000:])
    worst = result["max_abs_diff"]
    assert all(worst[k] == 0.0 for k in EXACT), worst
    assert worst["reward"] <= result["reward_atol"]
    assert result["counts"]["done_mismatches"] == 0, result["counts"]


def test_the_device_env_steps_unilabs_motion_tracking_trajectory(runs: SideBySide,
                                                                  request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    holds(rc, result, err)
    counts = result["counts"]
    assert counts["terminated"] >= 48 and counts["truncated"] >= 8 and counts["clip_ends"] >= 1, counts
    # every episode that ended is measured, from its start: 0.6 s episodes are 30 steps at most (a row may
    # terminate and time out at one step: one episode)
    episodes = result["episodes"]
    assert max(counts["terminated"], counts["truncated"]) <= episodes["finished"] \
        <= counts["terminated"] + counts["truncated"], (episodes, counts)
    assert 1 <= episodes["shortest"] <= episodes["mean_length"] <= 30, episodes


def test_uniform_start_frames_hold_too(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    holds(rc, result, err)
    assert result["counts"]["terminated"] >= 8, result["counts"]


def test_a_wider_root_pose_range_is_reported(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1 and not result["equal"], (result, err[-3000:])
    first = result["first_mismatch_step"]
    assert first["obs"] == -1 and first["qpos"] == 0, first


def test_stale_body_sensors_are_reported(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1 and result["first_mismatch_step"].get("reward") == 0, (result, err[-3000:])


def test_a_sampling_mode_without_a_device_form_is_one_line(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, _, err = runs.result(request)
    last = err.strip().splitlines()[-1]
    assert rc == 2 and last == ("motion_device_env_check: the device env has no device form of motion "
                                "sampling_mode 'mixed'"), err[-3000:]


def test_the_training_step_reads_nothing_on_the_host(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 0 and result["host_reads"] == [] and result["calls"] == 0, (result, err[-3000:])
    assert result["describe"]["draws_ahead"] == "true" and result["describe"]["reset"] == "when_done", result
    # the state the next step reads stays in its storage (a step's CUDA graph reads the addresses of its capture)
    assert result["rebound"] == [], result


def test_a_state_bound_anew_is_reported(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1 and result["host_reads"] == [], (result, err[-3000:])
    assert "state.motion.relative.body_pos_relative_w" in result["rebound"], result
    assert "state.motion.robot.pos" in result["rebound"], result


def test_a_0d_tensor_index_is_a_host_read(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1 and result["host_reads"] == ["__getitem__ with a 0-d tensor index"], (result, err[-3000:])


def test_unilabs_command_line_trains_on_it(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    proc, run = runs.result(request)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((run / "log" / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["completed_iterations"] == 3, summary
    manifest = summary["runtime_manifest"]
    assert manifest["collector"] == "device-resident", manifest
    assert manifest["device_env"]["draws_ahead"] == "true" and manifest["device_env"]["terms"] == "torch", manifest


def test_after_the_hosts_numba_step_nothing_compiles(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    """`make apply OFFLINE=`'s step compiles every kernel UniLab's motion tracking env calls, with the types the
    device env's build and steps on MuJoCo Warp give them: a run on that host compiles none before its first
    iteration. The step's own count is the control that the cache shows a compile (7 kernels into an empty one)."""
    warmed, compiled, (rc, result, err), after = runs.result(request)
    assert "7 compiled into" in warmed and ", 0 already there," in warmed, warmed
    assert len([name for name in compiled if name.endswith(".nbi")]) == 7, compiled
    assert rc == 0 and result["equal"], err[-3000:]
    assert after == compiled, sorted(after - compiled)
