"""Each G1 Walk Flat term has one device implementation, its torch twin, and it is UniLab's term.

``experiments/evidence/device_terms_check.py`` runs in a process of its own from the applied tree on MuJoCo Warp's
CPU device: G1 Walk Flat's UniLab env steps itself (16 envs, 30 steps of seeded random actions, 0.5 s episodes, so
a time-out and the reset of every row within the run) and, inside each step on the state its own terms read, every
observation, reward and termination term of the config is computed by UniLab's NumPy term and by its torch twin
(``flashsac_runtime.envs.terms.twin_of``) on identical inputs. Terminations must be equal, observations and rewards
within 1e-6 of the NumPy value's magnitude (at least 1); every twin of ``terms._unilab_terms`` is one the config
uses. Control: the twin of ``tracking_lin_vel`` given its ``tracking_sigma`` scaled by 1.001 fails that term, and
only it. The device env's term binding refuses the first of two terms without a twin in one line.

Where this test sits: ``tests/test_device_env.py`` steps the whole device env beside UniLab's NumPy env (the terms
together, through the env's step, resets and draws); this one compares the terms one by one, so that a term that
differs is named.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ONE_THREAD, PROJECT, SideBySide, runnable_tree

CHECK = PROJECT / "experiments" / "evidence" / "device_terms_check.py"
#: Each test's run of the check (its arguments); they run side by side (conftest.SideBySide).
RUNS = {
    "test_every_twin_is_its_unilab_term_on_the_same_state": ("--steps", "30"),
    "test_a_twin_with_a_perturbed_parameter_is_caught": ("--steps", "3", "--perturb",
                                                          "tracking_lin_vel:tracking_sigma"),
}


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         applied_session: tuple[Path, Path]) -> Iterator[SideBySide]:
    root = runnable_tree(applied_session[0], tmp_path_factory.mktemp("device-terms") / "unilab")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([str(applied_session[1]), str(root / "src")]), MUJOCO_GL="disable",
               UNISIM_MJWARP_ALLOW_CPU="1", CUDA_VISIBLE_DEVICES="", **ONE_THREAD)

    def run(*args: str) -> tuple[int, dict, str]:
        proc = subprocess.run([sys.executable, str(CHECK), *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=600, check=False)
        lines = proc.stdout.strip().splitlines()
        return proc.returncode, json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}, proc.stderr

    side = SideBySide(request).start({name: functools.partial(run, *args) for name, args in RUNS.items()})
    yield side
    side.close()


def test_every_twin_is_its_unilab_term_on_the_same_state(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 0 and result["holds"] and result["failed"] == [], (result.get("failed"), err[-3000:])
    kinds = {term["kind"] for term in result["terms"]}
    assert kinds == {"observation", "reward", "termination"} and len(result["terms"]) >= 20, result["terms"]
    assert result["done_rows"] >= 16, result  # a time-out and the reset of every row within the run
    assert result["twins_unused_by_the_config"] == [], result["twins_unused_by_the_config"]
    for term in result["terms"]:
        assert term["first_failure_step"] is None and term["max_rel_diff"] <= 1e-6, term
        if term["kind"] != "reward":  # observations and terminations: the same arithmetic, bitwise
            assert term["bitwise"], term
    assert result["refusal"] == (
        "the device env has no torch twin of reward term 'penalty_lin_vel_z' "
        "(unilab.tasks.locomotion.common.sensor_reward_terms.lin_vel_z); use training.collector=host for this task")


def test_a_twin_with_a_perturbed_parameter_is_caught(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    rc, result, err = runs.result(request)
    assert rc == 1 and not result["holds"], (result, err[-3000:])
    assert result["failed"] == ["reward:tracking_lin_vel"], result["failed"]
    (term,) = [term for term in result["terms"] if term["name"] == "tracking_lin_vel"]
    assert term["first_failure_step"] == 0 and term["max_rel_diff"] > 1e-5, term
