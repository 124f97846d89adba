"""``flashsac_runtime.mjwarp.mass_constants.MassConstants`` on Warp's CPU device (``mass_constants_check.py``).

Go2's scene (with a camera tracking the base's COM, a light targeting it and four damped actuators), 4 worlds, two
rounds of per-world ``body_mass``/``body_ipos`` rows: the rows ``recompute()`` writes (two instances of their own)
are bitwise those ``mujoco_warp.set_const`` writes from the same model, the damping ratios resolved, and the env's
own ``Data`` unchanged. Controls: one world's mass or centre of mass changed in one model
only is caught, in that world alone and in the quantities that follow it. Unsupported models are refused in one
line. Its launches on Go2's plain scene against ``set_const``'s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from conftest import GO2_ASSETS, PROJECT

CHECK = PROJECT / "experiments" / "evidence" / "mass_constants_check.py"
#: Every quantity ``MassConstants`` recomputes, as the check names it.
QUANTITIES = ["body_subtreemass", "meaninertia", "dof_invweight0", "body_invweight0", "cam_pos0", "cam_poscom0",
              "cam_mat0", "light_pos0", "light_poscom0", "light_dir0", "actuator_acc0", "actuator_biasprm"]


@pytest.fixture(scope="module")
def checked(applied_session: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    checkout, overlay = applied_session
    assets = tmp_path_factory.mktemp("go2-scene")
    shutil.copytree(checkout / "src" / "unilab" / "assets" / "robots" / "go2", assets / "robots" / "go2")
    with tarfile.open(GO2_ASSETS) as tar:  # the meshes (conftest.runnable_tree does the same for a whole tree)
        tar.extractall(assets, filter="data")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_CURRENT_TEST")}
    env.update(PYTHONPATH=str(overlay), CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(CHECK), "--scene", str(assets / "robots" / "go2" / "scene_flat.xml")],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode in (0, 1) and proc.stdout.strip(), proc.stderr[-3000:]
    return {"rc": proc.returncode, **json.loads(proc.stdout.strip().splitlines()[-1])}


def test_recompute_writes_set_consts_rows_bitwise(checked: dict[str, Any]) -> None:
    assert checked["rc"] == 0 and checked["ok"], checked
    assert checked["rounds"] == [{"B": {}, "C": {}}] * 2
    assert checked["dampratio_resolved"]


def test_the_envs_data_is_untouched(checked: dict[str, Any]) -> None:
    assert checked["data_changed"] == [] and checked["data_arrays_compared"] > 100


def test_a_row_changed_in_one_model_only_is_caught_in_that_world(checked: dict[str, Any]) -> None:
    """World 1's mass: every per-world quantity that follows mass differs, in world 1 only (the shared rows,
    ``meaninertia`` and the camera's and light's, follow world 0). World 0's centre of mass: the mean inertia and
    the inverse weights differ, the subtree masses do not."""
    mass, com = checked["controls"]["mass (world 1)"], checked["controls"]["CoM (world 0)"]
    assert mass == {name: [1] for name in ("body_subtreemass", "dof_invweight0", "body_invweight0", "actuator_acc0")}
    assert {"meaninertia", "dof_invweight0", "body_invweight0", "actuator_acc0"} <= set(com) <= set(QUANTITIES)
    assert "body_subtreemass" not in com and all(worlds == [0] for worlds in com.values()), com


def test_unsupported_models_are_refused_in_one_line(checked: dict[str, Any]) -> None:
    refused = checked["refused"]
    assert set(refused) == {"tendon", "mocap", "site transmission", "sparse inertia"}
    assert all(message and "\n" not in message and message.startswith("MassConstants: ")
               for message in refused.values()), refused
    assert "tendon_invweight0" in refused["tendon"] and "actuator_acc0" in refused["site transmission"]
    assert "sparse LDL region" in refused["sparse inertia"]


def test_it_launches_fewer_kernels_than_set_const(checked: dict[str, Any]) -> None:
    """Go2: ``set_const`` 398 Warp launches (110 tiled: 108 solves, 2 factorizations), ``recompute()`` 222 (2 tiled:
    one factorization, no restore pass, one stacked solve for the 108 right-hand sides; besides them two torch copies
    of the factor); the dof unit vectors and actuator moments are written once, the flex, tendon and transmission
    stages left out."""
    launches = checked["launches"]
    assert launches["set_const"] == {"launch": 288, "launch_tiled": 110, "total": 398}, launches
    assert launches["recompute"] == {"launch": 220, "launch_tiled": 2, "total": 222}, launches


def test_the_table_reads_each_records_rows_and_verdict() -> None:
    """The committed H100 records through ``device_env_report.mass_constants_table``: the check's run that called C
    before its capture lists C's differing rows and is not equal; the check as committed is equal in both rounds."""
    sys.path.insert(0, str(PROJECT / "experiments" / "evidence"))
    sys.path.insert(0, str(PROJECT / "experiments" / "bench"))
    import device_env_report

    folder = PROJECT / "results" / "2026-12-07-h100-go2-mass-constants" / "mass-constants"
    table = device_env_report.mass_constants_table(folder)
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()}
    assert rows["captured-on-its-own-model"].endswith("| 13.03 · 1.46 | yes |")
    assert "| none · none; none · none |" in rows["captured-on-its-own-model"]
    assert "actuator_biasprm (1024 worlds)" in rows["captured-after-a-call-on-c"]
    assert rows["captured-after-a-call-on-c"].endswith("| no |")
