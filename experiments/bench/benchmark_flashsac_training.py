#!/usr/bin/env python3
"""One real FlashSAC training run (UniLab, MuJoCo G1) with per-iteration learner timings.

Runs UniLab's own entry ``src/unilab/scripts/train_flashsac.py`` from the root of a
UniLab tree, with real MuJoCo environments in the spawned collector, and records for
every iteration the learner's update time, the collector cycle, the whole iteration
and the reward, as the production runner reports them to its logger (see
``bench_child/flashsac_bench_hook.py``). Writes one JSON whose field names are the
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
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
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
import physics_floor  # noqa: E402
from bench_launcher import run_child  # noqa: E402
from bench_env import BenchSetupError  # noqa: E402

PROG = "benchmark_flashsac_training"


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be non-negative, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The original report's options first, then this project's additions."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--unilab-root", type=Path,
                   default=Path(os.environ.get("UNILAB", bench_env.DEFAULT_UNILAB_ROOT)),
                   help="UniLab tree with src/unilab/scripts/train_flashsac.py (default: $UNILAB or the applier's embedded tree)")
    p.add_argument("--backend", choices=bench_env.SIMS, default="mujoco",
                   help="physics of the collector: CPU MuJoCo (the task's own owner) or MuJoCo Warp on the GPU "
                        "(task g1_walk_flat/mjwarp)")
    p.add_argument("--task", default="g1_walk_flat", help="FlashSAC task config group (default: g1_walk_flat)")
    p.add_argument("--iterations", type=_positive, default=1000)
    p.add_argument("--summary-last", type=_positive, default=500,
                   help="statistics over the last N logged iterations (default: 500)")
    p.add_argument("--skip-first", type=_non_negative, default=0,
                   help="drop the first N iterations before choosing the summary window")
    p.add_argument("--num-envs", type=_positive)
    p.add_argument("--batch-size", type=_positive)
    p.add_argument("--replay-buffer-n", type=_positive)
    p.add_argument("--learning-starts", type=_non_negative)
    p.add_argument("--updates-per-step", type=_positive)
    p.add_argument("--policy-frequency", type=_positive)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="set use_compile and compile_full_objectives together (original report's switch)")
    p.add_argument("--output", type=Path, help="write the run JSON here")
    # -- additions of this project --
    p.add_argument("--setting", choices=sorted(bench_configs.SETTINGS),
                   help="named setting: fills --num-envs ... --policy-frequency and --updates-per-step where not given "
                        "(report: the original report's; unilab-default: the tree's task config, no overrides)")
    p.add_argument("--pristine-unilab-root", type=Path,
                   help="the unpatched UniLab tree the references (1.3.2, 1.4.0) train on (default: --unilab-root)")
    p.add_argument("--config", type=bench_configs.canonical_name, choices=sorted(bench_configs.CONFIGS),
                   help="named configuration (learner + switches); exclusive with --compile/--no-compile")
    p.add_argument("--seed", type=int, help="algo.seed (default: the tree's)")
    p.add_argument("--uni-rl-path", type=Path,
                   help="folder holding the uni_rl package to put first on PYTHONPATH (overrides the config's)")
    p.add_argument("--overlay", type=Path, default=bench_env.OVERLAY_DIR,
                   help="the applied overlay folder (default: overlay/)")
    p.add_argument("--baseline-uni-rl", type=Path,
                   help="folder holding pristine unilab-rl 1.3.2 uni_rl/ (for --config baseline-1.3.2)")
    p.add_argument("--assets", type=Path, default=Path(os.environ["UNILAB_ASSETS"]) if os.environ.get("UNILAB_ASSETS") else None,
                   help="offline G1 assets (folder or .tar.xz) seeded into the tree (default: $UNILAB_ASSETS)")
    p.add_argument("--run-dir", type=Path, help="keep the trainer's logs, timings and provenance here")
    p.add_argument("--require-applied", action="store_true",
                   help="fail unless `python -m patchset status --json` reports the applied series")
    p.add_argument("--checks-json", type=Path,
                   help="JSON with the `passed` flags of the numerics/replay-stability checks to embed")
    p.add_argument("--live-panel", choices=("auto", "always", "never"), default="auto",
                   help="show UniLab's Rich panel through a pseudo-terminal (auto: when stdout is a terminal)")
    p.add_argument("--timeout-s", type=float, help="stop the trainer after this many seconds")
    p.add_argument("--extra-override", action="append", default=[], help="extra Hydra override (repeatable)")
    p.add_argument("--collector", choices=sorted(bench_configs.COLLECTORS), default="host",
                   help="who steps the env: host (a spawned collector process, the default) or device (the "
                        "device-resident collector in the learner's process; --backend mjwarp only)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tests only: without CUDA, the device collector on MuJoCo Warp's CPU device and the learner "
                        "on the CPU (UNISIM_MJWARP_ALLOW_CPU=1); exercises the harness, measures nothing")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and cross-check; argparse exits with status 2 on a usage error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config is not None and args.compile is not None:
        parser.error("--config and --compile/--no-compile are exclusive")
    if args.setting is not None:
        setting = bench_configs.SETTINGS[args.setting]
        for key in ("num_envs", "batch_size", "replay_buffer_n", "learning_starts", "policy_frequency"):
            if getattr(args, key) is None:
                setattr(args, key, setting.value(key))
        if args.updates_per_step is None:  # the setting's first schedule (report: 2/1/1); None: the tree's
            args.updates_per_step = setting.schedules[0]
    return args


def setting_name(args: argparse.Namespace) -> str:
    """The named setting this run's overrides amount to, or ``custom``."""
    given = {k: getattr(args, k) for k in ("num_envs", "batch_size", "replay_buffer_n", "learning_starts")}
    for setting in bench_configs.SETTINGS.values():
        if all(setting.value(k) == v for k, v in given.items()):
            return setting.name
    return "custom"


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


