#!/usr/bin/env python3
"""One real FlashSAC training run (UniLab, MuJoCo G1) with per-iteration learner timings.

Runs UniLab's own entry ``src/unilab/scripts/train_flashsac.py`` from the root of a
UniLab tree, with real MuJoCo environments in the spawned collector, and records for
every iteration the learner's update time, the collector cycle, the whole iteration
and the reward, as the production runner reports them to its logger (see
``hook/flashsac_bench_hook.py``). Writes one JSON whose field names are the
original report's, so that its readers' command line and tools keep working::

    experiments/bench/benchmark_flashsac_training.py --unilab-root <tree> --backend mujoco \\
        --iterations 1000 --summary-last 500 --num-envs 256 --batch-size 256 \\
        --replay-buffer-n 32 --learning-starts 8 --updates-per-step 2 \\
        --policy-frequency 2 --compile --output run.json

The learner is the patched ``uni_rl`` of ``overlay/`` (``make apply``) unless
``--config`` names a reference or ``--uni-rl-path`` names another folder. ``--collector
device`` trains with the device-resident collector (``training.collector=device``: the
learner's process steps the task's device env, MuJoCo Warp only); the run JSON names the
collector its trainer recorded. CUDA is required: without it the script prints one error
line and writes nothing (``--cpu-smoke`` is the tests' exception, never a measurement).

``make bench`` and ``make bench-parity`` run it once per run, as a subprocess (``bench_driver``); it can be run
by hand with the original report's command line. One step per module: ``bench_options`` (the command line and its
Hydra overrides), ``bench_learner`` (which ``uni_rl``, the trainer's environment), ``bench_launcher`` (the trainer
as a child process), ``bench_records`` (what the trainer left behind), ``bench_stats`` (the summary statistics);
this file puts them in order and writes the run JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_configs  # noqa: E402
import bench_env  # noqa: E402
import bench_stats  # noqa: E402
import compile_caches  # noqa: E402
import physics_floor  # noqa: E402
import run_files  # noqa: E402
from bench_env import BenchSetupError  # noqa: E402
from bench_launcher import run_child  # noqa: E402
from bench_learner import child_env, provenance_site, resolve_learner, source_matches  # noqa: E402
from bench_options import (  # noqa: E402
    PROG, config_identity, hydra_overrides, parse_args, require_runnable, selected_config, setting_name,
)
from bench_records import (  # noqa: E402
    applied_state, collector_record, floor_report, last_exception_line, load_json_object, read_phases,
    read_provenance, read_timings, read_warp_loads, replay_h2d_record, startup_record, training_config,
)


def smoke_device() -> dict[str, Any]:
    """The device record of a --cpu-smoke run: torch on the CPU, no GPU, marked as no measurement."""
    import torch

    return {"cuda": False, "gpu": None, "capability": None, "torch": torch.__version__,
            "cuda_runtime": torch.version.cuda, "smoke": "CPU learner, MuJoCo Warp's CPU device: not a measurement"}


def print_summary(payload: dict[str, Any]) -> None:
    """A short table after the live panel is gone: what the JSON's summary says."""
    if "learner_train_ms" not in payload:
        return
    print(f"\n{payload['config_label']} | schedule {payload['training_config']['schedule']} | "
          f"last {payload['num_samples']} of {payload['num_samples_all']} iterations")
    print(f"{'phase':<20}{'mean':>10}{'median':>10}{'p90':>10}{'p95':>10}")
    for name in bench_stats.TIMING_FIELDS:
        s = payload[name]
        print(f"{name:<20}{s['mean_ms']:>10.2f}{s['median_ms']:>10.2f}{s['p90_ms']:>10.2f}{s['p95_ms']:>10.2f}")
    rate, floor = payload.get("env_steps_per_s") or {}, payload.get("physics_floor") or {}
    print(f"env steps/s {rate.get('mean', 0):,.0f} (setting {payload.get('setting')}); physics floor "
          f"{floor.get('floor_ms') or 0:.2f} ms, wall / floor {floor.get('wall_over_floor') or 0:.2f}")
    syncs = payload.get("host_syncs_per_iteration")
    print(f"collector {payload.get('collector')}: host syncs per iteration "
          f"{'not counted' if syncs is None else f'{syncs:.2f}'}; phases (ms) "
          + ", ".join(f"{k} {v:.2f}" for k, v in (payload.get("collector_phases_ms") or {}).items() if v is not None))
    warm = payload["warmup"]
    print(f"warm-up: first iteration learner {warm['first_iteration_learner_train_ms']:.0f} ms, "
          f"excess before window {warm['excess_learner_ms'] or 0:.0f} ms, "
          f"start to first iteration {warm['startup_to_first_iteration_s'] or 0:.1f} s")
    startup = payload["startup"]
    phases = ", ".join(f"{name} {s:.1f}" for name, s in startup["phases_s"].items() if s is not None)
    print(f"start-up (s from launch): {phases}; cold caches at launch: {', '.join(startup['cold_caches']) or 'none'}")


