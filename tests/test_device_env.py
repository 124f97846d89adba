"""The device-resident G1 Walk Flat env (unilab patch: ``flashsac_runtime.envs``) is the task of UniLab 1.3.2.

Every check runs ``experiments/evidence/device_env_check.py`` in a process of its own from the applied tree, on MuJoCo
Warp's CPU device (unisim's opt-in) and torch CPU tensors: the device runtime itself, not only its pieces. Each
process is forked from an interpreter that imported the check's modules once (``forked_runs``: the imports were
most of a fresh process's time). The checks are independent and run side by side, one per core with one torch
thread (conftest.SideBySide); each test asserts on its own.

1. Fed UniLab's own NumPy draws, the device env steps the NumPy env's trajectory: 16 envs x 200 steps of
   random actions with 1 s episodes (terminations and time-outs, dozens of resets), both observation groups,
   the final observations, qpos and dones bitwise equal, rewards within 1e-6. Controls: one reward term
   scaled by 1.001 is reported from the first steps; a kp range wider by 0.05 changes the physics at once.
2. With its own torch draws, the reset's root state (offsets, orientation, linear and angular velocities), pd gains,
   commands and their resampling time, gait phases and observation noise have the config's distributions (inside,
   covering, centred, uniform: ``device_env_distribution``, which Go2's check shares). Control: the env built with a
   narrower kp range fails the check against the tree's range.
3. The step reads nothing on the host (no ``item``, no 0-d or boolean tensor index, no tensor from host data):
   each would be a sync on CUDA that breaks the step's CUDA graph. Control: a 0-d tensor index is found.
4. A task term without a torch twin is refused with one line.
5. The GPU evidence folder's README is generated from its JSONs.
6. The count of a step's torch operations by env method (``--mode ops``) adds up, and each part is where its work
   is. Control: with one reward term removed, the reward's count drops and no other part's moves.
7. The physics' sensors computed in the last substep only (the default) leave every MuJoCo Warp array and every env
   output bitwise as sensors in every substep do, over 30 steps with resets, with fewer kernel launches. Control:
   with no sensors in the last substep either, the sensors and the observations differ at the first step.
8. A step's draws taken ahead (``draws_ahead``: every draw, and what follows from draws alone, taken beside the
   step before) leave every MuJoCo Warp array and env output bitwise as draws taken in the step, over 30 steps
   with resets; about half of the step's torch operations are taken ahead, none inside the step's CUDA graph; the
   step reads nothing on the host either way. Controls: the reset's draws taken before the observation noise
   differ at the first step; the next step's draws taken inside the step's graph are found there.
9. A step whose CUDA graph capture fails (simulated on the CPU: the capture moves the draws' generator, as a real
   one does, then fails) says it stays eager and steps on bitwise as a twin that never tried, from the draws it
   would have taken. Control: the generator moved and not put back differs at once.
10. With draws ahead and ``reset_only_when_done``, the reset of the done rows runs only on a step with a done row
   (a conditional node of the step's CUDA graph; on the CPU, Warp's direct read of the flag): over 60 steps with time-outs, the env outputs
   and every MuJoCo Warp array stay bitwise as with the reset on every step, except, after a step without a done
   row, the derived arrays the reset's kinematics pass writes (the next step's forward computes them again
   before reading them), with fewer Warp launches per step. Control: the condition never set differs at the first
   time-out.
11. The step's timestamps of its parts (``step_stamps``: the collector's split of the env step into the physics,
   the terms and the reset) put each part's time where it is spent: 1 s added to one part of every step (the
   physics' substeps, the terms' work after them, the reset's conditional) grows that part in the fastest of four
   steps by at least 80 % of it and moves the others by less than 30 %, and every read of the ring (a copy, as the
   collector reads it) sees exactly the step since the last one as the ring goes round. The stamp kernel's CUDA side
   (its read of the device clock) builds as an sm_90 cubin with Warp's compiler. Control: the physics' stamp taken before the
   physics moves the physics' time into the terms.
12. Without the acceleration stage of the sensors (the default: G1 Walk Flat reads none of its accelerometers and
   contact sensors), the env outputs, every other sensor and every MuJoCo Warp array but the post-constraint RNE's
   (``cacc``, ``cfrc_int``, ``cfrc_ext``) stay bitwise as with every stage in the last substep, over 60 steps with
   resets, with fewer Warp launches per step; reading one of those sensors is a one-line error. Control: the
   position and velocity sensors computed after the integration (on the next state) differ at the first step.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CORES, ONE_THREAD, PROJECT, SideBySide, runnable_tree
from forked_runs import ForkServer

CHECK = PROJECT / "experiments" / "evidence" / "device_env_check.py"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> tuple[Path, Path]:
    return runnable_tree(applied_session[0], tmp_path_factory.mktemp("device-env") / "unilab"), applied_session[1]


#: What the checks import after their top level (the env's backend, MuJoCo Warp, the task): the fork server
#: imports them once.
LATE_IMPORTS = ("mujoco_warp", "unisim.backend.mjwarp.backend", "unilab.tasks.locomotion.g1.manager_terms",
                "flashsac_runtime.envs")


def check(checks: ForkServer, *args: str) -> tuple[int, dict, str]:
    rc, out, err = checks.run(*args)
    lines = out.strip().splitlines()
    result = json.loads(lines[-1]) if rc in (0, 1) and lines else {}
    return rc, result, err


TWIN_MISSING = ("+reward.penalty_lin_vel_z={func: unilab.tasks.locomotion.common.sensor_reward_terms.lin_vel_z,"
                " weight: -1.0, params: {sensor_name: pelvis_local_linvel}}")
OPS = ("--mode", "ops", "--num-envs", "16", "--steps", "2")
SENSORS = ("--mode", "sensors", "--num-envs", "16", "--steps", "30", "--episode-seconds", "0.5")
AHEAD = ("--mode", "draws-ahead", "--num-envs", "16", "--steps", "30", "--episode-seconds", "0.5")
AHEAD_CONTROL = ("--mode", "draws-ahead", "--num-envs", "16", "--steps", "2")
FAILED = ("--mode", "failed-capture", "--num-envs", "16", "--episode-seconds", "0.5")
RESET = ("--mode", "reset-when-done", "--num-envs", "16", "--episode-seconds", "0.5")
SPLIT = ("--mode", "step-split", "--num-envs", "16", "--steps", "4", "--episode-seconds", "0.5")
STAGES = ("--mode", "sensor-stages", "--num-envs", "16", "--episode-seconds", "0.5")
#: Each test's check (the arguments of device_env_check.py); they run side by side (conftest.SideBySide).
CHECKS = {
    "test_device_env_steps_the_numpy_envs_trajectory": ("--mode", "parity", "--num-envs", "16", "--steps", "200"),
    "test_a_perturbed_reward_term_is_reported": ("--mode", "parity", "--steps", "30",
                                                 "--perturb-reward", "penalty_feet_ori"),
    "test_a_wrong_kp_range_changes_the_physics": ("--mode", "parity", "--steps", "10", "--perturb-kp"),
    "test_device_env_draws_have_the_configs_distributions": ("--mode", "distribution", "--num-envs", "256",
                                                             "--steps", "10"),
    "test_a_wrong_range_fails_the_distribution_check": ("--mode", "distribution", "--num-envs", "256", "--steps", "2",
                                                        "--override", "env.events.pd_gains.params.kp_range=[0.95,1.05]"),
    "test_a_term_without_a_twin_is_refused": ("--mode", "distribution", "--num-envs", "16", "--steps", "1",
                                              "--override", TWIN_MISSING),
    "test_the_step_reads_nothing_on_the_host": ("--mode", "host-reads", "--num-envs", "16", "--steps", "20"),
    "test_a_0d_tensor_index_is_a_host_read": ("--mode", "host-reads", "--num-envs", "16", "--steps", "3",
                                              "--broken-index"),
    "test_the_step_with_draws_ahead_reads_nothing_on_the_host": ("--mode", "host-reads", "--num-envs", "16",
                                                                 "--steps", "20", "--draws-ahead"),
}
#: Tests whose run is several checks, one after the other (a check or count and its controls).
SEQUENCES = {
    "test_the_steps_torch_operations_are_counted_by_env_method": (OPS, (*OPS, "--override", "~reward.penalty_feet_ori")),
    "test_sensors_in_the_last_substep_only_leave_the_same_step": (SENSORS, ("--mode", "sensors", "--num-envs", "16",
                                                                            "--steps", "2", "--broken-sensors")),
    "test_draws_taken_ahead_leave_the_same_step": (AHEAD, (*AHEAD_CONTROL, "--broken-draw-order"),
                                                   (*AHEAD_CONTROL, "--draws-in-step-graph")),
    "test_a_failed_capture_steps_on_with_the_draws_it_would_have_taken": ((*FAILED, "--steps", "10"),
                                                                          (*FAILED, "--steps", "2", "--no-restore")),
    "test_the_reset_runs_only_on_a_step_with_a_done_row": ((*RESET, "--steps", "60"),
                                                           (*RESET, "--steps", "26", "--reset-never")),
    "test_the_step_split_puts_each_parts_time_where_it_is_spent": (SPLIT, (*SPLIT, "--misplaced-stamp")),
    "test_the_acceleration_stage_of_the_sensors_is_left_out_unread": ((*STAGES, "--steps", "60"),
                                                                      (*STAGES, "--steps", "2",
                                                                       "--sensors-after-integration")),
}


@pytest.fixture(scope="module")
def checks(request: pytest.FixtureRequest, tree: tuple[Path, Path]) -> Iterator[SideBySide]:
    root, overlay = tree
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([str(overlay), str(root / "src")]), MUJOCO_GL="disable",
               UNISIM_MJWARP_ALLOW_CPU="1", CUDA_VISIBLE_DEVICES="", **ONE_THREAD)
    forked = ForkServer(LATE_IMPORTS, env=env, cwd=root, script=CHECK).start(CORES)

    def in_order(*runs: tuple[str, ...]) -> tuple:
        return tuple(check(forked, *args) for args in runs)

    runs = SideBySide(request).start({
        **{name: functools.partial(check, forked, *args) for name, args in CHECKS.items()},
        **{name: functools.partial(in_order, *runs) for name, runs in SEQUENCES.items()}})
    yield runs
    runs.close()
    forked.close()


@pytest.fixture
def checked(request: pytest.FixtureRequest, checks: SideBySide) -> tuple[int, dict, str]:
    """This test's check: its exit status, its JSON line and its stderr."""
    return checks.result(request)


