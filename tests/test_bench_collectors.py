"""The benchmark with the device-resident collector (``make bench COLLECTOR=host,device``), on the CPU.

What a GPU call cannot be trusted to catch by itself, each with a control that must fail:

- ``--collector device`` composes through the patched tree's Hydra config into ``training.collector=device``
  on MJWarp, and the trainer's own resolver finds the task's device env for it (control: the same request on
  CPU MuJoCo, which the trainer refuses too); the bench refuses it for CPU MuJoCo in one line, before CUDA is
  looked for, in the single-run script and in ``make bench``'s driver;
- the matrix alternates CPU MuJoCo, host-env MJWarp and device MJWarp at both settings;
- a real short bench run of the device collector (UniLab's command line, MuJoCo Warp on Warp's CPU device, the
  learner on the CPU, 16 envs) writes a run JSON that names the collector ``device-resident`` with its host syncs
  and its iteration split, equal over all iterations to the trainer's own run_summary.json (control: without
  the hook's in-process collection cycle the run's rows cannot be summarized);
- the report keys rows on the recorded collector (control: the same runs without the field pool into one row);
- the same run records its start-up timeline from launch to the first iteration and the compile caches it
  found (the phase timer and the cache probe with their controls: ``tests/test_startup_record.py``).
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import runnable_tree
from forked_runs import ForkServer

PROJECT = Path(__file__).resolve().parents[1]
BENCH = PROJECT / "experiments" / "bench"
sys.path[:0] = [str(BENCH), str(PROJECT / "experiments" / "evidence")]

import bench_configs  # noqa: E402
import bench_driver  # noqa: E402
import bench_env  # noqa: E402
import bench_matrix  # noqa: E402
import bench_options  # noqa: E402
import bench_records  # noqa: E402
import bench_report  # noqa: E402
import bench_stats  # noqa: E402
import run_files  # noqa: E402
import mjwarp_report  # noqa: E402

SINGLE = BENCH / "benchmark_flashsac_training.py"
#: A committed host-collector MJWarp run at the report's setting (2/1/1) and its CPU MuJoCo pair.
HOST_RUNS = PROJECT / "results" / "2026-12-01-h200-mjwarp-mps-sim2sim" / "bench" / "runs"
#: 16 envs, batch 32, learning_starts 2, 2/1/1: the first iteration serves 3 ticks, the others 1.
TINY = ("--num-envs", "16", "--batch-size", "32", "--replay-buffer-n", "8", "--learning-starts", "2",
        "--updates-per-step", "2", "--policy-frequency", "2", "--iterations", "8", "--summary-last", "5")
RESOLVE = """
import sys
from hydra import compose, initialize_config_dir
from unilab.scripts.train_offpolicy import resolve_device_env_factory
with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
    cfg = compose("config", overrides=sys.argv[2:])
try:
    factory = resolve_device_env_factory("flashsac", cfg)
    found = None if factory is None else f"{factory.__module__}:{factory.__name__}"
except ValueError as exc:
    found = f"refused: {exc}"
print(cfg.training.collector, cfg.training.sim_backend, cfg.algo.num_envs, found)
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> tuple[Path, Path]:
    checkout, overlay = applied_session
    return runnable_tree(checkout, tmp_path_factory.mktemp("bench-collectors") / "tree"), overlay


@pytest.fixture(scope="module")
def composed(tree: tuple[Path, Path]) -> Iterator[Callable[..., str]]:
    """The last line a script (``RESOLVE``) prints for the patched tree's Hydra config composed with
    overrides: each a process of its own, forked from one that imported Hydra and UniLab's trainer (forked_runs)."""
    root, overlay = tree
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["PYTHONPATH"] = os.pathsep.join(map(str, (overlay, root / "src")))
    server = ForkServer(("hydra", "unilab.scripts.train_offpolicy"), env=env, cwd=root, flags=("-W", "ignore"))

    def run(code: str, *overrides: str) -> str:
        returncode, out, err = server.run(str(root / "src/unilab/conf/flashsac"), *overrides, code=code, timeout=300)
        assert returncode == 0, err[-3000:]
        return out.strip().splitlines()[-1]

    yield run
    server.close()


