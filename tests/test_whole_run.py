"""`make bench-whole-run` times UniLab's real training from outside and reads the trainer's own records.

A short run of the README's MuJoCo Warp command on Warp's CPU device (its default, the device collector; 3
iterations) through the make target: the record holds the exit code, every iteration the trainer logged, and launch
→ first iteration → last iteration → end in that order. Control: a run UniLab refuses (an unknown task owner) is
recorded as failed, with its exit code, and the tool exits 1 — never a record with times it did not measure.

``BESIDE=unpatched-1.3.2`` then runs the same command line on UniLab 1.3.2 without the project: from the pristine
tree (the pinned sdist, unpacked), with the pristine ``uni_rl`` of the pinned wheel, the overlay and the patched tree
off its path. Each record names the ``uni_rl`` its trainer imported: the patched run's is the overlay's, the
reference's the pristine one, and unpatched 1.3.2 refuses a learner without CUDA, as it does for its users (a CPU
machine can check the reference's set-up, not time it). Controls: a provenance record naming another learner than
the build's, or none, is an error; a learner folder without ``uni_rl/`` is refused in one line before any run. The
beside table sets each pair side by side with its ratios; a pair of two command lines is refused, and a side that
did not run gets no ratio.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import G1_ASSETS, PROJECT, extract_wheel_package, make, runnable_tree

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments" / "bench"))
from whole_run import (ARTIFACTS_LOADED, UNPATCHED, Build, beside_table,  # noqa: E402
                       compiled_before_first_iteration, imported_uni_rl, learner_check, steady_state)

#: UniLab's own keys only, so that the same command line is one unpatched 1.3.2 takes too (the MuJoCo Warp owner's
#: default collector is the device collector).
SHORT = ("algo.num_envs=16 algo.batch_size=32 algo.replay_buffer_n=8 algo.learning_starts=2 algo.max_iterations=3 "
         "algo.save_interval=0")


@pytest.fixture(scope="module")
def tree(applied_session: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    checkout, overlay = applied_session
    return runnable_tree(checkout, tmp_path_factory.mktemp("whole-run") / "unilab"), overlay


@pytest.fixture(scope="module")
def unpatched(sdist: Path, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """UniLab 1.3.2's pristine tree and a folder with unilab-rl 1.3.2's pristine uni_rl/, from the pinned files."""
    base = tmp_path_factory.mktemp("unpatched")
    with tarfile.open(sdist) as tar:
        tar.extractall(base / "tree", filter="data")
    (root,) = (base / "tree").iterdir()
    extract_wheel_package(wheel, "uni_rl", base / "learner")
    return root, base / "learner"


def whole_run(tree: tuple[Path, Path], out: Path, owner: str, label: str, *beside: str):
    root, overlay = tree
    env = {"UNISIM_MJWARP_ALLOW_CPU": "1", "CUDA_VISIBLE_DEVICES": "", "MUJOCO_GL": "disable", "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    return make("bench-whole-run", f"UNILAB={root}", f"OWNER={owner}", f"OVERRIDES={SHORT}", f"PYTHON={sys.executable}",
                f"LABEL={label}", f"DIR={out}", f"OVERLAY={overlay}", *beside, **env)


@pytest.fixture(scope="module")
def pair(tree: tuple[Path, Path], unpatched: tuple[Path, Path],
         tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """One invocation: the short patched run, then the same command line on unpatched 1.3.2."""
    pristine, learner = unpatched
    out = tmp_path_factory.mktemp("pair")
    return whole_run(tree, out, "g1_walk_flat/mjwarp", "pair", f"BESIDE={UNPATCHED}", f"PRISTINE={pristine}",
                     f"BASELINE_UNI_RL={learner}", f"UNILAB_ASSETS={G1_ASSETS}"), out


def test_a_whole_run_is_timed_from_launch_to_its_end(pair: tuple[subprocess.CompletedProcess, Path],
                                                     tree: tuple[Path, Path]) -> None:
    proc, out = pair
    record = json.loads((out / "pair.json").read_text())
    assert record["exit_code"] == 0 and "error" not in record, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert record["iterations_logged"] == 3
    assert 0 < record["launch_to_first_iteration_s"] <= record["launch_to_last_iteration_s"] \
        <= record["launch_to_end_s"]
    assert record["env_steps_per_s_first_to_last"] > 0
    # 3 iterations: the steady-state window is the second half (one iteration), within the run's own times
    assert record["steady_iterations"] == 1 and record["steady_iter_ms_mean"] > 0
    assert (out / "pair-log.txt.gz").stat().st_size > 0
    assert record["build"] == "patched" and Path(record["uni_rl"]).resolve().is_relative_to(
        (tree[1] / "uni_rl").resolve()), record


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


def test_beside_unpatched_runs_the_pristine_learner_on_the_pristine_tree(
        pair: tuple[subprocess.CompletedProcess, Path], unpatched: tuple[Path, Path]) -> None:
    (proc, out), (pristine, learner) = pair, unpatched
    assert proc.returncode != 0, proc.stdout[-3000:]  # the reference cannot train here (no CUDA)
    ours, ref = (json.loads((out / name).read_text()) for name in ("pair.json", f"pair-{UNPATCHED}.json"))
    assert ref["build"] == UNPATCHED and Path(ref["tree"]) == pristine.resolve(), ref
    assert Path(ref["uni_rl"]).resolve().is_relative_to((learner / "uni_rl").resolve()), ref
    assert ref["command"][1:] == ours["command"][1:]  # the same command line
    assert ref["exit_code"] != 0 and "launch_to_first_iteration_s" not in ref
    assert "requires a CUDA or MPS learner device" in gzip.decompress(
        (out / f"pair-{UNPATCHED}-log.txt.gz").read_bytes()).decode()
    assert (pristine / "src" / "unilab" / "assets" / "robots" / "g1" / "assets" / "head_link.STL").is_file()
    # the pair's table: both builds, and no ratio where one side did not run
    table = beside_table(out)
    assert "| pair | patched | 0 |" in table and f"| pair | {UNPATCHED} | 1 |" in table and "÷" not in table, table


def test_the_beside_table_sets_each_run_against_its_unpatched_twin(tmp_path: Path) -> None:
    command = ["python3", "src/unilab/scripts/train_flashsac.py", "task=g1_walk_flat/mjwarp"]
    ours = {"build": "patched", "command": command, "exit_code": 0, "launch_to_first_iteration_s": 13.0,
            "launch_to_compiled_s": 15.0, "launch_to_end_s": 100.0, "env_steps_per_s_first_to_last": 230000.0,
            "steady_iter_ms_mean": 15.0, "reward_mean_last": 280.0}
    ref = {**ours, "build": UNPATCHED, "launch_to_first_iteration_s": 32.5, "launch_to_end_s": 900.0,
           "env_steps_per_s_first_to_last": 23000.0, "steady_iter_ms_mean": 179.0}
    del ref["launch_to_compiled_s"]
    (tmp_path / "run.json").write_text(json.dumps(ours))
    (tmp_path / f"run-{UNPATCHED}.json").write_text(json.dumps(ref))
    table = beside_table(tmp_path)
    ratios = "| run | unpatched ÷ patched | | 2.50× | | **9.00×** | 10.00× (patched ÷ unpatched) | | |"
    assert ratios in table, table
    # controls: a reference that ran another command line is no pair; one that failed gets no ratio
    (tmp_path / f"run-{UNPATCHED}.json").write_text(json.dumps({**ref, "command": [*command, "algo.num_envs=256"]}))
    with pytest.raises(ValueError, match="different command lines"):
        beside_table(tmp_path)
    (tmp_path / f"run-{UNPATCHED}.json").write_text(json.dumps({**ref, "exit_code": 1}))
    assert "÷" not in beside_table(tmp_path)


def test_a_learner_other_than_the_builds_is_an_error(tmp_path: Path) -> None:
    build = Build(UNPATCHED, tmp_path / "tree", {}, tmp_path / "learner" / "uni_rl")
    trainer = {"modules": [{"name": "uni_rl", "file": str(tmp_path / "learner" / "uni_rl" / "__init__.py")}]}
    (tmp_path / "provenance-1.json").write_text(json.dumps({"modules": [{"name": "uni_rl", "file": "/a/uni_rl/x.py"}]}))
    (tmp_path / "provenance-2.json").write_text(json.dumps(trainer))
    assert "error" not in learner_check(build, imported_uni_rl(tmp_path, 2))
    # controls: another process's record; the overlay's learner where the pristine one was asked for; no record
    assert "not from" in learner_check(build, imported_uni_rl(tmp_path, 1))["error"]
    trainer["modules"][0]["file"] = str(tmp_path / "overlay" / "uni_rl" / "__init__.py")
    (tmp_path / "provenance-2.json").write_text(json.dumps(trainer))
    assert "not from" in learner_check(build, imported_uni_rl(tmp_path, 2))["error"]
    assert "no provenance record" in learner_check(build, imported_uni_rl(tmp_path, 3))["error"]


def test_a_learner_folder_without_uni_rl_is_refused_before_any_run(tree: tuple[Path, Path], tmp_path: Path) -> None:
    proc = whole_run(tree, tmp_path / "out", "g1_walk_flat/mjwarp", "refused", f"BESIDE={UNPATCHED}",
                     f"BASELINE_UNI_RL={tmp_path}")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("whole_run: error:")]
    assert proc.returncode != 0 and len(errors) == 1 and "holds no uni_rl/ package" in errors[0], proc.stderr
    assert not (tmp_path / "out").exists()