def test_device_env_steps_the_numpy_envs_trajectory(checked: tuple[int, dict, str]) -> None:
    rc, result, err = checked
    assert rc == 0, (result, err[-3000:])
    assert result["first_mismatch_step"] == {}
    diffs = result["max_abs_diff"]
    assert diffs["obs"] == diffs["critic"] == diffs["final_obs"] == diffs["qpos"] == 0.0
    assert diffs["reward"] <= 1e-6
    assert result["counts"]["terminated"] > 32 and result["counts"]["truncated"] > 0


def test_a_perturbed_reward_term_is_reported(checked: tuple[int, dict, str]) -> None:
    rc, result, err = checked
    assert rc == 1, (result, err[-3000:])
    assert result["first_mismatch_step"]["reward"] <= 2
    assert result["max_abs_diff"]["obs"] == 0.0  # only the reward moved


def test_a_wrong_kp_range_changes_the_physics(checked: tuple[int, dict, str]) -> None:
    rc, result, err = checked
    assert rc == 1, (result, err[-3000:])
    assert result["first_mismatch_step"]["qpos"] == 0


def test_device_env_draws_have_the_configs_distributions(checked: tuple[int, dict, str]) -> None:
    rc, result, err = checked
    assert rc == 0, (result.get("failed"), err[-3000:])
    assert len(result["checks"]) == 21
    spread = [c for c in result["checks"] if c["range"][0] < c["range"][1]]
    assert len(spread) == 17 and all(c["covers"] and c["centred"] and c["uniform"] for c in spread)


