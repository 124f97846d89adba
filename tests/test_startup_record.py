"""The bench's start-up record, on the CPU: the compile caches found at launch and the phases' timeline.

Each with a control that must fail:

- ``compile_caches`` resolves every cache folder as torch and uni_rl do, under the defaults and under each
  variable that moves it (torch's and uni_rl's own functions answer in a fresh process with the same
  environment); an empty artifact folder turns the cache off;
- a folder is empty until a real ``torch.compile`` writes into it (a folder holding only folders is empty too);
- the hook's phase timer wraps a real uni_rl function when its module is imported, without importing
  anything earlier, times only its first call and puts the original back (the wrapped state is seen first);
- the report's warm-up table shows the timeline and the cold caches, and "–" for a run that predates them;
- the hook times every Warp module load of a real (CPU) kernel and says who made it: a launch, or a worker
  thread (as the mjwarp backend's build workers are); a second launch of a loaded module records nothing;
  the start-phases table splits the loads, and shows "–" for a run without the record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


PROJECT = Path(__file__).resolve().parents[1]
BENCH = PROJECT / "experiments" / "bench"
sys.path[:0] = [str(BENCH), str(BENCH / "hook")]

import bench_records  # noqa: E402
import bench_report  # noqa: E402
import compile_caches  # noqa: E402
import startup_phases  # noqa: E402

#: torch's and uni_rl's own answer for the folders, in a fresh process (their calls may create folders).
ORACLE = r"""
import json, os
from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir
from torch.utils.cpp_extension import _get_build_directory
from uni_rl.algos.common.compile import compile_cache_file
import warp
warp.config.quiet = True
warp.init()
artifact = compile_cache_file("probe")
triton = triton_cache_dir(0)
print(json.dumps({
    "inductor": cache_dir(),
    "triton": triton if "TRITON_CACHE_DIR" in os.environ else os.path.dirname(triton),
    "compile_artifacts": None if artifact is None else str(artifact.parent),
    "torch_extensions": os.path.dirname(_get_build_directory("probe", False)),
    "warp_kernels": warp.config.kernel_cache_dir,
}))
"""
#: Warp's own answer for its kernel folder, in a fresh process.
WARP_ORACLE = r"""
import json
import warp
warp.config.quiet = True
warp.init()
print(json.dumps(warp.config.kernel_cache_dir))
"""
MOVED = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "FLASHSAC_COMPILE_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
         "XDG_CACHE_HOME", "TMPDIR", "TEMP", "TMP", "HOME", "WARP_CACHE_PATH", "CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE")


def _environment(tmp_path: Path, **moved: str) -> dict[str, str]:
    """This process's environment with every folder variable unset but a private HOME and TMPDIR, then ``moved``."""
    env = {k: v for k, v in os.environ.items() if k not in MOVED and k != "PYTHONPATH"}
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"), **moved)
    return env


