"""Each term of G1 Walk Flat, Go2 Joystick Flat and G1 motion tracking has one device implementation, its torch twin,
and it is UniLab's term.

``experiments/evidence/device_terms_check.py`` runs in a process of its own from the applied tree. A task's UniLab
env steps itself (16 envs, seeded random actions, 0.5 s episodes, so time-outs and the reset of every row within the
run) and, inside each step on the state its own terms read, every observation, reward and termination term of the
config is computed by UniLab's NumPy term and by its torch twin (``flashsac_runtime.envs.terms.twin_of``) on
identical inputs. G1 Walk Flat runs on MuJoCo Warp's CPU device, its twins reading the device env's state; Go2
Joystick Flat runs on CPU MuJoCo, UniLab 1.3.2's own owner of it (its MuJoCo Warp owner is the series'), its twins
reading torch views of the arrays UniLab's terms read there (its meshes are the test assets': ``base_4.obj`` is a
placeholder of a visual-only geom, the physics are the real model's). G1 motion tracking runs on CPU MuJoCo too (its
``mujoco`` owner, on the synthetic clip of ``scripts/offline/motion_clip.py``), its twins reading the motion
command's reference as UniLab holds it and their own relative state, derived where UniLab derives its (32 envs, 60
steps of 0.6 s episodes: each of its terminations ends episodes, the clip's end among them). Terminations must be
equal, observations and rewards within 1e-6 of the NumPy value's magnitude (at least 1), observations and
terminations bitwise; every twin of ``terms._unilab_terms`` is one that a task's config uses. Go2's tilt termination
is also compared with its limit lowered to 0.1 rad, so that it fires and rows reset through it. Controls: a twin
given a parameter scaled by 1.001 (G1's ``tracking_lin_vel`` ``tracking_sigma``, Go2's ``tracking_lin_vel`` ``std``,
motion tracking's ``motion_body_pos`` ``std``) fails that term, and only it. A binding refuses the first of two
terms without a twin in one line.

Where this test sits: ``tests/test_device_env.py`` steps the whole G1 device env beside UniLab's NumPy env (the
terms together, through the env's step, resets and draws); this one compares the terms one by one, so that a term
that differs is named.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ONE_THREAD, PROJECT, SideBySide, runnable_tree

CHECK = PROJECT / "experiments" / "evidence" / "device_terms_check.py"
GO2 = ("--task", "go2_joystick_flat/mujoco")
MOTION = ("--task", "g1_motion_tracking/mujoco")
GENERATOR = PROJECT / "scripts" / "offline" / "motion_clip.py"
#: The runs several tests read (conftest.SideBySide's shared runs): each task's config over a run with resets.
SHARED = {"g1": ("--steps", "30"), "go2": (*GO2, "--steps", "60"),
          "motion": (*MOTION, "--num-envs", "32", "--steps", "60", "--episode-seconds", "0.6")}
#: Each other test's run of the check (its arguments); they run side by side (conftest.SideBySide).
RUNS = {
    "test_go2_tilt_termination_fires_and_holds": (
        *GO2, "--steps", "60", "--override", "env.terminations.bad_orientation.params.limit_angle=0.1"),
    "test_a_twin_with_a_perturbed_parameter_is_caught": ("--steps", "3", "--perturb",
                                                          "tracking_lin_vel:tracking_sigma"),
    "test_a_go2_twin_with_a_perturbed_parameter_is_caught": (*GO2, "--steps", "3", "--perturb",
                                                              "tracking_lin_vel:std"),
    "test_a_motion_twin_with_a_perturbed_parameter_is_caught": (*MOTION, "--steps", "3", "--perturb",
                                                                 "motion_body_pos:std"),
}


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         applied_session: tuple[Path, Path]) -> Iterator[SideBySide]:
    root = runnable_tree(applied_session[0], tmp_path_factory.mktemp("device-terms") / "unilab")
    clip = subprocess.run([sys.executable, str(GENERATOR), "--tree", str(root)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert clip.returncode == 0 and "synthetic G1 motion clip written" in clip.stdout, clip.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([str(applied_session[1]), str(root / "src")]), MUJOCO_GL="disable",
               UNISIM_MJWARP_ALLOW_CPU="1", CUDA_VISIBLE_DEVICES="", **ONE_THREAD)

    def run(*args: str) -> tuple[int, dict, str]:
        proc = subprocess.run([sys.executable, str(CHECK), *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=600, check=False)
        lines = proc.stdout.strip().splitlines()
        return proc.returncode, json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}, proc.stderr

    side = SideBySide(request).start({name: functools.partial(run, *args) for name, args in RUNS.items()},
                                     shared={name: functools.partial(run, *args) for name, args in SHARED.items()})
    yield side
    side.close()


def holds(rc: int, result: dict[str, Any], err: str) -> None:
    """Every term of the run within the tolerance, observations and terminations bitwise."""
    assert rc == 0 and result["holds"] and result["failed"] == [], (result.get("failed"), err[-3000:])
    assert {term["kind"] for term in result["terms"]} == {"observation", "reward", "termination"}, result["terms"]
    for term in result["terms"]:
        assert term["first_failure_step"] is None and term["max_rel_diff"] <= 1e-6, term
        if term["kind"] != "reward":  # observations and terminations: the same arithmetic, bitwise
            assert term["bitwise"], term


def test_every_twin_is_its_unilab_term_on_the_same_state(runs: SideBySide) -> None:
    rc, result, err = runs.shared("g1")
    holds(rc, result, err)
    assert len(result["terms"]) >= 20 and result["done_rows"] >= 16, result  # a time-out, every row reset
    assert result["refusal"] == (
        "the device env has no torch twin of reward term 'penalty_lin_vel_z' "
        "(unilab.tasks.locomotion.common.sensor_reward_terms.lin_vel_z); use training.collector=host for this task")


def test_every_go2_twin_is_its_unilab_term_on_the_same_state(runs: SideBySide) -> None:
    rc, result, err = runs.shared("go2")
    holds(rc, result, err)
    names = {term["name"]: term for term in result["terms"]}
    assert len(names) == 26 and {"contact", "swing_feet_z", "policy/gait_phase", "bad_orientation"} <= set(names)
    assert names["time_out"]["true_count"] >= 32 and result["done_rows"] >= 32, result  # every row timed out twice
    assert result["gait_terms"] == {"count": 4, "phases_agree": True}, result["gait_terms"]
    assert result["refusal"] == (
        "the device env has no torch twin of reward term 'stand_still' "
        "(unilab.tasks.locomotion.common.manager_terms.stand_still_l1); use training.collector=host for this task")


def test_go2_tilt_termination_fires_and_holds(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    holds(rc, result, err)
    (tilt,) = [term for term in result["terms"] if term["name"] == "bad_orientation"]
    assert tilt["true_count"] >= 16 and result["done_rows"] >= 16, (tilt, result["done_rows"])


def test_every_motion_twin_is_its_unilab_term_on_the_same_state(runs: SideBySide) -> None:
    rc, result, err = runs.shared("motion")
    holds(rc, result, err)
    names = {term["name"]: term for term in result["terms"]}
    assert len(names) == 35 and {"critic/body_ori", "motion_body_ori", "joint_limit"} <= set(names), sorted(names)
    for term in ("time_out", "motion_clip_end", "anchor_pos", "anchor_ori", "ee_body_pos"):  # each one ends episodes
        assert names[term]["true_count"] >= 1, names[term]
    for term in ("undesired_contacts", "joint_limit"):  # penalties that are zero while the robot stands: they count
        assert names[term]["true_count"] >= 1, names[term]
    assert result["done_rows"] >= 32, result["done_rows"]
    for term in ("critic/motion_anchor_pos_b", "critic/body_pos", "critic/body_ori", "motion_body_pos"):
        assert names[term]["bitwise"], names[term]  # the relative state: Numba's kernel and the torch form agree
    assert result["refusal"] == (
        "the device env has no torch twin of reward term 'body_pos_z' (unilab.tasks.motion_tracking.common."
        "manager_terms.motion_relative_body_position_z_error_exp); use training.collector=host for this task")


def test_every_twin_is_used_by_a_task_config(runs: SideBySide) -> None:
    """No twin without a term of G1 Walk Flat's, Go2 Joystick Flat's or G1 motion tracking's config (a twin no run
    compares)."""
    unused = [set(runs.shared(task)[1]["twins_unused_by_the_config"]) for task in ("g1", "go2", "motion")]
    assert all(unused)
    assert set.intersection(*unused) == set()


def test_a_twin_with_a_perturbed_parameter_is_caught(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1 and not result["holds"], (result, err[-3000:])
    assert result["failed"] == ["reward:tracking_lin_vel"], result["failed"]
    (term,) = [term for term in result["terms"] if term["name"] == "tracking_lin_vel"]
    assert term["first_failure_step"] == 0 and term["max_rel_diff"] > 1e-5, term


def test_a_motion_twin_with_a_perturbed_parameter_is_caught(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1 and not result["holds"], (result, err[-3000:])
    assert result["failed"] == ["reward:motion_body_pos"], result["failed"]
    (term,) = [term for term in result["terms"] if term["name"] == "motion_body_pos"]
    assert term["first_failure_step"] == 0 and term["max_rel_diff"] > 1e-5, term


def test_a_go2_twin_with_a_perturbed_parameter_is_caught(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1 and not result["holds"], (result, err[-3000:])
    assert result["failed"] == ["reward:tracking_lin_vel"], result["failed"]
    (term,) = [term for term in result["terms"] if term["name"] == "tracking_lin_vel"]
    assert term["first_failure_step"] == 0 and term["max_rel_diff"] > 1e-5, term