def run(args: argparse.Namespace) -> int:
    """The run itself; raises BenchSetupError for unmet preconditions."""
    require_runnable(args)
    parent_device = smoke_device() if args.cpu_smoke else bench_env.require_cuda()
    bench_env.require_sim(args.backend)
    config = selected_config(args)
    patched_root = bench_env.require_unilab_root(args.unilab_root)
    on_pristine = config is not None and config.tree == "pristine" and args.pristine_unilab_root is not None
    unilab_root = bench_env.require_unilab_root(args.pristine_unilab_root) if on_pristine else patched_root
    assets = bench_env.ensure_assets(unilab_root, args.assets, task=args.task,
                                     synthetic_clip=args.synthetic_motion_clip)
    source, learner_path = resolve_learner(args)
    state = applied_state(args.require_applied, patched_root, args.overlay)
    # The CPU physics floor is a CPU MuJoCo figure: measured only for runs whose collector steps CPU MuJoCo.
    step_cost = physics_floor.measure_step_cost(unilab_root / bench_env.task_scene(args.task)) if args.backend == "mujoco" else None
    checks = load_json_object(args.checks_json) if args.checks_json else None
    if args.checks_json and checks is None:
        raise BenchSetupError(f"--checks-json {args.checks_json} is not a readable JSON object")
    config_name, config_label = config_identity(args)
    if config and config.requires_key and config.requires_key not in bench_env.flashsac_config_keys(unilab_root):
        raise BenchSetupError(f"configuration {config.name} needs {config.requires_key} in the tree's flashsac config")
    collector_key = bench_configs.COLLECTORS[args.collector].requires_key
    if collector_key and collector_key not in bench_env.flashsac_config_keys(unilab_root):
        raise BenchSetupError(f"--collector {args.collector} needs {collector_key} in the tree's flashsac config")

    run_dir = (args.run_dir or Path(tempfile.mkdtemp(prefix="flashsac-bench-"))).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    logs, prov_dir, timings = run_dir / "train", run_dir / "provenance", run_dir / "timings.jsonl"
    prov_dir.mkdir(exist_ok=True)
    timings.unlink(missing_ok=True)
    for stale in prov_dir.glob("provenance-*.json"):
        stale.unlink()
    site = provenance_site(args.overlay, learner_path, run_dir)
    env = child_env(learner_path=learner_path, prov_site=site, unilab_root=unilab_root,
                    overlay=args.overlay, timings=timings, provenance_dir=prov_dir)
    if config is not None:
        env.update(dict(config.environment))
    if args.cpu_smoke:
        env.update(CUDA_VISIBLE_DEVICES="", UNISIM_MJWARP_ALLOW_CPU="1")
    command = [sys.executable, "-m", "flashsac_bench_hook",
               str(unilab_root / bench_env.TRAIN_SCRIPT_REL), *hydra_overrides(args, logs)]
    print("$ " + shlex.join(command), flush=True)
    caches = compile_caches.probe(env)  # what the trainer finds at launch
    started = datetime.datetime.now(datetime.timezone.utc)
    child = run_child(command, cwd=unilab_root, env=env, panel=args.live_panel, timeout_s=args.timeout_s)

    meta, rows_all, end = read_timings(timings)
    phases = read_phases(timings, meta.get("pid"))
    provenance = read_provenance(prov_dir)
    run_config = load_json_object(logs / "run_config.json")
    collector = collector_record(args.collector, meta, load_json_object(logs / "run_summary.json"))
    pins = bench_env.PINS
    versions = meta.get("package_versions") or {}
    flashsac_source = meta.get("flashsac_source")
    ok_source = source_matches(source, learner_path, flashsac_source, args.overlay)
    status = "completed" if child.returncode == 0 and end.get("status") == "completed" else "failed"
    if status == "completed" and (not ok_source or collector["error"]):
        status = "failed"
    payload: dict[str, Any] = {
        "status": status,
        "returncode": child.returncode,
        "timed_out": child.timed_out,
        "command": command,
        "run_dir": str(run_dir),
        "started_utc": started.isoformat(timespec="seconds"),
        "wall_s": child.wall_s,
        "cpus_usable": len(os.sched_getaffinity(0)),  # a pinned run's wall clock is a machine of this many CPUs
        "backend": args.backend,
        "task": args.task,
        "setting": setting_name(args),
        "unilab_tree": "pristine" if on_pristine else "patched",
        "unilab_root": str(unilab_root),
        "config": config_name,
        "config_label": config_label,
        "learner_source_kind": source,
        # who stepped the env, as the trainer recorded it; host syncs and phases are over the summary window
        "collector": collector["collector"],
        "collector_requested": collector["collector_requested"],
        "host_syncs_per_iteration": None,
        "run_summary": collector["run_summary"],
        "iterations": args.iterations,
        "summary_last": args.summary_last,
        "training_config": training_config(args, run_config),
        "dp_nccl_transport": meta.get("dp_nccl_transport"),  # data-parallel runs: NCCL P2P/SHM and why
        "device": {
            **parent_device,
            "gpu": meta.get("gpu", parent_device["gpu"]),
            "capability": meta.get("capability", parent_device["capability"]),
            "torch": meta.get("torch", parent_device["torch"]),
            "package_versions": {k: v for k, v in versions.items() if k != "torch"},  # torch: its own field
            "flashsac_source": flashsac_source,
            "flashsac_source_expected": str(learner_path / "uni_rl") if learner_path else "installed (not overlay)",
            "flashsac_source_ok": ok_source,
            "unilab_source": meta.get("unilab_source"),
            "version_drift": bench_env.version_drift(versions, pins, sim=args.backend) if versions else None,
            "hostname": os.uname().nodename,
            "cuda_mps": bench_env.cuda_mps_state(),
        },
        "applied": state,
        "series_sha256": state.get("series_sha256"),
        "checks": checks,
        "assets": assets,
        "provenance": provenance,
        "provenance_processes": len(provenance),
        "provenance_flagged": any(bool(r.get("flagged")) for r in provenance),
        "learner_uni_rl_modules": end.get("uni_rl_modules", []),
        # launch to each start-up phase, the caches found at launch, who copies the replay to the device
        "startup": startup_record(phases, rows_all, caches, read_warp_loads(timings, meta.get("pid"))),
        "replay_h2d": replay_h2d_record(phases),
        "reward": [row.get("reward") for row in rows_all],
    }
    if not provenance:
        print(f"[{PROG}] warning: no provenance records in {prov_dir} "
              "(overlay/sitecustomize.py missing or not on the path)", file=sys.stderr)
    if status != "completed":
        cause = last_exception_line(child.output_tail)
        hook_error = end.get("error")
        if hook_error and hook_error.startswith("SystemExit") and cause:
            hook_error = f"{hook_error}: {cause}"  # Hydra turns the real exception into exit 1
        payload["error"] = collector["error"] or hook_error or cause or (
            f"trainer timed out after {args.timeout_s} s" if child.timed_out else
            f"trainer exited {child.returncode}" if child.returncode else
            f"uni_rl was imported from {flashsac_source}, not {payload['device']['flashsac_source_expected']}"
        )
        payload["output_tail"] = child.output_tail[-8000:]
    if rows_all:
        try:
            payload.update(bench_stats.timing_report(rows_all, summary_last=args.summary_last,
                                                     skip_first=args.skip_first, collector=payload["collector"]))
            tc = payload["training_config"]
            envs, ranks = tc.get("num_envs"), tc.get("ranks") or 1
            payload["env_steps_per_s"] = bench_stats.throughput(payload["wall_per_iter_ms"], envs=envs, ranks=ranks) if envs else None
            payload["physics_floor"] = (floor_report(step_cost, run_config, payload["wall_per_iter_ms"], envs)
                                        if args.backend == "mujoco" else
                                        {"floor_ms": None, "reason": "GPU physics: the CPU mj_step floor does not apply"})
            payload["warmup"] = bench_stats.warmup_report(
                payload["rows_all"], payload["rows"],
                first_iteration_wall_s=rows_all[0].get("wall_s"), compile_metrics=end.get("dynamo"),
            )
        except ValueError as exc:
            payload["status"] = "failed"
            payload.setdefault("error", str(exc))
    elif status == "completed":
        payload["status"] = "failed"
        payload["error"] = "the trainer logged no iterations (hook not active?)"
    print_summary(payload)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        run_files.write_run(args.output, payload)  # the compact form, compressed by the suffix (.json.xz)
        print(f"[{PROG}] wrote {args.output} ({payload['status']})", flush=True)
    if payload["status"] != "completed":
        print(f"[{PROG}] run failed: {payload.get('error')}", file=sys.stderr)
        return child.returncode or 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: usage errors exit 2, unmet preconditions print one line and exit 1."""
    args = parse_args(argv)
    try:
        return run(args)
    except BenchSetupError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