def _oracle(env: dict[str, str], uni_rl_root: Path) -> dict[str, str | None]:
    proc = subprocess.run([sys.executable, "-c", ORACLE], env={**env, "PYTHONPATH": str(uni_rl_root)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _probed(env: dict[str, str]) -> dict[str, str | None]:
    import importlib.metadata

    import torch

    found = compile_caches.folders(env, torch_cuda=torch.version.cuda,
                                   warp_version=importlib.metadata.version("warp-lang"))
    return {name: None if folder is None else str(folder) for name, folder in found.items()}


def test_the_warp_kernel_cache_is_where_warp_puts_it(tmp_path: Path) -> None:
    """Warp's kernel folder (MuJoCo Warp's kernels, built on a machine's first run) under the defaults,
    ``XDG_CACHE_HOME`` and ``WARP_CACHE_PATH``, as Warp itself answers; control: the variants differ, so a
    probe that ignored the environment fails, and without Warp the cache is off, not empty."""
    variants = {"defaults": {}, "xdg": {"XDG_CACHE_HOME": str(tmp_path / "xdg")},
                "moved": {"WARP_CACHE_PATH": str(tmp_path / "warp")}}
    seen = []
    for name, moved in variants.items():
        env = _environment(tmp_path, **moved)
        proc = subprocess.run([sys.executable, "-c", WARP_ORACLE], env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        probed = _probed(env)["warp_kernels"]
        assert probed == json.loads(proc.stdout.strip().splitlines()[-1]), name
        seen.append(probed)
    assert len(set(seen)) == len(variants)
    off = compile_caches.folders(_environment(tmp_path), torch_cuda=None, warp_version=None)["warp_kernels"]
    assert off is None and compile_caches.contents(off)["off"] is True


def test_the_cuda_driver_cache_is_where_the_driver_keeps_it(tmp_path: Path) -> None:
    """The CUDA driver's compile cache by CUDA's documented variables (no driver here to ask): ``~/.nv/ComputeCache``,
    moved by ``CUDA_CACHE_PATH``, off with ``CUDA_CACHE_DISABLE=1``; control: the variants differ, so a probe that
    ignored the environment fails, and a disabled cache is never reported cold."""
    variants = {"defaults": {}, "moved": {"CUDA_CACHE_PATH": str(tmp_path / "nv")}}
    seen = {name: _probed(_environment(tmp_path, **moved))["cuda_driver"] for name, moved in variants.items()}
    assert seen == {"defaults": str(tmp_path / "home" / ".nv" / "ComputeCache"), "moved": str(tmp_path / "nv")}
    off = compile_caches.probe(_environment(tmp_path, CUDA_CACHE_DISABLE="1"))
    assert off["cuda_driver"]["off"] is True and "cuda_driver" not in compile_caches.cold(off)
    assert "cuda_driver" in compile_caches.cold(compile_caches.probe(_environment(tmp_path)))


@pytest.mark.extended  # a real Inductor compile on the CPU
def test_cache_folders_are_where_torch_and_uni_rl_put_them(patched_uni_rl_root: Path, tmp_path: Path) -> None:
    variants = {
        "defaults": {},
        "xdg": {"XDG_CACHE_HOME": str(tmp_path / "xdg")},
        "each moved": {name: str(tmp_path / name.lower()) for name in MOVED[:4]},
        "artifacts off": {"FLASHSAC_COMPILE_CACHE_DIR": ""},
    }
    seen = []
    for name, moved in variants.items():
        env = _environment(tmp_path, **moved)
        probed = _probed(env)
        assert {k: v for k, v in probed.items() if k != "cuda_driver"} == _oracle(env, patched_uni_rl_root), name
        seen.append(probed)
    # Control: every variant moves some folder, so a probe that ignored the environment would fail above.
    assert len({json.dumps(p, sort_keys=True) for p in seen}) == len(variants)
    assert seen[-1]["compile_artifacts"] is None


def test_the_bytecode_probe_looks_where_the_trainer_looks(tmp_path: Path) -> None:
    """torch's compiler modules: current beside the sources (pip compiled this venv), none under an empty
    PYTHONPYCACHEPREFIX (control), all of them once compiled there."""
    import torch

    here = compile_caches.probe(_environment(tmp_path))["python_bytecode"]
    assert here["files"] == here["sampled"] > 50 and not compile_caches.cold({"python_bytecode": here})
    prefix = tmp_path / "pycache"
    env = _environment(tmp_path, PYTHONPYCACHEPREFIX=str(prefix))
    before = compile_caches.probe(env)["python_bytecode"]
    assert before["empty"] is True and before["path"] == str(prefix), before
    sample = [Path(torch.__file__).parent / name for name in compile_caches.BYTECODE_SAMPLE]
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-l", *map(str, sample)], check=True, env=env)
    after = compile_caches.probe(env)["python_bytecode"]
    assert after["files"] == after["sampled"] == before["sampled"], after


@pytest.mark.extended  # a real Inductor compile on the CPU (cold: about a minute on two cores)
def test_a_cache_is_empty_until_a_real_compile_fills_it(tmp_path: Path) -> None:
    env = _environment(tmp_path, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), FLASHSAC_COMPILE_CACHE_DIR="")
    before = compile_caches.probe(env)
    assert before["inductor"]["empty"] is True and before["inductor"]["files"] == 0  # the folder does not exist
    assert before["compile_artifacts"]["off"] is True and "compile_artifacts" not in compile_caches.cold(before)
    (tmp_path / "inductor" / "fxgraph" / "empty").mkdir(parents=True)
    assert compile_caches.probe(env)["inductor"]["empty"] is True  # folders alone (torch makes them eagerly)
    code = "import torch\nf = torch.compile(lambda x: (x * 2).sin())\nf(torch.ones(8))\n"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = compile_caches.probe(env)
    assert after["inductor"]["empty"] is False and after["inductor"]["files"] > 0 and after["inductor"]["bytes"] > 0
    assert "inductor" in compile_caches.cold(before) and "inductor" not in compile_caches.cold(after)


#: In a fresh process: the hook's phase timer on a real uni_rl class, before and after its module's import.
PHASED = r"""
import json, sys, time
import startup_phases
records = []
phases = [startup_phases.Phase("replay_buffer_built", "uni_rl.ipc.replay_buffer", "ReplayBuffer.__init__",
                               detail="storage_width")]
startup_phases.install(records.append, time.perf_counter, phases)
early = sorted(m for m in ("torch", "uni_rl.ipc.replay_buffer") if m in sys.modules)
from uni_rl.ipc.replay_buffer import ReplayBuffer
wrapped = hasattr(ReplayBuffer.__init__, "__wrapped__")
begin = time.perf_counter()
ReplayBuffer(capacity=64, obs_dim=5, action_dim=2, device="cpu", ingress_slot_rows=16, critic_dim=3)
took = time.perf_counter() - begin
ReplayBuffer(capacity=64, obs_dim=5, action_dim=2, device="cpu", ingress_slot_rows=16, critic_dim=3)
print(json.dumps({"early": early, "wrapped_before": wrapped, "took": took, "records": records,
                  "wrapped_after": hasattr(ReplayBuffer.__init__, "__wrapped__")}))
"""


def test_the_phase_timer_times_a_first_call_and_puts_the_original_back(patched_uni_rl_root: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH / "hook"), str(patched_uni_rl_root)])
    proc = subprocess.run([sys.executable, "-c", PHASED], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["early"] == []  # installing imported nothing the trainer imports
    assert out["wrapped_before"] is True and out["wrapped_after"] is False  # control: the timer really was there
    (record,) = out["records"]  # the second construction is not timed
    assert record["name"] == "replay_buffer_built" and record["detail"] == 2 * 5 + 2 + 3 + 2 * 3
    assert 0.0 < record["end_s"] - record["start_s"] <= out["took"]


def test_the_timeline_reads_the_learners_phases_in_the_order_they_ended(tmp_path: Path) -> None:
    sink = tmp_path / "timings.jsonl"
    lines = [
        {"kind": "meta", "pid": 7},
        {"kind": "phase", "name": "warm_up_done", "pid": 7, "start_s": 6.0, "end_s": 20.0},
        {"kind": "phase", "name": "learner_constructed", "pid": 7, "start_s": 2.0, "end_s": 5.5},
        {"kind": "phase", "name": "learner_constructed", "pid": 8, "start_s": 1.0, "end_s": 99.0},  # another rank
        {"kind": "phase", "name": "replay_pipeline_ready", "pid": 7, "start_s": 5.5, "end_s": 6.0,
         "detail": {"h2d_copy": "torch_copy_stream", "h2d_copy_reason": "not requested", "h2d_submitter": "x"}},
    ]
    sink.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    phases = bench_records.read_phases(sink, 7)
    caches = {"inductor": {"empty": True}, "triton": {"empty": False}, "compile_artifacts": {"off": True, "empty": None}}
    record = bench_records.startup_record(phases, [{"wall_s": 31.0}], caches)
    assert list(record["phases_s"].items()) == [("learner_constructed", 5.5), ("replay_pipeline_ready", 6.0),
                                                ("warm_up_done", 20.0), ("first_iteration", 31.0)]
    assert record["phase_durations_s"]["warm_up_done"] == 14.0 and record["cold_caches"] == ["inductor"]
    h2d = bench_records.replay_h2d_record(phases)
    assert h2d == {"copy": "torch_copy_stream", "reason": "not requested", "submitter": "x", "setup_s": 0.5}
    assert bench_records.replay_h2d_record({}) is None  # no host replay pipeline (the device collector)
    run = {"_file": "r.json", "config": "patched-default", "warmup": {"startup_to_first_iteration_s": 31.0},
           "startup": record, "replay_h2d": h2d}
    (row,) = bench_report.warmup_table([run]).splitlines()[2:]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    columns = [name for name, _ in bench_report.STARTUP_COLUMNS]
    assert cells[3] == "31.0" and cells[4 + columns.index("learner_constructed")] == "5.5"
    assert cells[4 + columns.index("warm_up_done")] == "20.0" and cells[4 + columns.index("graph_captured")] == "–"
    assert cells[4 + len(columns):6 + len(columns)] == ["inductor", "torch_copy_stream"]
    # Control: a run from before the record shows dashes, not zeros.
    (old,) = bench_report.warmup_table([{**run, "startup": None, "replay_h2d": None}]).splitlines()[2:]
    assert [c.strip() for c in old.split("|")[1:-1]][4:6 + len(columns)] == ["–"] * (len(columns) + 2)


def test_the_reports_columns_are_phases_the_hook_times_and_each_names_a_patched_function(
        applied_session: tuple[Path, Path]) -> None:
    """A renamed function would silently drop its phase from every run: each must exist in the overlay or the
    applied tree, defined where the hook wraps it (in its owner's own namespace, as the hook looks it up: a method
    a subclass inherits is not its to wrap)."""
    assert {name for name, _ in bench_report.STARTUP_COLUMNS} <= {phase.name for phase in startup_phases.PHASES}
    code = ("import importlib, json, sys\nfound = []\n"
            "for module, attribute in json.loads(sys.argv[1]):\n    obj = importlib.import_module(module)\n"
            "    *path, last = attribute.split('.')\n"
            "    for part in path:\n        obj = getattr(obj, part, None)\n"
            "    found.append(callable(vars(obj).get(last)) if obj is not None else False)\n"
            "print(json.dumps(found))\n")
    # Control: a task class's inherited reset, which the hook would not find, is caught.
    wanted = [[phase.module, phase.attribute] for phase in startup_phases.PHASES]
    wanted.append(["flashsac_runtime.envs.g1_walk", "G1WalkDeviceEnv.reset"])
    tree, overlay = applied_session
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "MUJOCO_GL": "disable",
           "PYTHONPATH": os.pathsep.join([str(overlay), str(tree / "src")])}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(wanted)], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True] * (len(wanted) - 1) + [False]


