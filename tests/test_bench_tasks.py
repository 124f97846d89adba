"""`make bench TASK=<task>` on the CPU: the bench's Hydra overrides for each of UniLab 1.3.2's FlashSAC tasks.

- For each task (`bench_configs.TASKS`), the matrix's plan hands the single-run script `--task`, and the overrides
  that script composes, read through the patched tree's Hydra config (the patched default) and the pristine tree's
  (the unpatched 1.3.2 and upstream 1.4.0 references), select the task's own owner on each physics it has, at the
  report's setting (256 envs, 2/1/1) and at the task's own defaults (no overrides: its num_envs and schedule).
  Control: the same plan without `--task` composes G1 Walk Flat, which the check catches.
- The device collector (`COLLECTOR=device`) for each task with a device env (`BenchTask.device_env`: G1 Walk Flat,
  Go2 Joystick Flat and G1 motion tracking): the matrix plans it on the task's MuJoCo Warp owner only, and the run's overrides,
  composed through the patched tree, select `training.collector=device`, and the trainer's own resolver finds the
  task's device env factory. Control: a task marked as having none gets no device run and is refused. A real
  short bench run of Go2's device collector (the single-run script, UniLab's command line, MuJoCo Warp on Warp's
  CPU device, 16 envs, 8 iterations, about 15 s) completes, its trainer's own config names Go2 on MuJoCo Warp, its
  record names the device-resident collector and the device env's form, and its start-up record holds the device
  env's phases (built, first reset).
- An unknown task, a physics the task has no owner for and the device collector for a task without a device env
  (or on CPU MuJoCo, in a message naming the task) are each one line and exit 1 from `make bench`'s driver and the
  single-run script, before CUDA is looked for; nothing is written.
- The assets a task's scene needs are checked per task (the Go2 meshes for Go2, seeded from `A:B` sources), and a
  motion tracking run without its clip is refused in one line, or given the synthetic clip when asked, which its
  record then calls synthetic.
"""

from __future__ import annotations

import dataclasses

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import G1_ASSETS, GO2_ASSETS, PROJECT, make, runnable_tree
from forked_runs import ForkServer

BENCH = PROJECT / "experiments" / "bench"
sys.path.insert(0, str(BENCH))

import bench_configs  # noqa: E402
import bench_driver  # noqa: E402
import bench_env  # noqa: E402
import bench_matrix  # noqa: E402
import bench_options  # noqa: E402
import run_files  # noqa: E402

READ = """
import sys
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
    cfg = compose("config", overrides=sys.argv[2:])
print(cfg.training.task_name, cfg.training.sim_backend, cfg.algo.num_envs, cfg.algo.updates_per_step,
      OmegaConf.select(cfg, "training.collector", default=None))
"""
#: Prints what the patched tree's Hydra config and the trainer's own device env resolver make of the overrides.
RESOLVE = """
import sys
from hydra import compose, initialize_config_dir
from unilab.scripts.train_offpolicy import resolve_device_env_factory
with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
    cfg = compose("config", overrides=sys.argv[2:])
factory = resolve_device_env_factory("flashsac", cfg)
print(cfg.training.task_name, cfg.training.sim_backend, cfg.training.collector,
      None if factory is None else f"{factory.__module__}:{factory.__name__}")
"""
#: task -> the device env factory the trainer resolves for ``task=<task>/mjwarp training.collector=device``.
DEVICE_FACTORIES = {"g1_walk_flat": "flashsac_runtime.envs:make_g1_walk_device_env",
                    "go2_joystick_flat": "flashsac_runtime.envs:make_go2_joystick_device_env",
                    "g1_motion_tracking": "flashsac_runtime.envs:make_g1_motion_tracking_device_env"}
#: task -> (training.task_name, the task's own num_envs and updates_per_step at unilab-default).
EXPECTED = {"g1_walk_flat": ("G1WalkFlat", "4096", "8"), "g1_motion_tracking": ("G1MotionTrackingSAC", "2048", "4"),
            "go2_joystick_flat": ("Go2JoystickFlat", "1024", "2")}
CONFIGS = ["baseline-1.3.2", "patched-default", "upstream-1.4.0"]


