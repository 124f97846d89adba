"""The GPU-only evidence tools behave on the CPU, so that a lent GPU's minutes are not lost to a broken script.

The learner kernel profile's, the env form bench's and the beside-physics bench's smoke runs are marked extended
(``make test-extended``, to run before a GPU call); the block width bench's bitwise check and the refusals stay in
``make test``.

- ``experiments/evidence/learner_kernel_profile.py`` runs on the CPU as a smoke run: the learner built as training
  builds it (G1 Walk Flat's dimensions from its env), warmed up, timed and profiled; the operations it counts add
  up over their kinds, and the per-update path and the learner without aligned products and combo kernels are the
  ones it says it ran.
- ``experiments/evidence/device_env_bench.py --forms`` runs on Warp's CPU device as a smoke run: each form of the
  device env's step is built as named (the form each env says it ran, its sensors' stages too), stepped in
  alternating blocks, and timed.
- ``experiments/evidence/mjwarp_block_dim_bench.py --cpu-smoke`` steps MuJoCo Warp with each block width it tries,
  each from the same kept state: on Warp's CPU device a block is one thread, so every width must give the default's
  step bitwise (a width that did not start from the kept state would not).
- ``experiments/evidence/learner_beside_physics_bench.py --cpu-smoke`` builds the device env and, per SM carveout, the
  learner at the report's setting (its 2/1/1 schedule) on the CPU and runs each once; without ``--cpu-smoke`` it
  refuses a machine without CUDA in one line, exit 2.
- ``experiments/evidence/device_env_graph_check.py`` (the env's CUDA graphs) and
  ``experiments/evidence/capture_failure_check.py`` (a failed capture of the learner's graphed inference) refuse a
  machine without CUDA in one line, exit 2.
- ``experiments/evidence/device_capture_probe.py`` lists each task's parts (Go2's ``set_const`` and ``forward``
  alone and in a conditional node, its reset events and push; motion tracking's command update and resets), refuses
  a machine without CUDA in one line (exit 1), and an unknown task or part in one line (exit 2).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ONE_THREAD, PROJECT, runnable_tree

EVIDENCE = PROJECT / "experiments" / "evidence"


#: A smoke run of a GPU study's script on the CPU (tens of seconds on two cores): ``make test-extended`` runs it before
#: a GPU call; the default suite keeps the block width bench's bitwise check and the refusals.
SMOKE_RUN = pytest.mark.extended


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> tuple[Path, Path]:
    return runnable_tree(applied_session[0], tmp_path_factory.mktemp("gpu-tools") / "unilab"), applied_session[1]


def _run(tree: tuple[Path, Path], script: str, *args: str, **extra: str) -> subprocess.CompletedProcess:
    root, overlay = tree
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([str(overlay), str(root / "src")]), MUJOCO_GL="disable",
               CUDA_VISIBLE_DEVICES="", **ONE_THREAD, **extra)
    return subprocess.run([sys.executable, "-W", "ignore", str(EVIDENCE / script), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@SMOKE_RUN
def test_the_learner_kernel_profile_runs_on_the_cpu(tree: tuple[Path, Path]) -> None:
    proc = _run(tree, "learner_kernel_profile.py", "--setting", "report", "--updates-per-step", "2",
                "--iterations", "2", "--profiled", "1", "--per-update", "--no-aligned-products", "--no-combo-kernels")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["dims"] == {"obs_dim": 98, "critic_obs_dim": 101, "action_dim": 29}, result["dims"]
    assert result["batch_size"] == 256 and result["schedule"] == "2 updates, policy frequency 2", result
    assert result["whole_iteration_graph"] is False and result["device"] == "cpu", result
    # aligned products and combo kernels are the tree's defaults (unilab 0001): the flags turn them off
    assert result["aligned_products"] is False and result["combo_kernels"] is False, result
    profile = result["profile"]
    assert profile["kernels_per_iteration"] > 100, profile
    assert sum(kind["per_iteration"] for kind in profile["by_kind"].values()) == pytest.approx(
        profile["kernels_per_iteration"]), profile["by_kind"]
    assert profile["largest"] and all(entry["us_per_iteration"] >= 0 for entry in profile["largest"]), profile


@SMOKE_RUN
def test_the_env_form_bench_runs_on_the_cpu(tree: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "forms.json"
    proc = _run(tree, "device_env_bench.py", "--forms", "torch", "torch-when-done", "torch-when-done-all-sensors",
                "--num-envs", "16", "--steps", "2", "--rounds", "2", "--cpu-smoke", "--output", str(out),
                UNISIM_MJWARP_ALLOW_CPU="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["study"] == "device-env-forms" and result["cpu_smoke"] is True, result
    (run,) = result["runs"]
    forms = run["forms"]
    assert (forms["torch"]["terms"], forms["torch"]["reset"]) == ("torch", "every_step"), forms
    assert (forms["torch-when-done"]["terms"], forms["torch-when-done"]["reset"]) == ("torch", "when_done"), forms
    assert forms["torch-when-done"]["sensors"] == "position_velocity", forms
    assert forms["torch-when-done-all-sensors"]["sensors"] == "last_substep", forms
    assert all(len(blocks) == 2 and min(blocks) > 0 for blocks in run["blocks_ms_per_step"].values()), run
    assert run["ratio_to_first"]["torch"] == 1.0 and run["device"] == "cpu", run


def test_the_block_width_bench_runs_on_the_cpu(tree: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "block-dim.json"
    proc = _run(tree, "mjwarp_block_dim_bench.py", "--cpu-smoke", "--num-envs", "8", "--warm-steps", "3",
                "--output", str(out), UNISIM_MJWARP_ALLOW_CPU="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    (run,) = result["runs"]
    assert result["study"] == "mjwarp-block-dim" and run["device"] == "cpu" and run["nefc_max"] > 0, run
    differences = run["max_abs_diff_to_default"]
    assert set(differences) == {*result["variants"], "default, run again"}, differences
    assert all(value == 0.0 for diff in differences.values() for value in diff.values()), differences
    assert run["median_ms_per_step"] == {} and set(run["first_step_s"]) == set(result["variants"]), run


@SMOKE_RUN
def test_the_learner_beside_physics_bench_runs_on_the_cpu(tree: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "beside.json"
    proc = _run(tree, "learner_beside_physics_bench.py", "--cpu-smoke", "--carveouts", "16", "--output", str(out),
                UNISIM_MJWARP_ALLOW_CPU="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["study"] == "learner-beside-physics" and result["device"] == "cpu", result
    assert (result["updates_per_step"], result["policy_frequency"], result["batch_size"]) == (2, 2, 256), result
    assert result["carveouts"] == [0, 16] and set(result["learner_iteration_s"]) == {"0", "16"}, result


def test_the_learner_beside_physics_bench_refuses_a_machine_without_cuda(tree: tuple[Path, Path],
                                                                         tmp_path: Path) -> None:
    refused = _run(tree, "learner_beside_physics_bench.py", "--output", str(tmp_path / "refused.json"))
    assert refused.returncode == 2 and not (tmp_path / "refused.json").exists(), refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        "learner_beside_physics_bench: needs a CUDA device (two streams of CUDA graphs)"), refused.stderr[-2000:]


def test_the_env_graph_check_refuses_a_machine_without_cuda(tree: tuple[Path, Path]) -> None:
    proc = _run(tree, "device_env_graph_check.py", "--mode", "memory")
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr[-2000:])
    assert proc.stderr.strip().splitlines()[-1] == (
        "device_env_graph_check: needs a CUDA device (the env's CUDA graphs)"), proc.stderr[-2000:]


def test_the_capture_failure_check_refuses_a_machine_without_cuda(tree: tuple[Path, Path]) -> None:
    proc = _run(tree, "capture_failure_check.py")
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr[-2000:])
    assert proc.stderr.strip().splitlines()[-1] == (
        "capture_failure_check: needs a CUDA device (a CUDA graph capture)"), proc.stderr[-2000:]


def _probe(*args: str) -> subprocess.CompletedProcess:
    """The capture probe without a UniLab tree: listing its parts and its refusals import nothing of UniLab."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(CUDA_VISIBLE_DEVICES="", **ONE_THREAD)
    return subprocess.run([sys.executable, "-W", "ignore", str(EVIDENCE / "device_capture_probe.py"), *args],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("task", "own"), [
    ("go2_joystick_flat", ["set-const", "set-const-conditional", "mass-constants", "mass-constants-conditional",
                           "forward", "forward-conditional", "reset-events", "push"]),
    ("g1_motion_tracking", ["failure-stats", "motion-command", "start-frames", "motion-reset-rows", "motion-reset"]),
])
def test_the_capture_probe_lists_a_tasks_parts_and_refuses_a_machine_without_cuda(task: str, own: list[str]) -> None:
    listed = _probe("--task", task, "--list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    parts = listed.stdout.split()
    assert parts[:7] == ["sync-check", "physics", "reset-data", "forward-rows", "terms", "reset-rows", "body"]
    assert parts[7:] == [*own, "env", "env-after-learner"]
    for args in ((), ("--part", own[0])):
        proc = _probe("--task", task, *args)
        assert proc.returncode == 1 and proc.stdout == "", (proc.stdout, proc.stderr[-2000:])
        assert proc.stderr.strip().splitlines() == [
            "device_capture_probe: no CUDA device; the capture is probed on a GPU"], proc.stderr[-2000:]


@pytest.mark.parametrize(("args", "line"), [
    (("--task", "go2_flat"), "device_capture_probe: unknown task 'go2_flat'; tasks: g1_walk_flat, "
                             "go2_joystick_flat, g1_motion_tracking"),
    (("--part", "set-const"), "device_capture_probe: g1_walk_flat has no part 'set-const'; its parts: "
                              "sync-check, physics, reset-data, forward-rows, terms, reset-rows, body, env, "
                              "env-after-learner"),
])
def test_the_capture_probe_refuses_an_unknown_task_or_part_in_one_line(args: tuple[str, ...], line: str) -> None:
    proc = _probe(*args)
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr[-2000:])
    assert proc.stderr.strip().splitlines() == [line]
