"""`make bench-whole-run` times UniLab's real training from outside and reads the trainer's own records.

A short run of the README's MuJoCo Warp command on Warp's CPU device (the device collector, 3 iterations) through
the make target: the record holds the exit code, every iteration the trainer logged, and launch → first iteration →
last iteration → end in that order. Control: a run UniLab refuses (an unknown task owner) is recorded as failed,
with its exit code, and the tool exits 1 — never a record with times it did not measure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import PROJECT, make, runnable_tree

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments" / "bench"))
from whole_run import ARTIFACTS_LOADED, compiled_before_first_iteration, steady_state  # noqa: E402

SHORT = ("algo.num_envs=16 algo.batch_size=32 algo.replay_buffer_n=8 algo.learning_starts=2 algo.max_iterations=3 "
         "algo.save_interval=0 training.collector=device")


@pytest.fixture(scope="module")
def tree(applied_session: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    checkout, overlay = applied_session
    return runnable_tree(checkout, tmp_path_factory.mktemp("whole-run") / "unilab"), overlay


def whole_run(tree: tuple[Path, Path], out: Path, owner: str, label: str):
    root, overlay = tree
    env = {"UNISIM_MJWARP_ALLOW_CPU": "1", "CUDA_VISIBLE_DEVICES": "", "MUJOCO_GL": "disable", "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    return make("bench-whole-run", f"UNILAB={root}", f"OWNER={owner}", f"OVERRIDES={SHORT}", f"PYTHON={sys.executable}", f"LABEL={label}",
                f"DIR={out}", f"OVERLAY={overlay}", **env)


def test_a_whole_run_is_timed_from_launch_to_its_end(tree: tuple[Path, Path], tmp_path: Path) -> None:
    proc = whole_run(tree, tmp_path, "g1_walk_flat/mjwarp", "short")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((tmp_path / "short.json").read_text())
    assert record["exit_code"] == 0 and "error" not in record
    assert record["iterations_logged"] == 3
    assert 0 < record["launch_to_first_iteration_s"] <= record["launch_to_last_iteration_s"] \
        <= record["launch_to_end_s"]
    assert record["env_steps_per_s_first_to_last"] > 0
    # 3 iterations: the steady-state window is the second half (one iteration), within the run's own times
    assert record["steady_iterations"] == 1 and record["steady_iter_ms_mean"] > 0
    assert (tmp_path / "short-log.txt.gz").stat().st_size > 0


def test_a_run_that_fails_is_recorded_as_failed(tree: tuple[Path, Path], tmp_path: Path) -> None:
    proc = whole_run(tree, tmp_path, "g1_walk_flat/no_such_owner", "refused")
    assert proc.returncode != 0
    record = json.loads((tmp_path / "refused.json").read_text())
    assert record["exit_code"] != 0 and "launch_to_first_iteration_s" not in record and record["error"]


def test_the_steady_state_window_is_the_last_500_or_the_second_half() -> None:
    # 1000 iterations of 1000 env steps: the first 500 at 10 ms, the last 500 at 4 ms (4 ms apart in wall time)
    rows = [(i * 0.010, i * 1000, 10.0) for i in range(500)]
    rows += [(5.0 + i * 0.004, (500 + i) * 1000, 4.0) for i in range(500)]
    got = steady_state(rows)
    assert got["steady_iterations"] == 500 and got["steady_iter_ms_mean"] == 4.0
    assert abs(got["steady_env_steps_per_s"] - 250_000) < 1e-6
    # control: a window taking in the slow half would not read 4 ms
    assert steady_state(rows[:600])["steady_iter_ms_mean"] > 4.0


def test_a_run_that_compiled_from_its_artifacts_is_compiled_from_its_first_iteration() -> None:
    """The trainer's own line (``compile_behind.ARTIFACTS_LOADED``, read from runtime/) makes the first iteration
    the compiled learner's; control: the same run without that line has no compiled time."""
    text = (PROJECT / "runtime" / "flashsac_runtime" / "learner" / "compile_behind.py").read_text()
    assert f'ARTIFACTS_LOADED = "{ARTIFACTS_LOADED}"' in text
    record = {"launch_to_first_iteration_s": 21.5}
    lines = ["   12.000 Warp 1.16.0 initialized:", f"   12.500 {ARTIFACTS_LOADED} (/c/artifacts-1.bin): ..."]
    assert compiled_before_first_iteration(record, lines)["launch_to_compiled_s"] == 21.5
    assert compiled_before_first_iteration(record, lines[:1]) == {}
    assert compiled_before_first_iteration({**record, "launch_to_compiled_s": 40.0}, lines) == {}