def test_a_wrong_range_fails_the_distribution_check(checked: tuple[int, dict, str]) -> None:
    rc, result, err = checked
    assert rc == 1, (result, err[-3000:])
    assert result["failed"] == ["kp scale"]


def test_a_term_without_a_twin_is_refused(checked: tuple[int, dict, str]) -> None:
    rc, _, err = checked
    assert rc == 2
    assert err.strip().splitlines()[-1] == (
        "device_env_check: the device env has no torch twin of reward term 'penalty_lin_vel_z' "
        "(unilab.tasks.locomotion.common.sensor_reward_terms.lin_vel_z); use training.collector=host for this task")


def test_the_step_reads_nothing_on_the_host(checked: tuple[int, dict, str]) -> None:
    rc, result, err = checked
    assert rc == 0, (result, err[-3000:])
    assert result["host_reads"] == [] and result["calls"] == 0


def test_a_0d_tensor_index_is_a_host_read(checked: tuple[int, dict, str]) -> None:
    rc, result, err = checked
    assert rc == 1, (result, err[-3000:])
    assert result["host_reads"] == ["__getitem__ with a 0-d tensor index"]


def test_the_evidence_readme_is_generated_from_its_jsons(tmp_path: Path) -> None:
    """results/2026-12-01-h200-device-env/README.md is device_env_report.py's output; a changed figure fails."""
    report = PROJECT / "experiments" / "evidence" / "device_env_report.py"
    folder = PROJECT / "results" / "2026-12-01-h200-device-env"
    ok = subprocess.run([sys.executable, str(report), str(folder), "--check"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    copy = tmp_path / "evidence"
    shutil.copytree(folder, copy)
    record = copy / "trainings" / "device-collector-unilab-default.json"
    data = json.loads(record.read_text())
    data["final_cycle_wall_ms"] += 1.0
    record.write_text(json.dumps(data))
    stale = subprocess.run([sys.executable, str(report), str(copy), "--check"], capture_output=True, text=True)
    assert stale.returncode == 1 and "disagrees with its JSONs" in stale.stderr


def test_the_steps_torch_operations_are_counted_by_env_method(checks: SideBySide, request: pytest.FixtureRequest) -> None:
    (rc, counted, err), (rc_control, control, err_control) = checks.result(request)
    assert rc == rc_control == 0, (err[-3000:], err_control[-3000:])
    parts = counted["compute_ops_per_step_by_part"]
    assert sum(parts.values()) == counted["compute_ops_per_step"] > 300 and counted["views_per_step"] > 0
    # Every part of the step runs torch work, the reset path's every step over every env.
    assert all(parts.get(part, 0) > 0 for part in ("_reward", "_observe", "_reset_rows", "_reset_state",
                                                   "_resample_command", "_update_curriculum", "_terminate"))
    assert "outside the env's methods" not in parts
    # Control: one reward term fewer lowers the reward's count, and only it.
    moved = {part for part in parts if control["compute_ops_per_step_by_part"].get(part) != parts[part]}
    assert moved == {"_reward"} and control["compute_ops_per_step_by_part"]["_reward"] < parts["_reward"]


def unfilled(name: str) -> bool:
    """An array MuJoCo Warp allocates and leaves unfilled for G1 Walk Flat: its constraint islands (off for this
    model). The side-by-side checks zero what differs right after the reset; anything else differing there would
    be hidden, so it fails the test."""
    return "island" in name or name.startswith("map_") or name == "nidof"


def test_sensors_in_the_last_substep_only_leave_the_same_step(checks: SideBySide, request: pytest.FixtureRequest) -> None:
    (rc, same, err), (rc_control, control, err_control) = checks.result(request)
    assert rc == 0 and same["equal"] and same["first_difference_step"] == {}, (same, err[-3000:])
    assert same["arrays_compared"] > 100 and same["done_rows"] > 0
    assert all(unfilled(name) for name in same["unfilled_at_reset"]), same["unfilled_at_reset"]
    launches = same["warp_launches_per_step"]
    assert launches["last_substep"] < launches["every_substep"], launches
    # Control: no sensors in the last substep either; the check sees it at once.
    assert rc_control == 1 and not control["equal"], (control, err_control[-3000:])
    assert control["first_difference_step"]["sensordata"] == 0 and control["first_difference_step"]["policy_obs"] == 0


def test_draws_taken_ahead_leave_the_same_step(checks: SideBySide, request: pytest.FixtureRequest) -> None:
    (rc, same, err), (rc_order, order, err_order), (rc_in_graph, in_graph, err_in_graph) = checks.result(request)
    assert rc == 0 and same["holds"] and same["first_difference_step"] == {}, (same, err[-3000:])
    assert same["arrays_compared"] > 100 and same["done_rows"] > 0
    assert all(unfilled(name) for name in same["unfilled_at_reset"]), same["unfilled_at_reset"]
    # About half of the step's torch work follows from draws alone; the root state's float64 math is all of it.
    assert 0.4 < same["compute_ops_drawn_ahead_per_step"] / same["compute_ops_per_step"] < 0.6, same
    assert same["drawn_ahead_by_part"]["_reset_state"] > 100
    # None of it inside the step's CUDA graph, where it could only run behind the physics.
    assert same["draw_ops_in_step_graph"] == 0, same
    assert same["numpy_draws_refused"] == "draws ahead of the physics need row-independent draws (TorchDraws)"
    # Control: the reset's draws before the observation noise; the observations differ at once.
    assert rc_order == 1 and order["first_difference_step"]["policy_obs"] == 0, (order, err_order[-3000:])
    # Control: the next step's draws taken inside the step's graph; the same numbers, but found there.
    assert rc_in_graph == 1 and in_graph["equal"] and not in_graph["holds"], (in_graph, err_in_graph[-3000:])
    assert in_graph["draw_ops_in_step_graph"] == in_graph["compute_ops_drawn_ahead_per_step"], in_graph


def test_the_step_with_draws_ahead_reads_nothing_on_the_host(checked: tuple[int, dict, str]) -> None:
    rc, result, err = checked
    assert rc == 0 and result["host_reads"] == [] and result["calls"] == 0, (result, err[-3000:])
    assert result["rebound"] == [], result  # the step's CUDA graph reads the addresses of its capture


def test_a_failed_capture_steps_on_with_the_draws_it_would_have_taken(checks: SideBySide,
                                                                      request: pytest.FixtureRequest) -> None:
    (rc, same, err), (rc_control, control, err_control) = checks.result(request)
    assert rc == 0 and same["equal"] and same["first_difference_step"] == {}, (same, err[-3000:])
    assert same["graph_status"] == "eager (capture failed: the capture failed (on purpose))", same
    assert "G1WalkDeviceEnv: the step stays eager" in err, err[-2000:]  # said, in one line
    assert all(unfilled(name) for name in same["unfilled_at_reset"]), same["unfilled_at_reset"]
    # Control: the generator moved as by the failed capture, and not put back: the reset already differs.
    assert rc_control == 1 and control["first_difference_step"]["policy_obs"] == 0, (control, err_control[-3000:])


#: The derived arrays of MuJoCo Warp's kinematics and COM velocity stages (body, geom and site poses, COM
#: quantities): what the reset's kinematics pass may leave different after a step without a done row.
DERIVED = {"xpos", "xquat", "xmat", "xipos", "ximat", "xanchor", "xaxis", "geom_xpos", "geom_xmat", "site_xpos",
           "site_xmat", "subtree_com", "cdof", "cinert", "cvel", "cdof_dot"}


def test_the_reset_runs_only_on_a_step_with_a_done_row(checks: SideBySide, request: pytest.FixtureRequest) -> None:
    (rc, same, err), (rc_control, control, err_control) = checks.result(request)
    assert rc == 0 and same["holds"] and same["first_difference_step"] == {}, (same, err[-3000:])
    assert same["arrays_compared"] > 100 and set(same["kinematics_pass_writes"]) <= DERIVED, same
    assert {"qpos", "qvel", "qacc_warmstart", "sensordata"}.isdisjoint(same["kinematics_pass_writes"]), same
    done_steps = same["steps"] - same["idle_steps"]
    assert same["idle_steps"] >= 40 and done_steps >= 2 and same["done_rows"] >= 32, same
    launches = same["warp_launches_per_step"]
    assert launches["when_done"] < launches["every_step"], launches
    # Control: the condition never set: the time-out at step 24 (0.5 s episodes) resets no row, and the physics,
    # the sensors and the observations differ there.
    differ = control["first_difference_step"]
    assert rc_control == 1 and not control["holds"], (control, err_control[-3000:])
    assert differ["qpos"] == differ["policy_obs"] == 24, differ


def test_the_step_split_puts_each_parts_time_where_it_is_spent(checks: SideBySide, request: pytest.FixtureRequest) -> None:
    (rc, split, err), (rc_control, control, err_control) = checks.result(request)
    assert rc == 0 and split["holds"], (split, err[-3000:])
    assert split["parts"] == ["env_physics", "env_terms", "env_reset"] and split["steps_read"] == [1] * 16, split
    assert split["form"]["step_split"] == "stamped" and split["form"]["terms"] == "torch", split["form"]
    for part, grown in split["grew_ms"].items():
        assert grown[part] >= 0.8 * split["delay_ms"], (part, grown)
        assert all(abs(value) < 0.3 * split["delay_ms"] for other, value in grown.items() if other != part), grown
    assert split["cuda_build"] == {"module": "flashsac_runtime.envs.step_stamps", "arch": 90, "cubin": True,
                                   "reads_globaltimer": True}, split["cuda_build"]
    # Control: the physics' stamp before the physics: the physics' delay lands in the terms.
    assert rc_control == 1 and not control["holds"], (control, err_control[-3000:])
    assert control["grew_ms"]["env_physics"]["env_terms"] >= 0.8 * control["delay_ms"], control["grew_ms"]


def test_the_acceleration_stage_of_the_sensors_is_left_out_unread(checks: SideBySide,
                                                                   request: pytest.FixtureRequest) -> None:
    (rc, same, err), (rc_control, control, err_control) = checks.result(request)
    assert rc == 0 and same["holds"], (same, err[-3000:])
    assert same["forms"] == {"every_stage": "last_substep", "default": "position_velocity"}, same["forms"]
    assert set(same["first_difference_step"]) <= {"cacc", "cfrc_int", "cfrc_ext"}, same["first_difference_step"]
    assert same["arrays_compared"] > 100 and same["done_rows"] >= 32, same
    assert {"pelvis_acceleration", "torso_acceleration", "left_foot_contact_0"} <= set(
        same["acceleration_stage_sensors"]), same["acceleration_stage_sensors"]
    assert same["reading_one"].startswith("the device env reads ") and same["reading_one"].endswith(
        "its factory must pass acceleration_sensors=True"), same["reading_one"]
    launches = same["warp_launches_per_step"]
    assert launches["default"] < launches["every_stage"], launches
    # Control: the position and velocity sensors of the integrated state: the observations differ at once.
    assert rc_control == 1 and not control["holds"], (control, err_control[-3000:])
    assert control["first_difference_step"]["policy_obs"] == 0, control["first_difference_step"]
