"""A training run survives its own faults (uni_rl 0011, unilab 0006) on the CPU: real processes, real signals.

UniLab's real G1 Walk Flat env in every check (CPU MuJoCo behind the test adapter, MuJoCo Warp on Warp's CPU
device, the host path's real collector process); each check has a negative control that must fail:

- UniLab's training command line (device collector) stopped by SIGTERM exits 143 with one line naming the
  iteration and the checkpoint, within seconds; the checkpoint loads with `weights_only=True` (UniLab's play
  loader) and `algo.resume=true` continues it to the end (control: resuming a checkpoint without its
  training state is refused); a resume already at or past `algo.max_iterations` says so in one line and writes
  nothing; SIGTERM or SIGINT while the trainer still starts is one line and 143 or 130;
- with `save_replay` the resumed device-collector run is bitwise the uninterrupted one: learner, optimizers,
  schedules, normalizers, replay ring, env state, RNG (control: the env's random generator left out of the
  checkpoint makes them differ);
- the host path's collector process: SIGTERM to the learner leaves no collector and no resource tracker
  (control: the cleanup left out leaves the collector behind); a second signal during a slow stop exits at
  once, still without orphans; `kill -9` of the collector is reported in one line within seconds; `kill -9`
  of the learner takes the collector with it (control: without the parent-death signal it stays);
- a second signal while a checkpoint is being written exits at once and leaves no temporary beside the last
  good checkpoint (control: a temporary the forced exit does not know of stays behind);
- a resume reads the learner's keys onto the run's device and the training state on the host, so the RNG
  restore a GPU resume runs is the one the CPU runs (device ``meta`` stands in for a GPU; control: the whole
  file mapped onto that device, as a plain ``map_location`` read does, is refused by the RNG restore).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from conftest import PROJECT, runnable_tree, side_by_side
from snippets import run_snippet

HARNESS = PROJECT / "tests" / "preemption_harness.py"
TRAIN = "src/unilab/scripts/train_flashsac.py"
CLI = ("task=g1_walk_flat/mujoco", "algo.num_envs=16", "algo.batch_size=32", "algo.replay_buffer_n=8",
       "algo.learning_starts=2", "algo.updates_per_step=2", "algo.policy_frequency=2", "algo.save_interval=5",
       "training.no_play=true", "training.export_onnx=false", "training.logger=no_print",
       "training.collector=device", "+training.device_env_factory=device_env_adapter:make_g1_walk_flat_cpu_env")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> tuple[Path, Path]:
    checkout, overlay = applied_session
    return runnable_tree(checkout, tmp_path_factory.mktemp("preemption") / "tree"), overlay


def _env(tree: tuple[Path, Path], **extra: str) -> dict[str, str]:
    root, overlay = tree
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHSAC_PROVENANCE_DIR")}
    env["PYTHONPATH"] = os.pathsep.join(map(str, (overlay, root / "src", PROJECT / "experiments" / "evidence",
                                                  PROJECT / "experiments" / "profile", PROJECT / "tests")))
    return {**env, "UNISIM_MJWARP_ALLOW_CPU": "1", "CUDA_VISIBLE_DEVICES": "", "MUJOCO_GL": "disable", **extra}


def _popen(tree: tuple[Path, Path], *argv: str, **extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-W", "ignore", *argv], cwd=tree[0], env=_env(tree, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def test_sigterm_checkpoints_exits_143_and_algo_resume_continues(tree: tuple[Path, Path], tmp_path: Path) -> None:
    logs = tmp_path / "run"
    proc = _popen(tree, TRAIN, *CLI, "algo.max_iterations=1000", f"training.log_dir='{logs}'")
    _wait_for(logs / "model_5.pt", proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    seconds = time.monotonic() - sent
    assert proc.returncode == 143, stderr[-3000:]
    assert seconds < 10, seconds
    lines = [line for line in stderr.splitlines() if "training stopped by SIGTERM" in line]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    stopped_at = int(lines[0].split("after iteration ")[1].split(":")[0])
    checkpoint = logs / f"model_{stopped_at}.pt"
    assert f"checkpoint {checkpoint}" in lines[0] and stopped_at >= 5
    assert not list(logs.glob(".model_*")), "a temporary was left"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert saved["training_state"]["iteration"] == stopped_at and saved["update_count"] == stopped_at
    summary = json.loads((logs / "run_summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["completed_iterations"] == stopped_at
    print(f"SIGTERM to exit: {seconds:.2f} s (stopped after iteration {stopped_at})")

    # Control: a checkpoint without its training state (a 1.3.2-style file) is not resumed silently.
    del saved["training_state"]
    old = tmp_path / "old"
    old.mkdir()
    torch.save(saved, old / "model_3.pt")

    def resume(log_dir: Path, iterations: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-W", "ignore", TRAIN, *CLI, f"algo.max_iterations={iterations}",
                               f"training.log_dir='{log_dir}'", "algo.resume=true"], cwd=tree[0], env=_env(tree),
                              capture_output=True, text=True, timeout=600, check=False)

    end = stopped_at + 3
    resumed, refused = side_by_side(lambda: resume(logs, end), lambda: resume(old, 5))  # independent runs
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    summary = json.loads((logs / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["completed_iterations"] == end
    final = torch.load(logs / f"model_{end}.pt", map_location="cpu", weights_only=True)
    assert final["update_count"] == end
    assert refused.returncode != 0 and "has no training state" in refused.stderr, refused.stderr[-2000:]

    # A resume whose checkpoint already ends at, or is past, algo.max_iterations: one line, nothing written
    # (control, the series before this check: past the end it ran nothing and saved the later iteration's state
    # under the earlier total's name).
    def files(folder: Path) -> dict[str, tuple[int, int]]:
        return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}

    before = files(logs)
    at_end, past_end = side_by_side(lambda: resume(logs, end), lambda: resume(logs, end - 2))
    for proc, code, words in ((at_end, 0, f"already ends at algo.max_iterations={end}"),
                              (past_end, 1, f"is iteration {end}, past algo.max_iterations={end - 2}")):
        assert proc.returncode == code, (proc.stdout + proc.stderr)[-3000:]
        assert proc.stderr.strip().splitlines()[-1].startswith(f"algo.resume=true: {logs / f'model_{end}.pt'}")
        assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert files(logs) == before


def test_a_resumed_run_stops_as_a_first_run_does(tree: tuple[Path, Path], tmp_path: Path) -> None:
    """The stop in a resumed run (stopped once by SIGTERM, resumed, then SIGINT): the one line, exit 130, the
    checkpoint of its last finished iteration past the resumed one, no temporary left."""
    logs = tmp_path / "run"
    first = _popen(tree, TRAIN, *CLI, "algo.max_iterations=1000", f"training.log_dir='{logs}'")
    _wait_for(logs / "model_5.pt", first)
    first.send_signal(signal.SIGTERM)
    _, stderr = first.communicate(timeout=60)
    assert first.returncode == 143, stderr[-3000:]
    resumed_from = max(int(p.stem.split("_")[1]) for p in logs.glob("model_*.pt"))
    resumed = _popen(tree, TRAIN, *CLI, "algo.max_iterations=1000", f"training.log_dir='{logs}'", "algo.resume=true")
    _wait_for(logs / f"model_{(resumed_from // 5 + 1) * 5}.pt", resumed)
    resumed.send_signal(signal.SIGINT)
    _, stderr = resumed.communicate(timeout=60)
    assert resumed.returncode == 130, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if "training stopped by SIGINT" in line]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    stopped_at = int(lines[0].split("after iteration ")[1].split(":")[0])
    assert stopped_at > resumed_from and not list(logs.glob(".model_*"))
    saved = torch.load(logs / f"model_{stopped_at}.pt", map_location="cpu", weights_only=True)
    assert saved["training_state"]["iteration"] == stopped_at


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_while_the_trainer_starts_is_one_line(tree: tuple[Path, Path], tmp_path: Path, sig: int,
                                                     code: int) -> None:
    """SIGTERM or SIGINT one second after launch, while the entry script still imports and sets up (no training
    loop guards the run yet): one line, 128 + the signal, no traceback, no process left. Control, the series
    before this guard: SIGINT gave a KeyboardInterrupt traceback and SIGTERM a silent death (-15)."""
    proc = _popen(tree, TRAIN, *CLI, "algo.max_iterations=1000", f"training.log_dir='{tmp_path / 'run'}'")
    time.sleep(1.0)
    children = [p.pid for p in _descendants(proc.pid)]
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert lines and lines[-1] == (f"[train_flashsac] stopped by {signal.Signals(sig).name} outside the training "
                                   "loop; no checkpoint to write"), stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    time.sleep(1.0)
    assert not _alive(children)


#: The entry script's own guard, its imports made (run as a module, not as ``__main__``: no training), with an exit
#: handler that hangs for ten minutes (an import's thread or handler stuck on the way out); argv[1] says whether the
#: signal comes while the script still imports, then SIGTERM arrives.
STOP_WITH_A_HANGING_EXIT = """
import atexit, os, runpy, signal, sys, time
entry = runpy.run_path("src/unilab/scripts/train_flashsac.py", run_name="flashsac_entry")
atexit.register(time.sleep, 600)
handler = entry["_stopped_outside_training"]
handler.__globals__["_importing"] = sys.argv[1] == "importing"  # the module's own globals (run_path returns a copy)
signal.signal(signal.SIGTERM, handler)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(600)
"""


def test_a_stop_outside_the_training_loop_ends_even_if_its_way_out_hangs(tree: tuple[Path, Path]) -> None:
    """The entry script's guard with an exit handler that hangs: during the imports the process ends at once with
    the stop line and 143; after them, through Python's exit, which ends the stop's grace (3 s here) after the
    signal with one more line and 143. Control: with a grace longer than the hang's test, the process is still
    there after 10 s (it is then killed)."""
    runs = {name: _popen(tree, "-c", STOP_WITH_A_HANGING_EXIT, phase, FLASHSAC_STOP_GRACE_S=grace)
            for name, phase, grace in (("imports", "importing", "600"), ("set-up", "set-up", "3"),
                                       ("control", "set-up", "600"))}
    started = time.monotonic()
    out = {}
    for name in ("imports", "set-up"):
        _, stderr = runs[name].communicate(timeout=90)
        out[name] = (runs[name].returncode, stderr.strip().splitlines(), time.monotonic() - started)
    line = "[train_flashsac] stopped by SIGTERM outside the training loop; no checkpoint to write"
    code, lines, _ = out["imports"]
    assert code == 143 and lines[-1:] == [line], lines[-20:]
    code, lines, ended = out["set-up"]
    assert code == 143 and lines[-2:] == [
        line, "[train_flashsac] the stop did not end within 3 s: exiting now (exit 143)"], lines[-20:]
    time.sleep(max(0.0, 10.0 - (time.monotonic() - started)))
    assert runs["control"].poll() is None  # without the grace running out, the hang holds the process
    os.killpg(runs["control"].pid, signal.SIGKILL)
    runs["control"].communicate(timeout=30)


def test_resumed_run_with_the_replay_is_bitwise_the_uninterrupted_one(tree: tuple[Path, Path], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-W", "ignore", str(HARNESS), "resume-bitwise", "--log-dir",
                           str(tmp_path / "logs")], cwd=tree[0], env=_env(tree), capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["stopped"] == {"iteration": 4, "checkpoint": str(tmp_path / "logs" / "b" / "model_4.pt"),
                                 "exit_code": 143}, result
    assert result["keys"] > 1000 and result["env_keys"] > 100 and result["ring_rows"] > 0, result
    assert result["differ"] == [] and result["n_differ"] == 0, result
    # The control: the resume without the env's random generator must not pass as the same run.
    assert result["n_control_differ"] > 0 and any(k.startswith("actor.") for k in result["control_differ"]), result
    print(f"bitwise resume: {result['keys']} values equal ({result['scratch_keys']} solver scratch arrays "
          f"skipped), {result['timings']}")


def _host(tree: tuple[Path, Path], tmp_path: Path, **extra: str) -> tuple[subprocess.Popen, dict, list[int]]:
    proc = _popen(tree, str(HARNESS), "host-collector", "--log-dir", str(tmp_path / "logs"), **extra)
    assert proc.stdout is not None
    pids = json.loads(proc.stdout.readline())
    ready = proc.stdout.readline()
    assert json.loads(ready or "{}").get("ready"), proc.communicate()[1][-3000:]
    children = [child.pid for child in _descendants(pids["learner"])]
    assert pids["collector"] in children and len(children) >= 2, children  # the collector, the resource tracker
    return proc, pids, children


def _reap(pids: list[int]) -> None:
    for pid in _alive(pids):
        os.kill(pid, signal.SIGKILL)


def test_sigterm_leaves_no_collector_and_no_resource_tracker(tree: tuple[Path, Path], tmp_path: Path) -> None:
    proc, _, children = _host(tree, tmp_path)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    seconds = time.monotonic() - sent
    assert proc.returncode == 143 and seconds < 10, (seconds, stderr[-2000:])
    assert sum("training stopped by SIGTERM" in line for line in stderr.splitlines()) == 1
    assert _alive(children) == [], children
    print(f"host collector, SIGTERM to exit: {seconds:.2f} s, children stopped: {len(children)}")


def test_without_the_cleanup_the_collector_is_left_behind(tree: tuple[Path, Path], tmp_path: Path) -> None:
    proc, pids, children = _host(tree, tmp_path, PREEMPTION_HARNESS_NO_CLEANUP="1")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)  # not communicate(): the orphan holds the output pipes open
    time.sleep(1.0)
    try:
        assert pids["collector"] in _alive(children)
    finally:
        _reap(children)


def test_a_second_signal_exits_at_once_without_orphans(tree: tuple[Path, Path], tmp_path: Path) -> None:
    proc, _, children = _host(tree, tmp_path, PREEMPTION_HARNESS_SLOW_STOP_S="60")
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    seconds = time.monotonic() - sent
    assert proc.returncode == 143 and seconds < 5, (seconds, stderr[-2000:])
    assert "second SIGTERM: exiting now without a checkpoint" in stderr
    assert _alive(children) == [], children


def test_a_killed_collector_is_reported_in_one_line(tree: tuple[Path, Path], tmp_path: Path) -> None:
    proc, pids, children = _host(tree, tmp_path)
    sent = time.monotonic()
    os.kill(pids["collector"], signal.SIGKILL)
    out, stderr = proc.communicate(timeout=60)
    seconds = time.monotonic() - sent
    result = json.loads(out.strip().splitlines()[-1])
    assert seconds < 5 and result["collector_died"], (seconds, stderr[-2000:])
    line = f"the collector process (pid {pids['collector']}) died during training at iteration 0 (killed by SIGKILL)"
    assert [x for x in stderr.splitlines() if x.startswith("[train_offpolicy]")] == [
        f"[train_offpolicy] {line}; the learner stopped"], stderr[-2000:]
    assert _alive(children) == [], children


def test_a_killed_learner_takes_the_collector_with_it(tree: tuple[Path, Path], tmp_path: Path) -> None:
    """(The control, a collector without the parent-death signal outliving its learner: the no-cleanup test.)"""
    proc, pids, children = _host(tree, tmp_path)
    os.kill(pids["learner"], signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 3.0
    while pids["collector"] in _alive(children) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert pids["collector"] not in _alive(children)
    finally:
        _reap(children)


_CUT_SHORT = r"""
import os, signal, sys, time
from flashsac_runtime import preemption