def _resolve(composed: Callable[..., str], overrides: list[str]) -> list[str]:
    """What the patched tree's Hydra config and the trainer's own device env resolver make of ``overrides``."""
    return composed(RESOLVE, *overrides).split(" ", 3)


def _overrides(*argv: str) -> list[str]:
    """The single-run script's Hydra command line, without the run's log folder."""
    args = bench_options.parse_args(["--unilab-root", "/x", "--setting", "report", "--config", "patched-default", *argv])
    return [o for o in bench_options.hydra_overrides(args, Path("/logs")) if not o.startswith("training.log_dir=")]


def test_device_collector_composes_for_mjwarp_and_the_trainer_finds_its_device_env(
        composed: Callable[..., str]) -> None:
    overrides = _overrides("--backend", "mjwarp", "--collector", "device")
    assert "training.collector=device" in overrides and "task=g1_walk_flat/mjwarp" in overrides
    assert _resolve(composed, overrides) == ["device", "mjwarp", "256", "flashsac_runtime.envs:make_g1_walk_device_env"]
    # The patched tree's MJWarp owner trains with the device collector by default (unilab 0005), so the bench
    # names the collector of every run on the patched tree; the pristine tree has no key (references: none).
    default = [o for o in _overrides("--backend", "mjwarp") if not o.startswith(bench_configs.COLLECTOR_KEY)]
    assert _resolve(composed, default) == ["device", "mjwarp", "256", "flashsac_runtime.envs:make_g1_walk_device_env"]
    host = _overrides("--backend", "mjwarp")
    assert f"{bench_configs.COLLECTOR_KEY}=host" in host
    assert _resolve(composed, host) == ["host", "mjwarp", "256", "None"]
    mujoco = _overrides("--backend", "mujoco")
    assert f"{bench_configs.COLLECTOR_KEY}=host" in mujoco
    assert _resolve(composed, mujoco) == ["host", "mujoco", "256", "None"]
    reference = _overrides("--backend", "mujoco", "--config", "baseline-1.3.2")
    assert not [o for o in reference if o.startswith(bench_configs.COLLECTOR_KEY)]
    # Control: the device collector forced onto CPU MuJoCo is refused by the trainer as by the bench.
    forced = [*_overrides("--backend", "mujoco"), "training.collector=device"]
    collector, sim, _, found = _resolve(composed, forced)
    assert (collector, sim) == ("device", "mujoco") and found.startswith("refused: training.collector=device")


