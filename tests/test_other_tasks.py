"""UniLab 1.3.2's FlashSAC tasks beside G1 Walk Flat, on the CPU: G1 motion tracking and Go2 joystick flat.

- The synthetic G1 motion clip (`scripts/offline/motion_clip.py`: not a recorded motion) loads through UniLab's
  own `MotionLoader` with the G1's 29 joints inside their limits, unit body quaternions and MuJoCo's body layout;
  a broken clip (one array a frame short) fails in that loader; the generator never overwrites a clip that is
  there (the real one is used when present) and refuses a folder that is not a tree in one line.
- Each owner trains 3 iterations through UniLab's command line on the patched tree and the overlay
  (`g1_motion_tracking/mujoco`, `/mjwarp` on Warp's CPU device, `go2_joystick_flat/mujoco`, and `/mjwarp`, the
  series' own owner (unilab 0008), on Warp's CPU device): the task's own
  NumPy env, built as the host collector builds it, behind the device-resident collector's contract
  (`tests/task_env_adapter.py`), since UniLab's host collector needs a CUDA or MPS learner. The motion tracking
  env reads the synthetic clip through UniLab's loader; the Go2 env the seeded Go2 meshes (`base_4.obj` is a
  visual-only placeholder: no collision, explicit inertia, so the physics are the real model's).
- The owners' own command lines (the host collector) compose their config, import the overlay and stop at
  UniLab's one-line refusal of a CPU learner.
Negative controls: the clip removed (UniLab's loader goes to Hugging Face, which is out of reach: its error), the
overlay left off `PYTHONPATH` (the training check and the refusal's overlay check both fail).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import PROJECT, SideBySide, runnable_tree

#: ``<task>/<owner>`` -> the ``training.device_env_factory`` (tests/task_env_adapter.py) that trains it on the CPU.
FACTORIES = {
    "g1_motion_tracking/mjwarp": "task_env_adapter:make_g1_motion_tracking_mjwarp_cpu_env",
    "g1_motion_tracking/mujoco": "task_env_adapter:make_g1_motion_tracking_mujoco_cpu_env",
    "go2_joystick_flat/mjwarp": "task_env_adapter:make_go2_joystick_flat_mjwarp_cpu_env",
    "go2_joystick_flat/mujoco": "task_env_adapter:make_go2_joystick_flat_mujoco_cpu_env",
}

GENERATOR = PROJECT / "scripts" / "offline" / "motion_clip.py"
CLIP_REL = Path("src/unilab/assets/motions/g1/dance1_subject2_part.npz")
SHORT = ("algo.num_envs=16", "algo.batch_size=32", "algo.replay_buffer_n=8", "algo.learning_starts=2",
         "algo.max_iterations=3", "algo.save_interval=0", "training.no_play=true", "training.export_onnx=false",
         "training.logger=no_print")
#: UniLab's (uni_rl's) refusal of the host collector's replay on a CPU learner.
CPU_REFUSAL = "Off-policy training requires a CUDA or MPS learner device"

LOAD = """
import json, sys
import numpy as np
from unilab.tasks.motion_tracking.common.motion_loader import MotionLoader
m = MotionLoader(sys.argv[1])
q = np.linalg.norm(m.body_quat_w, axis=-1)
print(json.dumps({"fps": m.fps, "frames": m.num_frames, "joints": m.num_joints, "bodies": m.num_bodies,
                  "joint_pos_min": m.joint_pos.min(0).tolist(), "joint_pos_max": m.joint_pos.max(0).tolist(),
                  "quat_norm_err": float(np.abs(q - 1).max()), "pelvis_z": [float(m.body_pos_w[:, 1, 2].min()),
                  float(m.body_pos_w[:, 1, 2].max())], "forward_m": float(m.body_pos_w[-1, 1, 0] - m.body_pos_w[0, 1, 0])}))
"""


def child_env(tree: Path, overlay: Path | None, run: Path) -> dict[str, str]:
    """A headless CPU child without Hugging Face; the overlay first when given, tests/ for the adapter."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHSAC_PROVENANCE_DIR",
                                                              "PYTEST_CURRENT_TEST")}
    paths = (*((overlay,) if overlay else ()), tree / "src", PROJECT / "tests")
    env.update(PYTHONPATH=os.pathsep.join(map(str, paths)), CUDA_VISIBLE_DEVICES="", MUJOCO_GL="disable",
               HF_HUB_OFFLINE="1", UNISIM_MJWARP_ALLOW_CPU="1", FLASHSAC_PROVENANCE_DIR=str(run / "provenance"),
               OMP_NUM_THREADS="1")
    return env