def _composer(root: Path, code: str = READ, overlay: Path | None = None,
              imports: tuple[str, ...] = ("hydra", "omegaconf")) -> tuple[ForkServer, Callable[..., list[str]]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (overlay, root / "src") if p is not None)
    server = ForkServer(imports, env=env, cwd=root, flags=("-W", "ignore"))

    def read(*overrides: str) -> list[str]:
        returncode, out, err = server.run(str(root / "src/unilab/conf/flashsac"), *overrides, code=code, timeout=300)
        assert returncode == 0, err[-3000:]
        return out.strip().splitlines()[-1].split()

    return server, read


@pytest.fixture(scope="module")
def composers(applied_session: tuple[Path, Path],
              pristine_template: Path) -> Iterator[dict[str, Callable[..., list[str]]]]:
    """The patched and the pristine tree's Hydra config, each composed with a run's overrides; ``resolved``: the
    patched one with the overlay, through the trainer's device env resolver (``RESOLVE``)."""
    patched, read_patched = _composer(applied_session[0])
    pristine, read_pristine = _composer(pristine_template)
    resolver, resolved = _composer(applied_session[0], RESOLVE, applied_session[1],
                                   ("hydra", "unilab.scripts.train_offpolicy"))
    yield {"patched": read_patched, "pristine": read_pristine, "resolved": resolved}
    for server in (patched, pristine, resolver):
        server.close()


def run_overrides(spec: bench_driver.RunSpec) -> list[str]:
    """What the single-run script composes for a planned run: its argv parsed as it parses it."""
    argv = bench_driver.single_run_argv(spec, common=["--unilab-root", "/x"], output=Path("/o.json"), run_dir=Path("/r"))
    args = bench_options.parse_args(argv[2:])
    return [o for o in bench_options.hydra_overrides(args, Path("/logs")) if not o.startswith("training.log_dir=")]


def composed_plan(composers: dict[str, Callable[..., list[str]]], task: str,
                  plan_task: str | None = None) -> list[tuple[str, str, str, list[str]]]:
    """(setting, configuration, physics, what the run's tree composes) for every run of the task's plan."""
    sims = list(bench_configs.TASKS[task].sims)
    specs = bench_matrix.plan(CONFIGS, ["report", "unilab-default"], 1, [2], sims, ["host"], plan_task or task)
    out = []
    for spec in specs:
        tree = bench_configs.CONFIGS[spec.config].tree
        out.append((spec.setting, spec.config, spec.sim, composers[tree](*run_overrides(spec))))
    return out


def check_task(task: str, composed: list[tuple[str, str, str, list[str]]]) -> None:
    name, envs, ups = EXPECTED[task]
    sims = bench_configs.TASKS[task].sims
    # The references run on CPU MuJoCo only; the patched default on each physics the task has.
    expected_runs = [(c, s) for c in CONFIGS for s in sims if s == "mujoco" or c == "patched-default"]
    assert sorted((c, s) for setting, c, s, _ in composed if setting == "report") == sorted(expected_runs)
    for setting, config, sim, (task_name, backend, num_envs, updates, collector) in composed:
        assert (task_name, backend) == (name, sim), (task, setting, config)
        assert (num_envs, updates) == (("256", "2") if setting == "report" else (envs, ups)), (task, setting, config)
        assert collector == ("host" if bench_configs.CONFIGS[config].tree == "patched" else "None"), (task, config)


@pytest.mark.parametrize("task", sorted(bench_configs.TASKS))
def test_the_bench_composes_each_tasks_owner_on_both_trees(composers: dict[str, Callable[..., list[str]]],
                                                           task: str) -> None:
    check_task(task, composed_plan(composers, task))


def test_a_plan_without_the_task_is_caught(composers: dict[str, Callable[..., list[str]]]) -> None:
    """Control: the same plan with the task left out composes G1 Walk Flat, and the check fails."""
    with pytest.raises(AssertionError):
        check_task("go2_joystick_flat", composed_plan(composers, "go2_joystick_flat", plan_task="g1_walk_flat"))


