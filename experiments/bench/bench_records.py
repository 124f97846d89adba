"""What the trainer left behind, read into the run JSON: timings, provenance, the resolved config, the collector.

The hook (``hook/flashsac_bench_hook.py``) writes one JSON line per iteration and per start-up phase, the
overlay's ``sitecustomize`` one provenance record per process, and UniLab's trainer its ``run_config.json`` and
``run_summary.json``;
``benchmark_flashsac_training.py`` turns them into the fields of its run JSON with these functions. Pure
readers of files and dicts (the physics floor aside), so the tests feed them real and damaged records.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import lzma
import re
from pathlib import Path
from typing import Any

import bench_configs
import bench_env
import compile_caches
import physics_floor
import run_files
from bench_env import BenchSetupError


def load_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing, unreadable or not an object."""
    try:
        data = run_files.read_json(path)
    except (OSError, ValueError, lzma.LZMAError):
        return None
    return data if isinstance(data, dict) else None


def read_timings(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """(meta, iteration rows in step order, end record) from the hook's JSON lines."""
    meta: dict[str, Any] = {}
    end: dict[str, Any] = {}
    rows: dict[int, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            kind = record.pop("kind", None)
            if kind == "meta":
                meta = record
            elif kind == "end":
                end = record
            elif kind == "iteration":
                rows[int(record["step"])] = record
    return meta, [rows[k] for k in sorted(rows)], end


def read_phases(path: Path, pid: int | None) -> dict[str, dict[str, Any]]:
    """The start-up phases the hook timed in the learner's process (``pid``, the meta record's; any process
    when the run logged no iteration), the first record of each name."""
    phases: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.strip() else {}
            if record.get("kind") == "phase" and (pid is None or record.get("pid") == pid):
                phases.setdefault(str(record["name"]), record)
    return phases


def read_warp_loads(path: Path, pid: int | None) -> list[dict[str, Any]]:
    """Warp's module loads the hook timed in the learner's process (``pid``; any process when None)."""
    loads: list[dict[str, Any]] = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.strip() else {}
            if record.get("kind") == "warp_load" and (pid is None or record.get("pid") == pid):
                loads.append(record)
    return loads


def warp_loads_record(loads: list[dict[str, Any]], phases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Warp's module loads by who made them: the mjwarp backend's build workers (unisim 0004; with its own
    record, from the physics phase's detail) or a launch, each as a count, the seconds they took (summed; the
    workers' run side by side) and when the last one ended, in seconds since the trainer's start."""
    def part(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"count": len(rows), "seconds": round(sum(float(r["end_s"]) - float(r["start_s"]) for r in rows), 3),
                "last_end_s": round(max(float(r["end_s"]) for r in rows), 3) if rows else None}

    return {"by_build_workers": part([r for r in loads if not r.get("launch")]),
            "at_launch": part([r for r in loads if r.get("launch")]),
            "kernel_build": (phases.get("env_physics_built") or {}).get("detail")}


def startup_record(phases: dict[str, dict[str, Any]], rows_all: list[dict[str, Any]],
                   caches: dict[str, dict[str, Any]], warp_loads: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Seconds from the trainer's start to the end of each start-up phase, in the order they ended, the first
    iteration last, with what each phase's first call took, Warp's module loads (``warp_loads_record``) and
    the compile caches' state at launch."""
    ended = sorted(phases.values(), key=lambda p: float(p["end_s"]))
    first = rows_all[0].get("wall_s") if rows_all else None
    return {
        "origin": "the trainer process's start (the bench hook's import)",
        "phases_s": {**{p["name"]: float(p["end_s"]) for p in ended}, "first_iteration": first},
        "phase_durations_s": {p["name"]: float(p["end_s"]) - float(p["start_s"]) for p in ended},
        "warp_module_loads": warp_loads_record(warp_loads or [], phases),
        "compile_caches": caches,
        "cold_caches": compile_caches.cold(caches),
    }


def replay_h2d_record(phases: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Who copied the replay's ticks to the device and why, from the pipeline's transfer manifest (None: the
    run built no host replay pipeline, e.g. the device-resident collector; an unpatched learner
    records no choice)."""
    ready = phases.get("replay_pipeline_ready")
    if ready is None:
        return None
    manifest = ready.get("detail") or {}
    return {"copy": manifest.get("h2d_copy"), "reason": manifest.get("h2d_copy_reason"),
            "submitter": manifest.get("h2d_submitter"), "setup_s": float(ready["end_s"]) - float(ready["start_s"])}


def read_provenance(directory: Path) -> list[dict[str, Any]]:
    """Every process's provenance record (written by the overlay's sitecustomize at exit)."""
    records = []
    for path in sorted(directory.glob("provenance-*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            record = {"unreadable": str(path), "error": str(exc), "flagged": True}
        record.setdefault("file", path.name)
        records.append(record)
    return records


def training_config(args: argparse.Namespace, run_config: dict[str, Any] | None) -> dict[str, Any]:
    """Updates per iteration as the runner executes them (critic every update, actor every pf)."""
    algo = (run_config or {}).get("config", {}).get("algo", {}) if run_config else {}

    def pick(key: str, given: int | None) -> int | None:
        value = algo.get(key, given)
        return int(value) if value is not None else None

    ups = pick("updates_per_step", args.updates_per_step)
    pf = pick("policy_frequency", args.policy_frequency)
    schedule = bench_configs.Schedule(ups, pf) if ups and pf else None
    return {
        "iterations": args.iterations,
        "summary_last": args.summary_last,
        "num_envs": pick("num_envs", args.num_envs),
        "batch_size": pick("batch_size", args.batch_size),
        "replay_buffer_n": pick("replay_buffer_n", args.replay_buffer_n),
        "learning_starts": pick("learning_starts", args.learning_starts),
        "updates_per_step": ups,
        "policy_frequency": pf,
        "seed": pick("seed", args.seed),
        "ranks": len((run_config or {}).get("config", {}).get("training", {}).get("devices") or [0]),
        "critic_updates_per_iteration": ups,
        "actor_updates_per_iteration": schedule.actor_updates if schedule else None,
        "temperature_updates_per_iteration": schedule.actor_updates if schedule else None,
        "schedule": schedule.label if schedule else None,
        # the switches the trainer really resolved (tree config + overrides)
        "algo_params": algo.get("algo_params"),
    }


def floor_report(step_cost: physics_floor.StepCost | None, run_config: dict[str, Any] | None,
                 wall: dict[str, Any] | None, envs: int | None) -> dict[str, Any]:
    """The run's physics floor (single-core mj_step × substeps × envs / physics workers) and wall / floor."""
    env = ((run_config or {}).get("config") or {}).get("env") or {}
    if step_cost is None or not envs or not env.get("sim_dt") or not env.get("ctrl_dt"):
        return {"floor_ms": None, "reason": "no step cost or no env timing in run_config.json"}
    substeps = round(float(env["ctrl_dt"]) / float(env["sim_dt"]))
    workers = physics_floor.physics_workers(envs, step_cost.host_cpus)
    floor = physics_floor.floor_ms(step_cost.mean_us, substeps=substeps, envs=envs, workers=workers)
    return {
        "floor_ms": floor, "step_cost": dataclasses.asdict(step_cost), "substeps": substeps, "workers": workers,
        "wall_over_floor": float(wall["mean_ms"]) / floor if wall else None,
    }


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)): .+$")


def last_exception_line(output: str) -> str | None:
    """The last ``SomethingError: message`` line of the trainer's output (plain traceback, not the Rich box)."""
    lines = _ANSI.sub("", output).replace("\r", "\n").splitlines()
    hits = [line.strip() for line in lines if _EXCEPTION.match(line.strip()) and not line.lstrip().startswith("│")]
    return hits[-1] if hits else None


def applied_state(require: bool, unilab_root: Path, overlay: Path) -> dict[str, Any]:
    """The applied series of this tree (sha256, phase) when the lead's applier can tell.

    Required under --require-applied (the drivers). The original command line must keep
    working in a plain UniLab environment, where there is no applier: there the state is
    recorded as unknown, with the reason, instead of failing the run.
    """
    try:
        status = bench_env.patchset_status(unilab_root, overlay)
        sha = bench_env.require_applied(status)
    except BenchSetupError as exc:
        if require:
            raise
        return {"series_sha256": None, "applied": False, "error": str(exc)}
    return {"series_sha256": sha, "applied": True, "phase": status.get("phase"),
            "patches": status.get("patches"), "checkout": status.get("checkout")}


def collector_record(requested: str, meta: dict[str, Any], summary: dict[str, Any] | None) -> dict[str, Any]:
    """Which collector the run really trained with, from the trainer's own records, and its whole-run figures.

    The learner's runtime manifest names the device-resident collector; the host runners name none, so a
    run that logged iterations without a name ran the host collector. A run that logged nothing is recorded
    under the collector it asked for. ``run_summary`` is what the trainer wrote in run_summary.json (collector,
    host syncs per iteration and phases over all iterations, with compile behind the swap's record: helper
    seconds and exit code, swap iteration, pause, and the device env's form: its step graph's status and the
    switches it honoured); the host path writes only the swap's record.
    """
    asked = bench_configs.COLLECTORS[requested].recorded
    recorded = meta.get("collector") or ("host" if meta else asked)
    keys = ("collector", "host_syncs_per_iteration", "collector_phases_ms")
    whole = {k: summary.get(k) for k in keys} if summary and summary.get("collector") else None
    if summary and "compile_behind" in summary:
        whole = {**(whole or {}), "compile_behind": summary["compile_behind"]}
    form = ((summary or {}).get("runtime_manifest") or {}).get("device_env")
    if form:
        whole = {**(whole or {}), "device_env": form}
    error = None if recorded == asked else f"asked for the {asked} collector, the trainer ran the {recorded} one"
    return {"collector": recorded, "collector_requested": asked, "run_summary": whole, "error": error}