def train(tree: Path, overlay: Path | None, owner: str, run: Path, *, adapter: bool = True) -> subprocess.CompletedProcess:
    """UniLab's command line for ``owner`` from the tree's root, short; with the adapter's device env on the CPU,
    else with the host collector (whatever the owner's default)."""
    extra = (("training.collector=device", f"+training.device_env_factory={FACTORIES[owner]}") if adapter
             else ("training.collector=host",))
    argv = [sys.executable, "src/unilab/scripts/train_flashsac.py", f"task={owner}", *extra, *SHORT,
            f"training.log_dir='{run / 'log'}'"]
    return subprocess.run(argv, cwd=tree, env=child_env(tree, overlay, run), capture_output=True, text=True,
                          timeout=600, check=False)


def overlay_records(run: Path) -> list[dict]:
    records = [json.loads(p.read_text()) for p in (run / "provenance").glob("provenance-*.json")]
    return [r for r in records if r["uni_rl_origin"] is not None]


def check_trained(proc: subprocess.CompletedProcess, run: Path) -> None:
    """3 iterations completed, by the overlay's uni_rl as applied, with the device-resident collector."""
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((run / "log" / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["completed_iterations"] == 3, summary
    assert summary["runtime_manifest"]["collector"] == "device-resident", summary["runtime_manifest"]
    trainer = overlay_records(run)
    assert trainer and all(r["uni_rl_origin"] == "overlay" and not r["flagged"] for r in trainer), trainer


def check_refused(proc: subprocess.CompletedProcess, run: Path) -> None:
    """UniLab's one line, reached with the config composed and the overlay's uni_rl imported."""
    assert proc.returncode != 0
    last = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    refusal = [line for line in last[-3:] if CPU_REFUSAL in line]
    assert len(refusal) == 1 and refusal[0].startswith("ValueError: "), proc.stderr[-2000:]
    assert [r["uni_rl_origin"] for r in overlay_records(run)] == ["overlay"], overlay_records(run)


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> tuple[Path, Path, Path]:
    """The applied tree with the G1 and Go2 meshes and the synthetic clip; a twin without the clip; the overlay."""
    checkout, overlay = applied_session
    base = tmp_path_factory.mktemp("other-tasks")
    tree = runnable_tree(checkout, base / "tree")
    proc = subprocess.run([sys.executable, str(GENERATOR), "--tree", str(tree)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0 and "synthetic G1 motion clip written" in proc.stdout, proc.stderr
    bare = runnable_tree(checkout, base / "no-clip")
    assert not (bare / CLIP_REL).exists()
    return tree, bare, overlay


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, trees: tuple[Path, Path, Path],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySide]:
    tree, bare, overlay = trees
    out = tmp_path_factory.mktemp("other-task-runs")

    def trained(owner: str, where: Path = tree, with_overlay: bool = True) -> tuple[subprocess.CompletedProcess, Path]:
        run = out / f"{owner.replace('/', '-')}-{where.name}-{with_overlay}"
        return train(where, overlay if with_overlay else None, owner, run), run

    def refused(with_overlay: bool = True) -> list[tuple[str, subprocess.CompletedProcess, Path]]:
        results = []
        for owner in FACTORIES:
            run = out / f"refused-{owner.replace('/', '-')}-{with_overlay}"
            results.append((owner, train(tree, overlay if with_overlay else None, owner, run, adapter=False), run))
        return results

    started = SideBySide(request).start({
        "test_g1_motion_tracking_mjwarp_trains_on_warps_cpu_device": lambda: trained("g1_motion_tracking/mjwarp"),
        "test_g1_motion_tracking_mujoco_trains_on_the_cpu": lambda: trained("g1_motion_tracking/mujoco"),
        "test_go2_joystick_flat_mujoco_trains_on_the_cpu": lambda: trained("go2_joystick_flat/mujoco"),
        "test_go2_joystick_flat_mjwarp_trains_on_warps_cpu_device": lambda: trained("go2_joystick_flat/mjwarp"),
        "test_the_owners_host_collector_is_refused_on_a_cpu_learner": refused,
        "test_without_the_clip_unilabs_loader_fails": lambda: trained("g1_motion_tracking/mujoco", bare),
        "test_without_the_overlay_the_checks_fail": lambda: (trained("go2_joystick_flat/mujoco", tree, False),
                                                             refused(False)[-1]),
    })
    yield started
    started.close()


def load(tree: Path, overlay: Path, clip: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOAD, str(clip)], cwd=tree, env=child_env(tree, overlay, tree),
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_synthetic_clip_loads_through_unilabs_loader(trees: tuple[Path, Path, Path], tmp_path: Path) -> None:
    import mujoco

    tree, _, overlay = trees
    proc = load(tree, overlay, str(CLIP_REL.relative_to("src/unilab/assets")))  # the task's own relative path
    assert proc.returncode == 0, proc.stderr[-3000:]
    clip = json.loads(proc.stdout.strip().splitlines()[-1])
    model = mujoco.MjModel.from_xml_path(str(tree / "src/unilab/assets/robots/g1/scene_flat.xml"))
    hinges = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
    assert (clip["fps"], clip["frames"], clip["joints"], clip["bodies"]) == (50, 501, len(hinges), model.nbody)
    lo, hi = model.jnt_range[hinges, 0], model.jnt_range[hinges, 1]
    assert (np.array(clip["joint_pos_min"]) >= lo).all() and (np.array(clip["joint_pos_max"]) <= hi).all()
    assert clip["quat_norm_err"] < 1e-5
    assert 0.6 < clip["pelvis_z"][0] <= clip["pelvis_z"][1] < 0.9 and 2.5 < clip["forward_m"] < 3.5, clip
    # Control: the same clip with one array a frame short fails in UniLab's loader.
    with np.load(tree / CLIP_REL) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["body_lin_vel_w"] = arrays["body_lin_vel_w"][:-1]
    np.savez(tmp_path / "broken.npz", **arrays)
    proc = load(tree, overlay, tmp_path / "broken.npz")
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (f"ValueError: Motion file '{tmp_path / 'broken.npz'}' has "
                                                    "inconsistent frame counts for 'body_lin_vel_w'")


def test_the_generator_never_overwrites_a_clip(trees: tuple[Path, Path, Path], tmp_path: Path) -> None:
    tree, _, _ = trees
    real = tmp_path / "tree"
    (real / CLIP_REL).parent.mkdir(parents=True)
    shutil.copytree(tree / "src/unilab/conf", real / "src/unilab/conf")
    with np.load(tree / CLIP_REL) as data:  # a clip that is not the generator's (no `synthetic` array)
        np.savez(real / CLIP_REL, **{k: data[k] for k in data.files if k != "synthetic"})
    before = (real / CLIP_REL).read_bytes()
    proc = subprocess.run([sys.executable, str(GENERATOR), "--tree", str(real)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and "not synthetic (UniLab's own) is there already, left as it is" in proc.stdout
    assert (real / CLIP_REL).read_bytes() == before
    # Bad input: one line, exit 1.
    proc = subprocess.run([sys.executable, str(GENERATOR), "--tree", str(tmp_path / "nothing")], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 1 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("motion_clip: error: ") and "is not a UniLab 1.3.2 tree" in proc.stderr


def test_g1_motion_tracking_mjwarp_trains_on_warps_cpu_device(runs: SideBySide,
                                                               request: pytest.FixtureRequest) -> None:
    check_trained(*runs.result(request))


def test_g1_motion_tracking_mujoco_trains_on_the_cpu(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    check_trained(*runs.result(request))


def test_go2_joystick_flat_mujoco_trains_on_the_cpu(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    check_trained(*runs.result(request))


def test_go2_joystick_flat_mjwarp_trains_on_warps_cpu_device(runs: SideBySide,
                                                              request: pytest.FixtureRequest) -> None:
    check_trained(*runs.result(request))


def test_the_owners_host_collector_is_refused_on_a_cpu_learner(runs: SideBySide,
                                                               request: pytest.FixtureRequest) -> None:
    results = runs.result(request)
    assert [owner for owner, _, _ in results] == sorted(FACTORIES)
    for _owner, proc, run in results:
        check_refused(proc, run)


def test_without_the_clip_unilabs_loader_fails(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    """Negative control: no clip in the tree; UniLab's loader asks Hugging Face, which is out of reach."""
    proc, run = runs.result(request)
    with pytest.raises(AssertionError):
        check_trained(proc, run)
    assert "motion_loader.py" in proc.stderr and "resolve_motion_files" in proc.stderr
    assert "unilab-motions/resolve/main/motions/g1/dance1_subject2_part.npz" in proc.stderr, proc.stderr[-3000:]


def test_without_the_overlay_the_checks_fail(runs: SideBySide, request: pytest.FixtureRequest) -> None:
    """Negative control: the same command lines with the overlay left off PYTHONPATH fail both checks."""
    (proc, run), (_, refused_proc, refused_run) = runs.result(request)
    with pytest.raises(AssertionError):
        check_trained(proc, run)
    with pytest.raises(AssertionError):
        check_refused(refused_proc, refused_run)
