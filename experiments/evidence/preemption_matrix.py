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
  kill-collector (host only) ``kill -9`` of the collector process: exit code, seconds, the one line;
  resume         an uninterrupted run of ``--iterations`` beside a run stopped by SIGTERM and resumed with
                 ``algo.resume=true`` (and ``training.save_replay=true`` for the device collector): the largest
                 absolute difference of every learner tensor between the two final checkpoints.

  python experiments/evidence/preemption_matrix.py --out results/<date>-<machine>-preemption [--settings report]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
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


def run_fault(args: argparse.Namespace, setting: str, collector: str, fault: str, log_dir: Path) -> dict:
    cmd = [sys.executable, TRAIN, *overrides(setting, collector, 100_000, args.signal_after),
           f"training.log_dir={log_dir}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            process_group=0)
    wait_for_iteration(log_dir, args.signal_after, proc, args.startup_timeout)
    sent = time.monotonic()
    if fault == "kill-collector":
        collector_pids = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)
                          if "spawn_main" in " ".join(c.cmdline())]
        os.kill(collector_pids[0], signal.SIGKILL)
    else:
        proc.send_signal(signal.SIGINT if fault == "sigint" else signal.SIGTERM)
        if fault == "second-signal":
            time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
    seconds = time.monotonic() - sent
    time.sleep(3.0)
    left = group_processes(proc.pid)
    for process in left:
        os.kill(process["pid"], signal.SIGKILL)
    lines = [line for line in stderr.splitlines() if line.startswith("[train_offpolicy]")]
    checkpoints = sorted(log_dir.glob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    return {"setting": setting, "collector": collector, "fault": fault, "exit_code": proc.returncode,
            "seconds_to_exit": seconds, "lines": lines, "processes_left": left,
            "last_checkpoint": str(checkpoints[-1]) if checkpoints else None,
            "temporaries_left": [p.name for p in log_dir.glob(".model_*")]}


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
    parser.add_argument("--signal-after", type=int, default=200)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--startup-timeout", type=float, default=900.0)
    parser.add_argument("--jobs", type=int, default=1, help="cases run side by side")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = [(setting, collector, fault) for setting in args.settings.split(",")
             for collector in args.collectors.split(",") for fault in args.faults.split(",")
             if not (fault == "kill-collector" and collector == "device")]  # no collector process of its own

    def run_case(case: tuple[str, str, str]) -> dict:
        setting, collector, fault = case
        root = out / "runs" / f"{setting}-{collector}-{fault}"
        try:
            result = (run_resume(args, setting, collector, root) if fault == "resume"
                      else run_fault(args, setting, collector, fault, root))
        except Exception as exc:  # noqa: BLE001 - one failed case must not hide the others
            result = {"setting": setting, "collector": collector, "fault": fault,
                      "error": f"{type(exc).__name__}: {exc}"}
        result["concurrent_cases"] = args.jobs
        (out / f"{setting}-{collector}-{fault}.json").write_text(json.dumps(result, indent=2) + "\n")
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