class SecondSignal:
    # Pickled inside torch.save: the second signal lands while the checkpoint's temporary is being written.
    def __reduce__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)
        return (int, (0,))


if sys.argv[2] == "unrecorded":  # the control: a temporary the forced exit does not know of stays behind
    preemption._WRITING = type("Unrecorded", (set,), {"add": lambda self, item: None})()
with preemption.StopSignals():
    os.kill(os.getpid(), signal.SIGTERM)  # the first signal: a graceful stop is under way
    time.sleep(0.2)
    preemption.save_atomically({"weights": [1.0] * 1000, "cut": SecondSignal()}, sys.argv[1])
"""


def test_a_second_signal_during_the_checkpoint_leaves_no_temporary(tree: tuple[Path, Path], tmp_path: Path) -> None:
    for mode in ("recorded", "unrecorded"):
        folder = tmp_path / mode
        folder.mkdir()
        proc = subprocess.run([sys.executable, "-c", _CUT_SHORT, str(folder / "model_7.pt"), mode], env=_env(tree),
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 143 and "second SIGTERM: exiting now" in proc.stderr, proc.stderr[-2000:]
        left = sorted(p.name for p in folder.iterdir())
        assert not (folder / "model_7.pt").exists()
        if mode == "recorded":
            assert left == [], left
        else:
            assert len(left) == 1 and left[0].startswith(".model_7.pt.") and left[0].endswith(".tmp"), left


def test_the_training_state_of_a_resume_is_read_on_the_host(patched_uni_rl_root: Path, tmp_path: Path) -> None:
    result = run_snippet(
        patched_uni_rl_root,
        f"""
        import random
        import numpy as np
        from flashsac_runtime import preemption

        l = learner()
        torch.manual_seed(5); np.random.seed(5); random.seed(5)
        saved = {{**l.get_state_dict(), preemption.STATE_KEY: {{"iteration": 7, "rng": preemption.rng_states("cpu")}}}}
        path = {str(tmp_path / "model_7.pt")!r}
        torch.save(saved, path)
        draws = lambda: (torch.rand(3).tolist(), np.random.rand(2).tolist(), random.random())
        expected = draws()

        keys, state = preemption.read_resume_state(path, "meta")  # a device whose tensors the host cannot read
        def devices(tree):
            if isinstance(tree, torch.Tensor):
                return {{str(tree.device)}}
            items = tree.values() if isinstance(tree, dict) else tree if isinstance(tree, (list, tuple)) else ()
            return sorted(set().union(*map(set, map(devices, items))))
        preemption.restore_rng_states(state["rng"], "meta")
        out = {{"learner": devices(keys), "state": devices(state), "iteration": state["iteration"],
                "draws_equal": draws() == expected}}
        mapped = torch.load(path, map_location="meta", weights_only=False)[preemption.STATE_KEY]
        try:
            preemption.restore_rng_states(mapped["rng"], "meta")
            out["control"] = "restored"
        except (RuntimeError, TypeError, NotImplementedError) as error:
            out["control"] = type(error).__name__
        print(json.dumps(out))
        """,
    )
    assert result["learner"] == ["meta"] and result["state"] == ["cpu"], result
    assert result["iteration"] == 7 and result["draws_equal"] is True, result
    assert result["control"] != "restored", result