def _one_line_refusal(proc: subprocess.CompletedProcess, prog: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and proc.stdout == "", proc.stderr
    assert lines[0].startswith(f"{prog}: error: ")
    return lines[0]


def test_device_collector_on_cpu_mujoco_is_refused_in_one_line_before_cuda(tmp_path: Path) -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, str(SINGLE), "--backend", "mujoco", "--collector", "device",
                           "--output", str(out)], env=env, capture_output=True, text=True, timeout=120)
    line = _one_line_refusal(proc, "benchmark_flashsac_training")
    assert "runs on mjwarp only" in line and "not on mujoco" in line and not out.exists()
    proc = subprocess.run([sys.executable, str(BENCH / "bench_matrix.py"), "--sims", "mujoco", "--collectors",
                           "device", "--configs", "patched-default", "--results-root", str(tmp_path / "results")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert "COLLECTOR=device has no run with SIM=mujoco" in _one_line_refusal(proc, "bench_matrix")
    assert not (tmp_path / "results").exists()
    # The same request with MJWarp passes the refusal and reaches the CUDA check (this machine has none).
    proc = subprocess.run([sys.executable, str(SINGLE), "--backend", "mjwarp", "--collector", "device",
                           "--output", str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert "CUDA is required" in _one_line_refusal(proc, "benchmark_flashsac_training")
    # The references have the host collector only, and a CPU smoke run of the host collector is refused.
    assert "only the host collector" in str(bench_configs.refusal("baseline-1.3.2", "mujoco", "device"))
    # Compile behind runs with either collector; the environment-only configurations stay MuJoCo Warp's.
    assert [bench_configs.refusal("compile-behind", *run) for run in (("mujoco", "host"), ("mjwarp", "host"),
                                                                       ("mjwarp", "device"))] == [None] * 3
    assert "runs on mjwarp only (SIM=mjwarp)" in str(bench_configs.refusal("warp-lazy-build", "mujoco", "host"))
    with pytest.raises(bench_env.BenchSetupError, match="--cpu-smoke runs the device collector only"):
        bench_options.require_runnable(bench_options.parse_args(["--backend", "mjwarp", "--cpu-smoke"]))


def test_matrix_alternates_cpu_mujoco_host_mjwarp_and_device_mjwarp_at_both_settings() -> None:
    specs = bench_matrix.plan(["upstream-1.4.0", "patched-default"], ["report", "unilab-default"], repeats=1,
                              schedules=[2], sims=["mujoco", "mjwarp"], collectors=["host", "device"])
    one_setting = [("upstream-1.4.0", "mujoco", "host"), ("patched-default", "mujoco", "host"),
                   ("patched-default", "mjwarp", "host"), ("patched-default", "mjwarp", "device")]
    assert [(s.config, s.sim, s.collector) for s in specs] == one_setting * 2
    assert [(s.setting, s.updates_per_step) for s in specs] == [("report", 2)] * 4 + [("unilab-default", None)] * 4
    argv = bench_driver.single_run_argv(specs[3], common=[], output=Path("/o.json"), run_dir=Path("/r"))
    assert argv[argv.index("--collector") + 1] == "device" and argv[argv.index("--backend") + 1] == "mjwarp"
    assert bench_matrix.unplannable(["patched-default"], ["mujoco", "mjwarp"], ["host", "device"]) is None
    assert "unknown collector" in str(bench_matrix.unplannable(["patched-default"], ["mjwarp"], ["gpu"]))
    lists = subprocess.run([sys.executable, str(BENCH / "bench_configs.py"), "list", "collectors"],
                           capture_output=True, text=True, check=True)
    assert lists.stdout.strip() == "host,device"


def test_the_trainer_records_name_the_collector_and_a_mismatch_fails_the_run() -> None:
    swap = {"helper_exit_code": 0, "helper_s": 70.0, "swap_iteration": 900, "swap_pause_s": 9.0}
    summary = {"collector": "device-resident", "host_syncs_per_iteration": 3.0, "collector_phases_ms": {},
               "compile_behind": swap}
    device = bench_records.collector_record("device", {"collector": "device-resident"}, summary)
    assert device["error"] is None and device["run_summary"]["compile_behind"] == swap
    host = bench_records.collector_record("host", {"collector": None, "pid": 1}, {"status": "completed"})
    assert (host["collector"], host["run_summary"], host["error"]) == ("host", None, None)
    behind = bench_records.collector_record("host", {"collector": None, "pid": 1},
                                            {"status": "completed", "compile_behind": swap})
    assert behind["run_summary"] == {"compile_behind": swap} and behind["error"] is None
    assert bench_records.collector_record("host", {}, None)["collector"] == "host"  # logged nothing: as asked
    # Control: asked for the device collector, the learner's manifest names none (the host runner ran).
    wrong = bench_records.collector_record("device", {"collector": None, "pid": 1}, None)
    assert wrong["collector"] == "host" and "asked for the device-resident collector" in str(wrong["error"])


def test_a_run_whose_env_step_stayed_eager_is_marked_in_the_tables() -> None:
    """The device env's form reaches the run JSON from the trainer's runtime manifest, and a configuration whose
    env step's capture failed in some run is marked wherever its label is shown (control: captured, unmarked)."""
    def run(step_graph: str) -> dict:
        form = {"step_graph": step_graph, "terms": "torch"}
        summary = {"collector": "device-resident", "host_syncs_per_iteration": 1.0, "collector_phases_ms": {},
                   "runtime_manifest": {"device_env": form}}
        record = bench_records.collector_record("device", {"collector": "device-resident"}, summary)
        assert record["run_summary"]["device_env"] == form
        return {"run_summary": record["run_summary"]}

    captured, eager = run("captured"), run("eager (capture failed: operation not permitted when stream is capturing)")
    label = bench_report._label("patched-default", [captured, eager])
    assert label.endswith(" (env step not graphed, its capture failed: 1 of 2 runs)"), label
    assert bench_report._label("patched-default", [captured, captured]) == (
        bench_configs.CONFIGS["patched-default"].label)


#: The tests of the real CPU bench run of the device collector (MuJoCo Warp on Warp's CPU device, over a minute
#: on two cores): extended; the device collector's command line is the default suite's in test_device_collector.py.
REAL_BENCH_RUN = pytest.mark.extended


@pytest.fixture(scope="module")
def device_run(tree: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real bench run of the device collector: the single-run script, UniLab's command line, Warp's CPU."""
    root, overlay = tree
    out = tmp_path_factory.mktemp("device-run")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHSAC_PROVENANCE_DIR")}
    proc = subprocess.run([sys.executable, str(SINGLE), "--unilab-root", str(root), "--overlay", str(overlay),
                           "--backend", "mjwarp", "--collector", "device", "--cpu-smoke", *TINY, "--live-panel",
                           "never", "--output", str(out / "run.json"), "--run-dir", str(out / "run")],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    run = run_files.read_json(out / "run.json")
    run["_summary_file"] = str(out / "run" / "train" / "run_summary.json")
    return run


@REAL_BENCH_RUN
def test_a_real_device_bench_run_records_collector_host_syncs_and_phases(device_run: dict) -> None:
    run, rows_all = device_run, device_run["rows_all"]
    assert run["status"] == "completed" and run["backend"] == "mjwarp" and run["device"]["cuda"] is False
    assert run["collector"] == run["collector_requested"] == "device-resident"
    assert run["training_config"]["algo_params"] is not None and len(rows_all) == 8 and run["num_samples"] == 5
    trainer = json.loads(Path(run["_summary_file"]).read_text())
    whole = ("collector", "host_syncs_per_iteration", "collector_phases_ms")
    form = trainer["runtime_manifest"]["device_env"]
    assert run["run_summary"] == {**{k: trainer[k] for k in whole}, "device_env": form}
    assert run["run_summary"]["device_env"]["step_graph"] == "off"  # Warp's CPU device: no CUDA graph
    # Over all iterations, the hook's rows give the trainer's own whole-run figures.
    assert statistics.fmean(r["host_syncs"] for r in rows_all) == pytest.approx(trainer["host_syncs_per_iteration"])
    for phase, mean in trainer["collector_phases_ms"].items():
        assert statistics.fmean(r["collector_timing_ms"][f"{phase}_ms"] for r in rows_all) == pytest.approx(mean)
    # Over the summary window: the run JSON's figures. Per iteration one wait, for its end (the actor's noise
    # draws none); the deferred metrics and the episode statistics were staged there and come with it.
    window = run["rows"]
    assert run["host_syncs_per_iteration"] == pytest.approx(statistics.fmean(r["host_syncs"] for r in window))
    assert [r["host_syncs"] for r in rows_all] == [1] * 8 and run["host_syncs_per_iteration"] == 1.0
    # The env step by parts comes with them (the env's stamps); no env step beside the learner on the CPU.
    phases = set(run["collector_phases_ms"])
    assert phases == set(bench_stats.DEVICE_COLLECTOR_PHASES) == set(trainer["collector_phases_ms"]) | {
        "env_step_beside_learner"}
    assert run["collector_phases_ms"].pop("env_step_beside_learner") is None
    assert all(v is not None and v >= 0.0 for v in run["collector_phases_ms"].values())
    assert run["collector_phases_ms"]["learner"] == pytest.approx(run["learner_train_ms"]["mean_ms"])
    collection = ("action_sampling_ms", "env_step_ms", "replay_write_ms", "episode_stats_ms")
    for row in window:
        assert row["collector_cycle_ms"] == pytest.approx(sum(row["collector_timing_ms"][k] for k in collection))
    # Control: without the hook's in-process cycle (the logger derives none for this collector) the rows
    # cannot be summarized, and the bench would have recorded the run as failed.
    with pytest.raises(ValueError, match="no timing samples"):
        bench_stats.timing_report([{**r, "collector_cycle_ms": None} for r in rows_all], summary_last=5)


def _rows(table: str, needle: str) -> list[str]:
    return [line for line in table.splitlines()[2:] if needle in line]


@REAL_BENCH_RUN
def test_the_report_keeps_collectors_apart(device_run: dict) -> None:
    """A committed host-collector MJWarp run and the real device run in one column (test input: the device run,
    made at 16 envs, is put in the report's 2/1/1 column; its figures are its own)."""
    host = [bench_report.read_run(p) for p in sorted(HOST_RUNS.glob("r-0[12]-*.json.xz"))]
    assert [(r["backend"], r["setting"], r["training_config"]["schedule"]) for r in host] == [
        ("mujoco", "report", "2/1/1"), ("mjwarp", "report", "2/1/1")]
    device = copy.deepcopy(device_run)
    device.update(setting="report", config="patched-default", _file="device.json")
    runs = [*host, device]
    assert {bench_report.run_key(r) for r in runs} == {
        "patched-default", "patched-default @mjwarp", "patched-default @mjwarp @device-resident"}
    table = bench_report.collector_table(runs)
    (device_row,) = _rows(table, "| device-resident |")
    cells = [c.strip() for c in device_row.split("|")[1:-1]]
    assert cells[2:5] == ["MuJoCo Warp (GPU)", "device-resident", "1"]
    assert cells[8] == f"{device['host_syncs_per_iteration']:.2f}"
    ratio = host[1]["wall_per_iter_ms"]["mean_ms"] / device["wall_per_iter_ms"]["mean_ms"]
    assert cells[-1] == f"{ratio:.2f}×"
    (host_row,) = _rows(table, "| MuJoCo Warp (GPU) | host |")
    assert host_row.split("|")[9].strip() == "–"  # the host path counts no host syncs
    throughput = bench_report.throughput_table(runs)
    assert len(_rows(throughput, "MuJoCo Warp GPU physics")) == 2
    assert len(_rows(throughput, "device-resident collector")) == 1
    physics = mjwarp_report.physics_table(runs)
    assert [line.split("|")[4].strip() for line in _rows(physics, "MuJoCo Warp (GPU)")] == ["1"]
    # Control: the same runs without the collector field pool into one MJWarp row.
    for run in runs:
        run.pop("collector", None)
    assert len(_rows(bench_report.throughput_table(runs), "MuJoCo Warp GPU physics")) == 1
    pooled = _rows(mjwarp_report.physics_table(runs), "MuJoCo Warp (GPU)")
    assert [line.split("|")[4].strip() for line in pooled] == ["2"]
    assert len(_rows(bench_report.collector_table(runs), "MuJoCo Warp (GPU)")) == 1


@REAL_BENCH_RUN
def test_a_real_bench_run_records_its_start_up_timeline_and_the_caches_it_found(device_run: dict) -> None:
    """The device run's start-up record (the host replay pipeline's phases are the GPU runs'; none here)."""
    startup = device_run["startup"]
    phases = startup["phases_s"]
    assert list(phases)[0] == "env_physics_built" and list(phases)[-1] == "first_iteration"
    assert 0.0 < phases["env_physics_built"] <= phases["device_env_built"] <= phases["learner_constructed"]
    assert phases["learner_constructed"] <= phases["warm_up_done"] <= phases["first_iteration"]
    # Warp's CPU device builds lazily unless asked (unisim 0004): every module load was a launch's.
    loads = startup["warp_module_loads"]
    assert loads["kernel_build"]["workers"] == 0 and loads["by_build_workers"]["count"] == 0
    assert loads["at_launch"]["count"] > 20 and loads["at_launch"]["last_end_s"] <= phases["first_iteration"]
    assert phases["first_iteration"] == device_run["warmup"]["startup_to_first_iteration_s"]
    assert "collector_started" not in phases and device_run["replay_h2d"] is None  # no collector process, no H2D
    assert set(startup["compile_caches"]) == set(bench_records.compile_caches.CACHES)
    assert all(c["path"] for c in startup["compile_caches"].values() if not c.get("off"))
    assert startup["cold_caches"] == bench_records.compile_caches.cold(startup["compile_caches"])