#: In a fresh process: the hook's Warp load timer on a real kernel, loaded by a worker thread and by a launch.
WARP_LOADS = r"""
import json, threading, time
import startup_phases
records = []
startup_phases.install(records.append, time.perf_counter, ())
import warp as wp
wp.config.log_level = wp.LOG_WARNING

@wp.kernel
def built_ahead(a: wp.array(dtype=float)):
    a[wp.tid()] = 1.0

x = wp.zeros(4, dtype=float, device="cpu")
worker = threading.Thread(target=lambda: built_ahead.module.load("cpu", block_dim=1))
worker.start(); worker.join()
wp.launch(built_ahead, dim=4, inputs=[x], device="cpu")  # already loaded: no record

def at_launch():
    @wp.kernel(module="unique")
    def launched(a: wp.array(dtype=float)):
        a[wp.tid()] = 2.0
    return launched

k = at_launch()
wp.launch(k, dim=4, inputs=[x], device="cpu")
wp.launch(k, dim=4, inputs=[x], device="cpu")
print(json.dumps({"records": records, "x": x.numpy().tolist()}))
"""


def test_the_hook_times_every_warp_module_load_and_says_who_made_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(BENCH / "hook"), WARP_CACHE_PATH=str(tmp_path / "warp"), CUDA_VISIBLE_DEVICES="")
    script = tmp_path / "warp_loads.py"  # Warp reads a kernel's source from its file
    script.write_text(WARP_LOADS, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["x"] == [2.0] * 4
    records = out["records"]
    assert [(r["kind"], r["launch"]) for r in records] == [("warp_load", False), ("warp_load", True)]
    assert records[0]["module"].endswith("__main__") or records[0]["module"] == "__main__"
    assert "launched" in records[1]["module"] and all(r["end_s"] > r["start_s"] for r in records)


def test_the_start_phases_table_splits_warp_loads_by_who_made_them(tmp_path: Path) -> None:
    sink = tmp_path / "timings.jsonl"
    build = {"workers": 16, "modules": 29, "seconds": 9.5, "failed": []}
    lines = [
        {"kind": "phase", "name": "env_physics_built", "pid": 7, "start_s": 3.0, "end_s": 20.0, "detail": build},
        {"kind": "warp_load", "module": "mujoco_warp._src.smooth", "launch": False, "pid": 7, "start_s": 4, "end_s": 9},
        {"kind": "warp_load", "module": "mujoco_warp._src.solver", "launch": False, "pid": 7, "start_s": 4, "end_s": 7},
        {"kind": "warp_load", "module": "_k__locals__kernel_1", "launch": True, "pid": 7, "start_s": 15, "end_s": 16.5},
        {"kind": "warp_load", "module": "_k__locals__kernel_2", "launch": True, "pid": 8, "start_s": 1, "end_s": 90},
    ]
    sink.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    phases = bench_records.read_phases(sink, 7)
    record = bench_records.startup_record(phases, [{"wall_s": 31.0}], {}, bench_records.read_warp_loads(sink, 7))
    loads = record["warp_module_loads"]
    assert loads["by_build_workers"] == {"count": 2, "seconds": 8.0, "last_end_s": 9.0}
    assert loads["at_launch"] == {"count": 1, "seconds": 1.5, "last_end_s": 16.5} and loads["kernel_build"] == build
    run = {"_file": "r.json", "config": "patched-default", "setting": "report",
           "warmup": {"startup_to_first_iteration_s": 31.0}, "startup": record}
    (row,) = bench_report.start_phases_table([run]).splitlines()[2:]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    columns = [name for name, _ in bench_report.START_PHASE_COLUMNS]
    assert cells[3 + columns.index("env_physics_built")] == "20.0"
    assert cells[3 + len(columns):6 + len(columns)] == ["31.0", "16 · 2 · 8.0 · 9.5", "1 · 1.5"]
    # Control: a run from before the record shows dashes, not zeros.
    (old,) = bench_report.start_phases_table([{**run, "startup": None}]).splitlines()[2:]
    old_cells = [c.strip() for c in old.split("|")[1:-1]]
    assert old_cells[3:] == ["–"] * len(columns) + ["31.0", "–", "–", "–"]


def test_the_compile_frames_table_lists_each_graph_of_the_helper_and_of_the_swap() -> None:
    """Every compile of a compiled-behind run's record is a row, a backward named as such; a run without the record
    adds none (control: the frames' seconds are the record's, not another run's)."""
    frame = {"frame": "_critic_objective_eager", "forward": True, "compile_s": 15.88, "inductor_s": 8.821,
             "graph_ops": 360, "recompile_reason": None, "failed": None}
    backward = dict(frame, frame=None, forward=False, compile_s=2.885, inductor_s=2.844, graph_ops=None)
    swap = dict(frame, compile_s=2.02, inductor_s=None)
    run = {"_file": "cb.json", "startup": {"cold_caches": ["inductor", "triton"]},
           "run_summary": {"compile_behind": {"helper_frames": [frame, backward], "swap_frames": [swap]}}}
    rows = bench_report.compile_frames_table([run, {"_file": "pd.json", "run_summary": {}}]).splitlines()[2:]
    assert rows == [
        "| cb.json | inductor, triton | helper | `_critic_objective_eager` | 15.88 | 8.82 | 360 |",
        "| cb.json | inductor, triton | helper | `(backward of the graph above)` | 2.88 | 2.84 | – |",
        "| cb.json | inductor, triton | runner at the swap | `_critic_objective_eager` | 2.02 | – | 360 |",
    ]