@pytest.mark.parametrize("task", sorted(bench_configs.TASKS))
def test_the_device_collector_composes_for_each_task_with_a_device_env(
        composers: dict[str, Callable[..., list[str]]], task: str) -> None:
    """``COLLECTOR=host,device SIM=mujoco,mjwarp``: a task with a device env gets one device run per setting, on its
    MuJoCo Warp owner, whose overrides the trainer resolves to the task's own device env factory; the host runs keep
    the host collector."""
    sims, collectors = ["mujoco", "mjwarp"], ["host", "device"]
    specs = bench_matrix.plan(["patched-default"], ["report", "unilab-default"], 1, [2], sims, collectors, task)
    device = [spec for spec in specs if spec.collector == "device"]
    assert bench_matrix.unplannable(["patched-default"], sims, collectors, task) is None
    assert [(s.setting, s.sim) for s in device] == [("report", "mjwarp"), ("unilab-default", "mjwarp")]
    name = EXPECTED[task][0]
    for spec in device:
        assert composers["resolved"](*run_overrides(spec)) == [name, "mjwarp", "device", DEVICE_FACTORIES[task]]
    host = next(s for s in specs if (s.sim, s.collector) == ("mjwarp", "host"))
    assert composers["resolved"](*run_overrides(host)) == [name, "mjwarp", "host", "None"]


