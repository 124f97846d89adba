#!/usr/bin/env python3
"""The stop / resume / kill matrix of a training run on a GPU host (uni_rl 0011, unilab 0006).

Run from an applied UniLab tree's root with the overlay first on ``PYTHONPATH`` (as ``make bench`` runs
UniLab); writes one JSON per case and ``matrix.json`` into ``--out``. For each setting (``report``,
``unilab-default``: ``experiments/bench/bench_configs.py``) and collector (``host``, ``device``; the device
collector on ``task=g1_walk_flat/mjwarp``) it runs UniLab's ``train_flashsac.py``:

  sigterm        SIGTERM after ``--signal-after`` iterations: exit code, seconds to exit, the checkpoint,
                 processes of the run's process group left 3 s later;
  sigint         the same with SIGINT;
  second-signal  SIGTERM, then SIGTERM again 0.2 s later: exit code, seconds, processes left;
  group-sigterm  SIGTERM to every process of the run's process group at once, as a scheduler that signals the
                 whole job does (the compile helper and the checkpoint writer get it too);
  kill-collector (host only) ``kill -9`` of the collector process: exit code, seconds, the one line;
  resume         an uninterrupted run of ``--iterations`` beside a run stopped by SIGTERM and resumed with
                 ``algo.resume=true`` (and ``training.save_replay=true`` for the device collector): the largest
                 absolute difference of every learner tensor between the two final checkpoints.

Each signal fault is sent at every phase of ``--phases`` (the run's stderr and log folder tell when it is there):

  before-first      ``--before-first-s`` seconds after launch, before any checkpoint (the imports, the env's and
                    the learner's construction);
  compile           at the first checkpoint while compile behind's helper still compiles (its warm-up line not
                    yet on stderr);
  swap              the moment the helper's warm-up line appears: the runner swaps at the next boundary;
  after-swap        two checkpoints after the helper's line: the compiled learner serves;
  checkpoint-write  the first sight of a checkpoint's temporary file (a write in flight);
  iteration         the checkpoint of iteration ``--signal-after`` (the one phase before this table had phases);
  resumed           a run stopped by SIGTERM at ``--signal-after`` and resumed, at the resumed run's next checkpoint.

Every case records whether its phase was met at the signal (``phase_met``), the checkpoints there then, and that the
newest checkpoint after the stop loads (``last_checkpoint_loads``: written whole, never half).

  python experiments/evidence/preemption_matrix.py --out results/<date>-<machine>-preemption [--settings report]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_configs import SETTINGS  # noqa: E402

TRAIN = "src/unilab/scripts/train_flashsac.py"
COMMON = ("training.no_play=true", "training.export_onnx=false", "training.logger=no_print")


def overrides(setting: str, collector: str, iterations: int, save_interval: int) -> list[str]:
    out = [f"algo.{key}={value}" for key, value in SETTINGS[setting].values]
    if SETTINGS[setting].schedules[0] is not None:
        out.append(f"algo.updates_per_step={SETTINGS[setting].schedules[0]}")
    if collector == "device":
        out += ["task=g1_walk_flat/mjwarp", "training.collector=device"]
    return [*out, *COMMON, f"algo.max_iterations={iterations}", f"algo.save_interval={save_interval}"]


def group_processes(group: int) -> list[dict]:
    left = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if os.getpgid(process.pid) == group and process.info["status"] != psutil.STATUS_ZOMBIE:
                left.append({"pid": process.pid, "cmdline": " ".join(process.info["cmdline"] or [])[:200]})
        except (ProcessLookupError, psutil.Error):
            continue
    return left


def wait_for_iteration(log_dir: Path, iteration: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not (log_dir / f"model_{iteration}.pt").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the run ended or stalled before iteration {iteration} (rc {proc.poll()})")
        time.sleep(0.05)


#: The compile helper's last line, its warm-up done (``flashsac_runtime.learner.compile_behind``): the swap follows
#: at the runner's next iteration boundary.
HELPER_DONE = "[compile behind] helper: Learner warm-up"
PHASES = ("before-first", "compile", "swap", "after-swap", "checkpoint-write", "iteration", "resumed")


def checkpoints(log_dir: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in log_dir.glob("model_*.pt"))


class Run:
    """One training process in its own process group, its stderr read as it comes (the phases read it)."""

    def __init__(self, cmd: list[str]) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     process_group=0)
        self.lines: list[str] = []
        self.helper_done = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if line.startswith(HELPER_DONE):
                self.helper_done.set()

    def wait_until(self, ready, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the run ended or stalled before {what} (rc {self.proc.poll()}); "
                                   f"stderr: {' | '.join(self.lines[-3:])}")
            time.sleep(0.001)

    def finish(self, timeout: float = 120.0) -> int:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._reader.join(timeout=10)
        return self.proc.returncode


def reach_phase(run: Run, phase: str, log_dir: Path, args: argparse.Namespace) -> bool:
    """Wait until ``phase``; whether the run was in it when this returns (the case records it)."""
    timeout = args.startup_timeout
    if phase == "before-first":
        run.wait_until(lambda: time.monotonic() - run.started >= args.before_first_s, "the signal time", timeout)
        return not checkpoints(log_dir)
    if phase == "compile":
        run.wait_until(lambda: bool(checkpoints(log_dir)), "the first checkpoint", timeout)
        return not run.helper_done.is_set() and not any(HELPER_DONE in line for line in run.lines)
    if phase in ("swap", "after-swap"):
        run.wait_until(run.helper_done.is_set, "the compile helper's warm-up line", timeout)
        if phase == "swap":
            return True
        seen = set(checkpoints(log_dir))
        run.wait_until(lambda: len(set(checkpoints(log_dir)) - seen) >= 2, "two checkpoints after the swap",
                       timeout)
        return True
    if phase == "checkpoint-write":
        run.wait_until(lambda: any(log_dir.glob(".model_*")), "a checkpoint's write", timeout)
        return True
    if phase in ("iteration", "resumed"):
        iteration = args.signal_after * (2 if phase == "resumed" else 1)
        run.wait_until(lambda: (log_dir / f"model_{iteration}.pt").exists(), f"iteration {iteration}", timeout)
        return True
    raise ValueError(f"unknown phase {phase!r}: expected one of {', '.join(PHASES)}")


def loads(path: Path | None) -> bool | None:
    if path is None:
        return None
    try:
        torch.load(path, map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - a checkpoint that does not load is the finding
        return False
    return True


def run_fault(args: argparse.Namespace, setting: str, collector: str, fault: str, log_dir: Path,
              phase: str = "iteration") -> dict:
    cmd = [sys.executable, TRAIN, *overrides(setting, collector, 100_000, args.signal_after),
           f"training.log_dir={log_dir}"]
    if phase == "resumed":  # stopped once at --signal-after, then resumed: the fault goes to the resumed run
        first = Run(cmd)
        reach_phase(first, "iteration", log_dir, args)
        first.proc.send_signal(signal.SIGTERM)
        if first.finish() != 128 + signal.SIGTERM:
            raise RuntimeError(f"the first run's stop exited {first.proc.returncode}")
        cmd = [*cmd, "algo.resume=true"]
    run = Run(cmd)
    phase_met = reach_phase(run, phase, log_dir, args)
    at_signal = checkpoints(log_dir)
    sent = time.monotonic()
    proc = run.proc
    if fault == "kill-collector":
        collector_pids = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)
                          if "spawn_main" in " ".join(c.cmdline())]
        os.kill(collector_pids[0], signal.SIGKILL)
    elif fault == "group-sigterm":  # a scheduler that signals every process of the job (the helper, the writer)
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGINT if fault == "sigint" else signal.SIGTERM)
        if fault == "second-signal":
            time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
    run.finish()
    seconds = time.monotonic() - sent
    time.sleep(3.0)
    left = group_processes(proc.pid)
    for process in left:
        os.kill(process["pid"], signal.SIGKILL)
    lines = [line for line in run.lines if line.startswith("[train_offpolicy]")]
    done = checkpoints(log_dir)
    last = log_dir / f"model_{done[-1]}.pt" if done else None
    return {"setting": setting, "collector": collector, "fault": fault, "phase": phase, "phase_met": phase_met,
            "signal_after_launch_s": round(sent - run.started, 3), "checkpoints_at_signal": at_signal,
            "exit_code": proc.returncode, "seconds_to_exit": seconds, "lines": lines, "processes_left": left,
            "last_checkpoint": str(last) if last else None, "last_checkpoint_loads": loads(last),
            "temporaries_left": [p.name for p in log_dir.glob(".model_*")],
            "stderr_tail": run.lines[-12:]}


def run_resume(args: argparse.Namespace, setting: str, collector: str, root: Path) -> dict:
    extra = ["training.save_replay=true"] if collector == "device" else []
    base = overrides(setting, collector, args.iterations, args.signal_after)
    straight = root / "uninterrupted"
    subprocess.run([sys.executable, TRAIN, *base, *extra, f"training.log_dir={straight}"], check=True,
                   stdout=subprocess.DEVNULL)
    stopped = root / "stopped"
    proc = subprocess.Popen([sys.executable, TRAIN, *base, *extra, f"training.log_dir={stopped}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, process_group=0)
    wait_for_iteration(stopped, args.signal_after, proc, args.startup_timeout)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    resumed = subprocess.run([sys.executable, TRAIN, *base, *extra, f"training.log_dir={stopped}",
                              "algo.resume=true"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    result = {"setting": setting, "collector": collector, "fault": "resume", "stop_exit_code": proc.returncode,
              "stop_line": [x for x in stderr.splitlines() if x.startswith("[train_offpolicy]")],
              "resume_exit_code": resumed.returncode}
    final = stopped / f"model_{args.iterations}.pt"
    if resumed.returncode != 0 or not final.is_file():
        # What the resumed run said is the finding; without it a failed resume reads as a missing file.
        return {**result, "error": f"the resumed run exited {resumed.returncode} without {final.name}",
                "resume_stderr_tail": resumed.stderr[-3000:]}
    a = torch.load(straight / f"model_{args.iterations}.pt", map_location="cpu", weights_only=True)
    b = torch.load(final, map_location="cpu", weights_only=True)
    diffs = {}
    for group in ("actor", "critic", "target_critic", "temperature"):
        for key, value in a[group].items():
            if value.is_floating_point():
                diffs[f"{group}.{key}"] = float((value - b[group][key]).abs().max())
    return {**result, "max_abs_difference": max(diffs.values(), default=None),
            "bitwise_equal_tensors": sum(d == 0.0 for d in diffs.values()), "tensors": len(diffs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--settings", default="report,unilab-default")
    parser.add_argument("--collectors", default="host,device")
    parser.add_argument("--faults", default="sigterm,sigint,second-signal,kill-collector,resume")
    parser.add_argument("--phases", default="iteration", help=f"of {', '.join(PHASES)}")
    parser.add_argument("--before-first-s", type=float, default=5.0)
    parser.add_argument("--signal-after", type=int, default=200)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--startup-timeout", type=float, default=900.0)
    parser.add_argument("--jobs", type=int, default=1, help="cases run side by side")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    phases = args.phases.split(",")
    cases = [(setting, collector, fault, phase if fault != "resume" else "iteration")
             for setting in args.settings.split(",") for collector in args.collectors.split(",")
             for fault in args.faults.split(",") for phase in (phases if fault != "resume" else phases[:1])
             if not (fault == "kill-collector" and collector == "device")]  # no collector process of its own

    def run_case(case: tuple[str, str, str, str]) -> dict:
        setting, collector, fault, phase = case
        name = f"{setting}-{collector}-{fault}" + ("" if phase == "iteration" else f"-{phase}")
        root = out / "runs" / name
        try:
            result = (run_resume(args, setting, collector, root) if fault == "resume"
                      else run_fault(args, setting, collector, fault, root, phase))
        except Exception as exc:  # noqa: BLE001 - one failed case must not hide the others
            result = {"setting": setting, "collector": collector, "fault": fault, "phase": phase,
                      "error": f"{type(exc).__name__}: {exc}"}
        result["concurrent_cases"] = args.jobs
        (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result), flush=True)
        return result

    # Cases are independent runs, each in its own process group; run side by side they share the GPU and the
    # cores, so their seconds to exit are upper bounds of a quiet machine's (recorded as concurrent_cases).
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(run_case, cases))
    (out / "matrix.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