def selected_config(args: argparse.Namespace) -> bench_configs.BenchConfig | None:
    """The named configuration, if any (``--compile`` alone keeps the original's meaning)."""
    return bench_configs.CONFIGS[args.config] if args.config else None


def hydra_overrides(args: argparse.Namespace, run_logs: Path) -> list[str]:
    """The Hydra command line of the real entry for this run."""
    overrides = [
        f"task={args.task}/{args.backend}",
        "training.no_play=true",
        "training.export_onnx=false",
        # Hydra's grammar rejects an unquoted absolute path; the quotes stay inside argv.
        f"training.log_dir='{run_logs}'",
        f"algo.max_iterations={args.iterations}",
        "algo.save_interval=1000000",
    ]
    for key, value in (
        ("algo.num_envs", args.num_envs),
        ("algo.batch_size", args.batch_size),
        ("algo.replay_buffer_n", args.replay_buffer_n),
        ("algo.learning_starts", args.learning_starts),
        ("algo.updates_per_step", args.updates_per_step),
        ("algo.policy_frequency", args.policy_frequency),
        ("algo.seed", args.seed),
    ):
        if value is not None:
            overrides.append(f"{key}={value}")
    config = selected_config(args)
    overrides.extend(config.overrides if config else bench_configs.config_overrides_for_compile_flag(args.compile))
    overrides.extend(bench_configs.COLLECTORS[args.collector].overrides)
    overrides.extend(args.extra_override)
    return overrides


def config_identity(args: argparse.Namespace) -> tuple[str, str]:
    """(name, label) of the run for the report; the original's --compile maps onto our names."""
    config = selected_config(args)
    if config is not None:
        return config.name, config.label
    if args.compile is None:
        return "patched-default", bench_configs.CONFIGS["patched-default"].label
    config = bench_configs.config_for_compile_flag(args.compile)
    return config.name, config.label


def resolve_learner(args: argparse.Namespace) -> tuple[str, Path | None]:
    """(source kind, folder to put first on PYTHONPATH or None for the installed uni_rl)."""
    config = selected_config(args)
    source = config.source if config else "overlay"
    if args.uni_rl_path is not None:
        path = args.uni_rl_path.resolve()
        if not (path / "uni_rl" / "__init__.py").is_file():
            raise BenchSetupError(f"--uni-rl-path {path} holds no uni_rl/ package")
        return source, path
    if source == "installed":
        return source, None
    if source == "baseline":
        if args.baseline_uni_rl is None:
            raise BenchSetupError("--config baseline-1.3.2 needs --baseline-uni-rl <folder with pristine uni_rl/>")
        path = args.baseline_uni_rl.resolve()
        if not (path / "uni_rl" / "__init__.py").is_file():
            raise BenchSetupError(f"--baseline-uni-rl {path} holds no uni_rl/ package")
        return source, path
    overlay = args.overlay.resolve()
    if not (overlay / "uni_rl" / "__init__.py").is_file():
        raise BenchSetupError(
            f"{overlay}/uni_rl is missing: run `make apply` first, or pass --uni-rl-path / --config <reference>"
        )
    return source, overlay


def provenance_site(overlay: Path, learner_path: Path | None, scratch: Path) -> Path | None:
    """A path entry that activates the overlay's provenance ``sitecustomize`` without its packages.

    For the overlay learner the overlay itself is on the path. For the references the
    overlay must not be (its uni_rl would shadow theirs, its unisim the installed one), yet
    every process should still write its provenance record; so the overlay's top-level
    runtime files, minus its packages, are linked into a scratch folder that goes on the
    path after the reference learner.
    """
    overlay = overlay.resolve()
    if learner_path is not None and learner_path == overlay:
        return None
    if not (overlay / "sitecustomize.py").is_file():
        return None
    site = scratch / "provenance-site"
    site.mkdir(parents=True, exist_ok=True)
    for entry in overlay.iterdir():
        if entry.name in ("uni_rl", "unisim", "__pycache__"):
            continue
        link = site / entry.name
        if not link.exists():
            link.symlink_to(entry)
    return site