def test_a_task_without_a_device_env_gets_no_device_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: the same task marked as having no device env gets no device run, and the request is refused in one
    line naming it (every task of UniLab 1.3.2 the bench trains now has one)."""
    task = "g1_motion_tracking"
    monkeypatch.setitem(bench_configs.TASKS, task, dataclasses.replace(bench_configs.TASKS[task], device_env=False))
    sims, collectors = ["mujoco", "mjwarp"], ["host", "device"]
    specs = bench_matrix.plan(["patched-default"], ["report", "unilab-default"], 1, [2], sims, collectors, task)
    assert [spec for spec in specs if spec.collector == "device"] == []
    assert bench_matrix.unplannable(["patched-default"], sims, collectors, task) == (
        f"COLLECTOR=device: task {task} has no device env (training.collector=device): it trains with the host "
        "collector (COLLECTOR=host)")


def test_a_real_cpu_bench_run_of_go2s_device_collector(applied_session: tuple[Path, Path], tmp_path: Path) -> None:
    checkout, overlay = applied_session
    tree = runnable_tree(checkout, tmp_path / "tree")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHSAC_PROVENANCE_DIR")}
    tiny = ("--num-envs", "16", "--batch-size", "32", "--replay-buffer-n", "8", "--learning-starts", "2",
            "--updates-per-step", "2", "--policy-frequency", "2", "--iterations", "8", "--summary-last", "5")
    proc = subprocess.run([sys.executable, str(BENCH / "benchmark_flashsac_training.py"), "--unilab-root", str(tree),
                           "--overlay", str(overlay), "--task", "go2_joystick_flat", "--backend", "mjwarp",
                           "--collector", "device", "--cpu-smoke", *tiny, "--live-panel", "never",
                           "--output", str(tmp_path / "run.json"), "--run-dir", str(tmp_path / "run")],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    run = run_files.read_json(tmp_path / "run.json")
    trained = json.loads((tmp_path / "run" / "train" / "run_config.json").read_text())["config"]
    assert (trained["training"]["task_name"], trained["training"]["sim_backend"]) == ("Go2JoystickFlat", "mjwarp")
    assert (run["status"], run["task"], run["backend"], run["collector"]) == (
        "completed", "go2_joystick_flat", "mjwarp", "device-resident")
    assert run["run_summary"]["device_env"]["terms"] == "torch" and run["iter_ms"]["count"] == 5
    phases = run["startup"]["phases_s"]
    assert 0.0 < phases["env_physics_built"] <= phases["device_env_built"] <= phases["device_env_reset"], phases
    assert phases["device_env_reset"] <= phases["first_iteration"], phases


def _one_line(proc: subprocess.CompletedProcess, prog: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    return lines[0]


def test_unknown_task_and_impossible_runs_are_one_line_before_cuda(tmp_path: Path) -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    results = tmp_path / "results"

    def matrix(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(BENCH / "bench_matrix.py"), "--results-root", str(results),
                               "--configs", "patched-default", *argv], env=env, capture_output=True, text=True,
                              timeout=120)

    line = _one_line(matrix("--task", "g1_walking"), "bench_matrix")
    assert line.endswith("TASK=g1_walking: unknown task 'g1_walking'; known: g1_walk_flat, g1_motion_tracking, "
                         "go2_joystick_flat")
    assert _one_line(matrix("--task", "g1_motion_tracking", "--sims", "mujoco", "--collectors", "device"),
                     "bench_matrix").endswith("G1 motion tracking's device env steps mjwarp (SIM=mjwarp), not on mujoco")
    assert _one_line(matrix("--task", "go2_joystick_flat", "--sims", "mujoco", "--collectors", "device"),
                     "bench_matrix").endswith(
        "COLLECTOR=device has no run with SIM=mujoco: the device-resident collector (training.collector=device) runs "
        "on mjwarp only: Go2 joystick flat's device env steps mjwarp (SIM=mjwarp), not on mujoco")
    assert not results.exists()
    single = BENCH / "benchmark_flashsac_training.py"
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, str(single), "--task", "g1_walking", "--output", str(out)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert "unknown task 'g1_walking'" in _one_line(proc, "benchmark_flashsac_training") and not out.exists()
    proc = subprocess.run([sys.executable, str(single), "--task", "go2_joystick_flat", "--backend", "mujoco",
                           "--collector", "device", "--output", str(out)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert "Go2 joystick flat's device env steps mjwarp" in _one_line(proc, "benchmark_flashsac_training")
    # Control: a known task passes the refusals and reaches the CUDA check (this machine has none), with the device
    # collector too where the task has a device env.
    proc = matrix("--task", "go2_joystick_flat")
    assert "CUDA is required" in _one_line(proc, "bench_matrix")
    proc = matrix("--task", "go2_joystick_flat", "--sims", "mujoco,mjwarp", "--collectors", "host,device")
    assert "CUDA is required" in _one_line(proc, "bench_matrix")
    # make bench TASK= reaches the same line (make adds its own about the failed recipe).
    proc = make("bench", "TASK=g1_walking", "CONFIGS=patched-default", "NO_CHECKS=1", CUDA_VISIBLE_DEVICES="")
    assert proc.returncode != 0
    assert "bench_matrix: error: TASK=g1_walking: unknown task 'g1_walking'" in proc.stderr.splitlines()[0]


def test_each_tasks_results_folder_is_its_own() -> None:
    assert {t: e.study for t, e in bench_configs.TASKS.items()} == {
        "g1_walk_flat": "bench", "g1_motion_tracking": "bench-g1-motion-tracking",
        "go2_joystick_flat": "bench-go2-joystick-flat"}
    assert all(bench_driver.STUDY_NAME.fullmatch(e.study) for e in bench_configs.TASKS.values())


def test_the_assets_and_the_clip_are_checked_per_task(pristine_template: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(pristine_template, tree, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    bench_env.ensure_assets(tree, G1_ASSETS)
    assert bench_env.missing_assets(tree, "g1_walk_flat") == []
    go2 = bench_env.missing_assets(tree, "go2_joystick_flat")  # control: the G1 archive lacks the Go2 meshes
    assert go2 and all("robots/go2/assets" in str(p) for p in go2)
    with pytest.raises(bench_env.BenchSetupError, match="Go2 asset file"):
        bench_env.ensure_assets(tree, None, task="go2_joystick_flat")
    record = bench_env.ensure_assets(tree, f"{G1_ASSETS}{os.pathsep}{GO2_ASSETS}", task="go2_joystick_flat")
    assert record["seeded_files"] == len(go2) and "base_4.obj is a visual-only placeholder" in record["note"]
    with pytest.raises(bench_env.BenchSetupError, match="motion clip .* is missing") as refused:
        bench_env.ensure_assets(tree, None, task="g1_motion_tracking")
    assert "\n" not in str(refused.value)
    record = bench_env.ensure_assets(tree, None, task="g1_motion_tracking", synthetic_clip=True)
    clip = record["motion_clip"]
    assert clip["synthetic"] is True and clip["path"].endswith("motions/g1/dance1_subject2_part.npz")
    before = Path(clip["path"]).read_bytes()
    assert bench_env.ensure_assets(tree, None, task="g1_motion_tracking", synthetic_clip=True)["motion_clip"] == clip
    assert Path(clip["path"]).read_bytes() == before
    assert json.dumps(record)  # the run JSON takes it as it is