def child_env(
    *, learner_path: Path | None, prov_site: Path | None, unilab_root: Path,
    overlay: Path, timings: Path, provenance_dir: Path,
) -> dict[str, str]:
    """Environment of the trainer: our learner first, then the hook, then the UniLab tree."""
    env = dict(os.environ)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    # An inherited overlay entry would silently replace a reference learner.
    inherited = [p for p in inherited if Path(p).resolve() != overlay.resolve()]
    front = [str(p) for p in (learner_path, prov_site) if p is not None]
    env["PYTHONPATH"] = os.pathsep.join(
        [*front, str(bench_env.HOOK_DIR), str(unilab_root / "src"), *inherited]
    )
    env["FLASHSAC_BENCH_TIMINGS"] = str(timings)
    env["FLASHSAC_PROVENANCE_DIR"] = str(provenance_dir)
    env["FLASHSAC_UNILAB_ROOT"] = str(unilab_root)
    env["PYTHONUNBUFFERED"] = "1"
    # Training needs no renderer, and the assets are verified locally before the run.
    env.setdefault("MUJOCO_GL", "disable")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("WANDB_MODE", "disabled")
    return env


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


def source_matches(source: str, learner_path: Path | None, flashsac_source: str | None, overlay: Path) -> bool:
    """Did the learner really import uni_rl from where this configuration says?"""
    if flashsac_source is None:
        return False
    imported = Path(flashsac_source).resolve()
    if learner_path is not None:
        return imported == (learner_path / "uni_rl").resolve()
    return overlay.resolve() not in imported.parents


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


def _load_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


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


def require_runnable(args: argparse.Namespace) -> None:
    """Refuse, in one line and before any device is touched, what cannot run: the table's rule, and a CPU
    smoke run of the host collector (its replay pipeline needs CUDA)."""
    name, _ = config_identity(args)
    reason = bench_configs.refusal(name, args.backend, args.collector)
    if reason is None and args.cpu_smoke and not bench_configs.COLLECTORS[args.collector].overrides:
        reason = "--cpu-smoke runs the device collector only (--collector device): the host path needs CUDA"
    if reason is not None:
        raise BenchSetupError(reason)


def smoke_device() -> dict[str, Any]:
    """The device record of a --cpu-smoke run: torch on the CPU, no GPU, marked as no measurement."""
    import torch

    return {"cuda": False, "gpu": None, "capability": None, "torch": torch.__version__,
            "cuda_runtime": torch.version.cuda, "smoke": "CPU learner, MuJoCo Warp's CPU device: not a measurement"}


def collector_record(requested: str, meta: dict[str, Any], summary: dict[str, Any] | None) -> dict[str, Any]:
    """Which collector the run really trained with, from the trainer's own records, and its whole-run figures.

    The learner's runtime manifest names the device-resident collector; the host runners name none, so a
    run that logged iterations without a name ran the host collector. A run that logged nothing is recorded
    under the collector it asked for. ``run_summary`` is what the trainer wrote in run_summary.json (collector,
    host syncs per iteration and phases over all iterations); the host path writes none of these.
    """
    asked = bench_configs.COLLECTORS[requested].recorded
    recorded = meta.get("collector") or ("host" if meta else asked)
    keys = ("collector", "host_syncs_per_iteration", "collector_phases_ms")
    whole = {k: summary.get(k) for k in keys} if summary and summary.get("collector") else None
    error = None if recorded == asked else f"asked for the {asked} collector, the trainer ran the {recorded} one"
    return {"collector": recorded, "collector_requested": asked, "run_summary": whole, "error": error}


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


def run(args: argparse.Namespace) -> int:
    """The run itself; raises BenchSetupError for unmet preconditions."""
    require_runnable(args)
    parent_device = smoke_device() if args.cpu_smoke else bench_env.require_cuda()
    bench_env.require_sim(args.backend)
    config = selected_config(args)
    patched_root = bench_env.require_unilab_root(args.unilab_root)
    on_pristine = config is not None and config.tree == "pristine" and args.pristine_unilab_root is not None
    unilab_root = bench_env.require_unilab_root(args.pristine_unilab_root) if on_pristine else patched_root
    assets = bench_env.ensure_assets(unilab_root, args.assets)
    source, learner_path = resolve_learner(args)
    state = applied_state(args.require_applied, patched_root, args.overlay)
    # The CPU physics floor is a CPU MuJoCo figure: measured only for runs whose collector steps CPU MuJoCo.
    step_cost = physics_floor.measure_step_cost(unilab_root / bench_env.G1_SCENE_REL) if args.backend == "mujoco" else None
    checks = _load_json(args.checks_json) if args.checks_json else None
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
    if args.cpu_smoke:
        env.update(CUDA_VISIBLE_DEVICES="", UNISIM_MJWARP_ALLOW_CPU="1")
    command = [sys.executable, "-m", "flashsac_bench_hook",
               str(unilab_root / bench_env.TRAIN_SCRIPT_REL), *hydra_overrides(args, logs)]
    print("$ " + shlex.join(command), flush=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    child = run_child(command, cwd=unilab_root, env=env, panel=args.live_panel, timeout_s=args.timeout_s)

    meta, rows_all, end = read_timings(timings)
    provenance = read_provenance(prov_dir)
    run_config = _load_json(logs / "run_config.json")
    collector = collector_record(args.collector, meta, _load_json(logs / "run_summary.json"))
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
        args.output.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
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
