#!/usr/bin/env python3
"""Tables and plots from run JSON files written by ``benchmark_flashsac_training.py``.

Separate from the runs so a report can be rebuilt (and tested on a CPU) from the JSON
alone: ``python experiments/bench/bench_report.py results/<date>-<machine>-<study>/`` rewrites that
folder's summary.md and plots. Every number here is computed from the runs' per-iteration
rows; nothing is typed in.

Called by ``bench_matrix`` and ``bench_parity`` after every run, by ``make bench-report``, and by
``tables/readme_tables.py`` for the documents' bench tables.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_configs  # noqa: E402
import bench_stats  # noqa: E402
import run_files  # noqa: E402

RUNS_SUBDIR = "runs"


def read_run(path: Path) -> Any:
    """One run JSON in any stored form, as it was written (``run_files.read_json``, the one reader)."""
    return run_files.read_json(path)


def load_runs(folder: Path) -> list[dict[str, Any]]:
    """Run JSONs under ``folder`` (and its runs/ subfolder), in any stored form, in file-name order."""
    paths = [p for d in (folder, folder / RUNS_SUBDIR) for p in run_files.json_files(d)]
    runs = []
    for path in paths:
        data = read_run(path)
        if isinstance(data, dict) and "training_config" in data:
            data.setdefault("_file", run_files.logical_name(path))
            if "config" in data:  # runs committed before the whole-cycle graph had one name
                data["config"] = bench_configs.canonical_name(str(data["config"]))
            if data.get("rows_all") and "wall_per_iter_ms" not in data:  # recorded before the wall field existed
                data.update(bench_stats.timing_report(data["rows_all"], summary_last=data["summary_last"],
                                                      skip_first=data.get("skip_first", 0)))
            runs.append(data)
    return runs


def load_pooled_runs(folders: Path | Sequence[Path]) -> list[dict[str, Any]]:
    """``load_runs`` of one folder, or of several pooled in order (a study of one arm beside the committed study
    that trained the others, read in place)."""
    return [run for folder in ([folders] if isinstance(folders, Path) else folders) for run in load_runs(folder)]


def _schedule(run: dict[str, Any]) -> str:
    """The run's column: its schedule, prefixed by its setting unless that is the report's (the default).

    Runs recorded before settings existed were all at the report's setting.
    """
    schedule = str(run.get("training_config", {}).get("schedule") or "?")
    setting = run.get("setting") or "report"
    return schedule if setting == "report" else f"{setting} {schedule}"


def _ok(run: dict[str, Any]) -> bool:
    return run.get("status") == "completed" and bool(run.get("rows"))


def pooled(runs: Sequence[dict[str, Any]], field: str) -> dict[str, float | int] | None:
    """Statistics over the summarized rows of all repeats of one configuration × schedule."""
    values = [row.get(field) for run in runs if _ok(run) for row in run["rows"]]
    values = [v for v in values if v is not None]
    return bench_stats.summarize(values) if values else None


#: Suffix of a row whose runs stepped MuJoCo Warp on the GPU (rows without it: CPU MuJoCo, the task's owner).
_GPU_PHYSICS = " @mjwarp"


#: Suffix of a row whose runs had the CUDA MPS control daemon running (``device.cuda_mps`` "on"): the collector's
#: and the learner's processes then share the GPU as clients of one server instead of time-slicing it.
_MPS = " @mps"


def mps_suffix(run: dict[str, Any]) -> str:
    """The row suffix of a run made with the CUDA MPS daemon running, else ""."""
    return _MPS if (run.get("device") or {}).get("cuda_mps") == "on" else ""


#: Row suffix of a run whose trainer recorded a collector other than the host one (the run JSON's
#: ``collector``, e.g. "device-resident"): runs of different collectors never pool, whatever their names.
_COLLECTOR = " @"


#: How the tables name a run's physics (its ``backend``); every table's one source of these names.
PHYSICS_LABELS = {"mujoco": "CPU MuJoCo", "mjwarp": "MuJoCo Warp (GPU)"}


def physics_label(backend: object) -> str:
    """The tables' name of a physics backend (runs that name none ran on CPU MuJoCo, the only one then)."""
    name = str(backend or "mujoco")
    return PHYSICS_LABELS.get(name, name)


def collector_suffix(run: dict[str, Any]) -> str:
    """The row suffix of the collector the run recorded; "" for the host collector and runs that name none."""
    collector = str(run.get("collector") or "host")
    return "" if collector == "host" else _COLLECTOR + collector


def pairing_suffix(run: dict[str, Any]) -> str:
    """What keeps a run's row apart besides configuration and physics: its collector, then CUDA MPS."""
    return collector_suffix(run) + mps_suffix(run)


def run_key(run: dict[str, Any]) -> str:
    """The run's row: its configuration, marked when its collector ran MuJoCo Warp, when it was not the host
    collector and when MPS was on."""
    config = str(run.get("config"))
    return (config + _GPU_PHYSICS if run.get("backend") == "mjwarp" else config) + pairing_suffix(run)


def _strip_collector(name: str) -> tuple[str, str | None]:
    """(row key without its collector suffix, the collector's recorded name or None)."""
    for collector in bench_configs.RECORDED_COLLECTORS:
        if name.endswith(_COLLECTOR + collector):
            return name.removesuffix(_COLLECTOR + collector), collector
    return name, None


def _config_order(name: str) -> tuple[int, str]:
    order = list(bench_configs.MATRIX_CONFIGS)
    base = _strip_collector(name.removesuffix(_MPS))[0].removesuffix(_GPU_PHYSICS)
    return (order.index(base) if base in order else len(order), name)


def _schedule_order(schedule: str) -> tuple[str, str]:
    """The report's setting first, then other settings; within one, "2/1/1" before "8/4/4" before "16/8/8"."""
    setting, _, plain = schedule.rpartition(" ")
    return setting, plain.split("/")[0].zfill(3)


def _table_order(key: tuple[str, str]) -> tuple[tuple[str, str], tuple[int, str]]:
    """(configuration, schedule) rows: by schedule, then in the matrix's configuration order."""
    config, schedule = key
    return _schedule_order(schedule), _config_order(config)


def compiled_through_window(run: dict[str, Any]) -> bool:
    """Whether a run's summary window is all on its compiled paths: always, unless it compiled behind and its swap
    came inside the window or never (then its figures there are not the compiled paths' steady state)."""
    record = (run.get("run_summary") or {}).get("compile_behind")
    if not record:
        return True
    rows = run.get("rows") or []
    return "swap_iteration" in record and bool(rows) and int(record["swap_iteration"]) <= int(rows[0]["step"])


def env_step_eager(run: dict[str, Any]) -> bool:
    """Whether a device-collector run's env step stayed eager because its CUDA graph capture failed (which the
    trainer says only on stderr and in its record of the env's form)."""
    form = (run.get("run_summary") or {}).get("device_env") or {}
    return str(form.get("step_graph", "")).startswith("eager")


def _label(name: str, runs: Sequence[dict[str, Any]]) -> str:
    """A configuration's label; marked where some of its runs compiled behind and swapped inside or after the
    summary window, so that no table passes their figures off as the compiled steady state, and where some of
    their env steps stayed eager (a failed capture), so that no table passes a slower step off as the
    configuration's."""
    late = sum(not compiled_through_window(run) for run in runs)
    eager = sum(env_step_eager(run) for run in runs)
    return (_config_label(name, runs)
            + (f" (swap not before the summary window: {late} of {len(runs)} runs)" if late else "")
            + (f" (env step not graphed, its capture failed: {eager} of {len(runs)} runs)" if eager else ""))


def _config_label(name: str, runs: Sequence[dict[str, Any]]) -> str:
    if name.endswith(_MPS):
        return _config_label(name.removesuffix(_MPS), runs) + ", CUDA MPS"
    base, collector = _strip_collector(name)
    if collector is not None:
        return _config_label(base, runs) + ", " + bench_configs.RECORDED_COLLECTORS[collector].label
    if name.endswith(_GPU_PHYSICS) and name.removesuffix(_GPU_PHYSICS) in bench_configs.CONFIGS:
        return bench_configs.CONFIGS[name.removesuffix(_GPU_PHYSICS)].label + ", MuJoCo Warp GPU physics"
    if name in bench_configs.CONFIGS:
        return bench_configs.CONFIGS[name].label
    return str(runs[0].get("config_label", name)) if runs else name


def group_runs(runs: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(configuration, schedule) -> its runs."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run_key(run), _schedule(run)), []).append(run)
    return groups


def _mean(stats: dict[str, float | int] | None) -> float | None:
    return float(stats["mean_ms"]) if stats else None


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _reference_means(groups: dict[tuple[str, str], list[dict[str, Any]]], reference: str, field: str) -> dict[str, float]:
    """schedule -> mean of ``field`` for the configuration that is the named reference."""
    names = {c.name for c in bench_configs.CONFIGS.values() if c.reference == reference}
    means: dict[str, float] = {}
    for (config, schedule), runs in groups.items():
        if config in names:
            stats = pooled(runs, field)
            if stats:
                means[schedule] = float(stats["mean_ms"])
    return means


def _reduction(mean: float, reference: dict[str, float], schedule: str) -> str:
    """How much less time than the reference's mean in the same schedule, in percent."""
    return f"{(1 - mean / reference[schedule]) * 100:.1f}%" if schedule in reference else "–"


def _ratio(mean: float, reference: dict[str, float], schedule: str) -> str:
    """The time as a multiple of the reference's mean in the same schedule."""
    return f"{mean / reference[schedule]:.2f}×" if schedule in reference else "–"


def summary_table(runs: Sequence[dict[str, Any]]) -> str:
    """Markdown table: configuration × schedule, learner and iter statistics, vs the references.

    *reduction vs 1.3.2* is ``1 - mean / mean(unpatched 1.3.2 eager)`` of the same
    schedule; *× vs 1.4.0* is ``mean / mean(upstream 1.4.0 full compile)`` (< 1: faster).
    """
    groups = group_runs(runs)
    base_l = _reference_means(groups, "baseline", "learner_train_ms")
    base_i = _reference_means(groups, "baseline", "iter_ms")
    up_l = _reference_means(groups, "upstream", "learner_train_ms")
    up_i = _reference_means(groups, "upstream", "iter_ms")
    lines = [
        "| configuration | schedule | runs | learner mean | median | p90 | p95 | iter mean | median | p90 | p95 "
        "| learner reduction vs 1.3.2 | iter reduction vs 1.3.2 | learner × vs 1.4.0 | iter × vs 1.4.0 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (config, schedule) in sorted(groups, key=_table_order):
        group = groups[(config, schedule)]
        ok = [r for r in group if _ok(r)]
        learner, it = pooled(ok, "learner_train_ms"), pooled(ok, "iter_ms")
        if learner is None or it is None:
            lines.append(f"| {_label(config, group)} | {schedule} | 0/{len(group)} | FAILED | | | | | | | | | | | |")
            continue
        lm, im = float(learner["mean_ms"]), float(it["mean_ms"])
        lines.append(
            f"| {_label(config, group)} | {schedule} | {len(ok)}/{len(group)} | "
            f"{_fmt(lm)} | {_fmt(learner['median_ms'])} | {_fmt(learner['p90_ms'])} | {_fmt(learner['p95_ms'])} | "
            f"{_fmt(im)} | {_fmt(it['median_ms'])} | {_fmt(it['p90_ms'])} | {_fmt(it['p95_ms'])} | "
            f"{_reduction(lm, base_l, schedule)} | {_reduction(im, base_i, schedule)} | "
            f"{_ratio(lm, up_l, schedule)} | {_ratio(im, up_i, schedule)} |"
        )
    return "\n".join(lines)


def _pooled_phase(runs: Sequence[dict[str, Any]], phase: str) -> float | None:
    """Mean of a run-level collector phase (``collector_phases_ms``) over completed runs."""
    values = [float(v) for r in runs if _ok(r) if (v := (r.get("collector_phases_ms") or {}).get(phase)) is not None]
    return fmean(values) if values else None


def _pooled_floor(runs: Sequence[dict[str, Any]]) -> float | None:
    values = [float(v) for r in runs if _ok(r) if (v := (r.get("physics_floor") or {}).get("floor_ms")) is not None]
    return fmean(values) if values else None


def _env_steps_per_s(runs: Sequence[dict[str, Any]], wall_mean_ms: float) -> float | None:
    """envs × ranks / mean wall of runs that all stepped the same number of envs (None otherwise)."""
    envs = {int(rate["envs"]) * int(rate["ranks"]) for r in runs if (rate := r.get("env_steps_per_s"))}
    return next(iter(envs)) * 1000.0 / wall_mean_ms if len(envs) == 1 else None


def throughput_table(runs: Sequence[dict[str, Any]]) -> str:
    """Markdown table of what users feel: wall per iteration, env steps/s, where the collector's time goes.

    *wall* is the wall clock between consecutive iterations; *env steps/s* = envs × ranks / mean wall.
    *wall / physics* sets the iteration against the run's own measured physics phase (what the CPU
    collector cannot go below without GPU physics); *floor* is the physics floor estimated from a
    single-core ``mj_step`` timing (× substeps × envs / physics workers) taken on the run's host as the
    run starts, which other work on the host moves (informational); *wall / floor* the same against it. Reductions are against the
    unpatched 1.3.2 reference of the same setting and schedule, ratios against upstream 1.4.0 (> 1: more
    env steps/s than upstream). Phases are the collector's means per cycle.
    """
    groups = group_runs(runs)
    base_w = _reference_means(groups, "baseline", "wall_per_iter_ms")
    up_w = _reference_means(groups, "upstream", "wall_per_iter_ms")
    lines = [
        "| configuration | setting · schedule | wall mean | median | p90 | p95 | env steps/s | physics | reset "
        "| state refresh | replay write | action wait | wall / physics | floor | wall / floor | wall reduction vs 1.3.2 "
        "| env steps/s × vs 1.4.0 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (config, schedule) in sorted(groups, key=_table_order):
        ok = [r for r in groups[(config, schedule)] if _ok(r)]
        wall = pooled(ok, "wall_per_iter_ms")
        if wall is None:
            continue
        wm = float(wall["mean_ms"])
        rate = _env_steps_per_s(ok, wm)
        floor = _pooled_floor(ok)
        phases = [_pooled_phase(ok, p) for p in ("physics", "reset", "state_refresh", "replay_write", "action_wait")]
        vs_up = f"{up_w[schedule] / wm:.2f}×" if schedule in up_w else "–"
        lines.append(
            f"| {_label(config, ok)} | {schedule} | {_fmt(wm)} | {_fmt(wall['median_ms'])} | {_fmt(wall['p90_ms'])} | "
            f"{_fmt(wall['p95_ms'])} | {_fmt(rate, 0)} | {' | '.join(_fmt(p) for p in phases)} | "
            f"{_fmt(wm / phases[0] if phases[0] else None)} | {_fmt(floor)} | "
            f"{_fmt(wm / floor if floor else None)} | {_reduction(wm, base_w, schedule)} | {vs_up} |"
        )
    return "\n".join(lines)


def collector_table(runs: Sequence[dict[str, Any]]) -> str:
    """Markdown table: the collectors side by side, one row per configuration × physics × collector × setting.

    *host syncs / iteration* is what the runner counted (the device-resident one counts every wait for the
    device; the host path counts none: "–"). The phases are the collector's means over the summary window:
    the device-resident collector's per iteration, of which *env step* and *replay write* are also the host
    collector's (per cycle). *× host MJWarp* is the host collector's mean wall on MJWarp over this row's, same
    configuration and column (> 1: shorter iterations than the host collector on the same physics).
    """
    groups = group_runs(runs)
    host_mjwarp: dict[tuple[str, str], float] = {}
    for (key, schedule), group in groups.items():
        ok = [r for r in group if _ok(r)]
        wall = pooled(ok, "wall_per_iter_ms")
        if wall and ok and ok[0].get("backend") == "mjwarp" and not collector_suffix(ok[0]):
            host_mjwarp[(str(ok[0].get("config")) + mps_suffix(ok[0]), schedule)] = float(wall["mean_ms"])
    phases = [p for p in bench_stats.DEVICE_COLLECTOR_PHASES
              if p != "learner" and p not in bench_stats.DEVICE_ENV_STEP_SPLIT]
    lines = [
        "| configuration | setting · schedule | physics | collector | runs | wall mean | env steps/s | learner "
        "| host syncs / iteration | " + " | ".join(p.replace("_", " ") for p in phases) + " | × host MJWarp |",
        "|" + "---|" * (10 + len(phases)),
    ]
    for (key, schedule) in sorted(groups, key=_table_order):
        ok = [r for r in groups[(key, schedule)] if _ok(r)]
        wall = pooled(ok, "wall_per_iter_ms")
        if wall is None:
            continue
        first, wm = ok[0], float(wall["mean_ms"])
        syncs = [float(v) for r in ok if (v := r.get("host_syncs_per_iteration")) is not None]
        reference = host_mjwarp.get((str(first.get("config")) + mps_suffix(first), schedule))
        ratio = f"{reference / wm:.2f}×" if reference and first.get("backend") == "mjwarp" else "–"
        lines.append(
            f"| {_label(str(first.get('config')), ok)} | {schedule} | "
            f"{physics_label(first.get('backend'))} | "
            f"{first.get('collector') or 'host'}{', CUDA MPS' if mps_suffix(first) else ''} | {len(ok)} | {_fmt(wm)} | "
            f"{_fmt(_env_steps_per_s(ok, wm), 0)} | "
            f"{_fmt(_mean(pooled(ok, 'learner_train_ms')))} | {_fmt(fmean(syncs) if syncs else None)} | "
            + " | ".join(_fmt(_pooled_phase(ok, p)) for p in phases) + f" | {ratio} |"
        )
    return "\n".join(lines)


def env_step_split_table(runs: Sequence[dict[str, Any]]) -> str:
    """Markdown table: the device-resident collector's env step by parts, one row per configuration × setting whose
    runs recorded them (the env's timestamps of its step's parts; means over the summary window).

    *physics*, *terms* and *reset* are per env step, timed on the device inside the step's CUDA graph; *env step*
    is the collector's per iteration (one env step per iteration once training runs), and what it holds besides
    the three parts is the step's launch, its wait for the draws taken beside the step before, and the action's
    copy in. *beside the learner* is how long the env step on its side stream ran while the learner's graph ran
    (of the shorter of the two, *overlap share*).
    """
    groups = group_runs(runs)
    lines = [
        "| configuration | setting · schedule | runs | wall mean | env step | physics | terms | reset | learner "
        "| env step beside the learner | overlap share |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (key, schedule) in sorted(groups, key=_table_order):
        ok = [r for r in groups[(key, schedule)] if _ok(r) and _pooled_phase([r], "env_physics") is not None]
        wall = pooled(ok, "wall_per_iter_ms")
        if wall is None:
            continue
        env_step, physics, terms, reset, learner, beside = (_pooled_phase(ok, p) for p in (
            "env_step", "env_physics", "env_terms", "env_reset", "learner", "env_step_beside_learner"))
        shorter = min(env_step, learner) if env_step is not None and learner is not None else None
        share = f"{beside / shorter:.2f}" if beside is not None and shorter else "–"
        lines.append(
            f"| {_label(str(ok[0].get('config')), ok)} | {schedule} | {len(ok)} | {_fmt(float(wall['mean_ms']))} | "
            f"{_fmt(env_step)} | {_fmt(physics)} | {_fmt(terms)} | {_fmt(reset)} | {_fmt(learner)} | "
            f"{_fmt(beside)} | {share} |"
        )
    return "\n".join(lines)


#: The collector's per-cycle phases (``rows[*].collector_timing_ms``) shown beside the learner's
#: inference time: who sets the pace, and what the collector waits for.
COLLECTOR_PHASES = ("env_step_ms", "learner_action_wait_ms")


def pooled_collector_phase(runs: Sequence[dict[str, Any]], phase: str) -> float | None:
    """Mean of one collector phase over the summarized rows of all completed runs."""
    values = [
        row["collector_timing_ms"][phase]
        for run in runs
        if _ok(run)
        for row in run["rows"]
        if (row.get("collector_timing_ms") or {}).get(phase) is not None
    ]
    return fmean(values) if values else None


def pace_table(runs: Sequence[dict[str, Any]]) -> str:
    """Markdown table: the learner's iteration against the collector's own cycle.

    *iter / cycle* below 1 means the learner finishes its iteration before the collector
    its cycle: the collector sets the pace, and the runner's *wall per iteration* is then
    the collector's cycle. The collector's *action wait* is the time it
    waits for the learner's answer to an inference request per cycle; *inference* is the
    learner's side of that answer (observation upload, forward, action download).
    """
    groups = group_runs(runs)
    lines = [
        "| configuration | schedule | iter mean | wall per iteration | collector cycle mean | iter / cycle "
        "| collector env step | collector action wait | learner inference |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (config, schedule) in sorted(groups, key=_table_order):
        ok = [r for r in groups[(config, schedule)] if _ok(r)]
        it, cycle, inference = (pooled(ok, f) for f in ("iter_ms", "collector_cycle_ms", "inference_ms"))
        if it is None:
            continue
        iter_ms = float(it["mean_ms"])
        cycle_ms = float(cycle["mean_ms"]) if cycle else None
        ratio = f"{iter_ms / cycle_ms:.2f}" if cycle_ms else "–"
        env_step, wait = (pooled_collector_phase(ok, phase) for phase in COLLECTOR_PHASES)
        lines.append(
            f"| {_label(config, ok)} | {schedule} | {_fmt(iter_ms)} | {_fmt(_mean(pooled(ok, 'wall_per_iter_ms')))} | "
            f"{_fmt(cycle_ms)} | {ratio} | {_fmt(env_step)} | {_fmt(wait)} | "
            f"{_fmt(float(inference['mean_ms']) if inference else None)} |"
        )
    return "\n".join(lines)


#: Start-up phases the warm-up table shows, as the hook names them (``hook/startup_phases.py``), and their headers.
STARTUP_COLUMNS = (
    ("learner_constructed", "learner built"),
    ("replay_pipeline_ready", "replay transfer ready"),
    ("objectives_compiled", "objectives compiled"),
    ("graph_captured", "graph captured"),
    ("warm_up_done", "warm-up done"),
    ("collector_started", "collector started"),
    ("collector_first_request", "collector's 1st request"),
)


def warmup_table(runs: Sequence[dict[str, Any]]) -> str:
    """Compile/capture warm-up per run, kept out of the summary rows on purpose.

    The start-up columns are seconds from launch to the end of each phase (– : the run did not pass through it
    or predates the record); *cold at launch* lists the compile caches that were empty when the trainer started.
    """
    lines = [
        "| run | configuration | schedule | start → 1st iteration (s) | "
        + " | ".join(f"{header} (s)" for _, header in STARTUP_COLUMNS)
        + " | cold at launch | replay H2D copy | 1st iteration learner (ms) | excess learner before window (ms) "
        "| Dynamo compile (s) |",
        "|---|---|---|---|" + "---|" * len(STARTUP_COLUMNS) + "---|---|---|---|---|",
    ]
    for run in runs:
        warm = run.get("warmup") or {}
        dynamo = (warm.get("dynamo") or {}).get("phase_total_s") or {}
        compile_s = dynamo.get("_compile.compile_inner")
        startup = run.get("startup") or {}
        phases = startup.get("phases_s") or {}
        cold = (", ".join(startup["cold_caches"]) or "none") if "cold_caches" in startup else "–"
        h2d = (run.get("replay_h2d") or {}).get("copy") or "–"
        lines.append(
            f"| {run.get('_file', '?')} | {_label(str(run.get('config')), [run])} | {_schedule(run)} | "
            f"{_fmt(warm.get('startup_to_first_iteration_s'), 1)} | "
            + " | ".join(_fmt(phases.get(name), 1) for name, _ in STARTUP_COLUMNS)
            + f" | {cold} | {h2d} | {_fmt(warm.get('first_iteration_learner_train_ms'), 0)} | "
            f"{_fmt(warm.get('excess_learner_ms'), 0)} | {_fmt(compile_s, 1)} |"
        )
    return "\n".join(lines)


def _swap(run: dict[str, Any]) -> str:
    """Where a compiled-behind run swapped to its compiled paths, or why it did not ("–": not compiled behind)."""
    record = (run.get("run_summary") or {}).get("compile_behind")
    if not record:
        return "–"
    if "swap_iteration" in record:
        return (f"iteration {record['swap_iteration']}, {_fmt(record.get('swap_after_start_s'), 1)} s after the "
                f"start ({_fmt(record.get('swap_pause_s'), 1)} s pause)")
    return f"none: the helper was still running at the end (stopped, exit {record.get('helper_exit_code')})"


def start_table(runs: Sequence[dict[str, Any]]) -> str:
    """A start from launch: the first iteration, the run's end, the pace after the start, the compile-behind swap.

    For runs made with empty compile caches (*cold at launch*); the wall per iteration is the summary window's
    (the last ``summary_last`` iterations), which for a compiled-behind run is the eager path's when it never
    swapped.
    """
    lines = [
        "| run | configuration | setting · schedule | cold at launch | launch → 1st iteration (s) | launch → end (s) "
        "| iterations | wall mean (summary window) | swap to the compiled paths |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        startup = run.get("startup") or {}
        cold = (", ".join(startup["cold_caches"]) or "none") if "cold_caches" in startup else "–"
        lines.append(
            f"| {run.get('_file', '?')} | {_label(str(run.get('config')), [run])} | {run.get('setting')} · "
            f"{_schedule(run)} | {cold} | {_fmt((run.get('warmup') or {}).get('startup_to_first_iteration_s'), 1)} | "
            f"{_fmt(run.get('wall_s'), 1)} | {run.get('iterations')} | "
            f"{_fmt((run.get('wall_per_iter_ms') or {}).get('mean_ms'))} | {_swap(run)} |"
        )
    return "\n".join(lines)


def compile_frames_table(runs: Sequence[dict[str, Any]]) -> str:
    """Each compiled-behind run's compiles, graph by graph (uni_rl 0014): the helper's (cold where the run's caches
    were empty at launch) and the runner's own at the swap (served by the helper's artifacts); the seconds in all
    and in Inductor, and the graph's operation count. A backward graph has no frame name of its own: it follows
    its forward."""
    lines = ["| run | cold at launch | where | graph | seconds | of them Inductor | graph operations |",
             "|---|---|---|---|---|---|---|"]
    for run in runs:
        record = (run.get("run_summary") or {}).get("compile_behind") or {}
        cold = ", ".join((run.get("startup") or {}).get("cold_caches") or []) or "none"
        for where, key in (("helper", "helper_frames"), ("runner at the swap", "swap_frames")):
            for frame in record.get(key) or []:
                name = frame["frame"] or "(backward of the graph above)"
                lines.append(f"| {run.get('_file', '?')} | {cold} | {where} | `{name}` | {_fmt(frame['compile_s'])} | "
                             f"{_fmt(frame['inductor_s'])} | {frame['graph_ops'] if frame['graph_ops'] else '–'} |")
    return "\n".join(lines)


#: The start's phases of the phase table: the device collector's env, then the learner (``hook/startup_phases.py``).
START_PHASE_COLUMNS = (
    ("env_physics_built", "MJWarp physics built"),
    ("device_env_built", "device env built"),
    ("learner_constructed", "learner built"),
    ("device_env_reset", "env's 1st reset (step captured)"),
)


def _loads(part: dict[str, Any] | None) -> str:
    """A count of Warp module loads and the seconds they took (summed), or – for a run without the record."""
    return f"{part['count']} · {_fmt(part['seconds'], 1)}" if part else "–"


def start_phases_table(runs: Sequence[dict[str, Any]]) -> str:
    """Where a start's seconds went: launch to the end of each phase, and Warp's module loads by who made them.

    *built ahead* is the mjwarp backend's build before its first launch (unisim 0004): workers, then loads and
    the seconds they took summed over the workers, then the build's own wall seconds; *at a launch* are the
    loads a kernel launch made (the physics' own modules when nothing was built ahead, and the kernels MuJoCo
    Warp creates for the model at their first call).
    """
    lines = [
        "| run | configuration | setting | " + " | ".join(f"{header} (s)" for _, header in START_PHASE_COLUMNS)
        + " | 1st iteration (s) | Warp: built ahead (workers · loads · s summed · s wall) | Warp: loads at a launch "
        "(count · s) | cold at launch |",
        "|---|---|---|" + "---|" * len(START_PHASE_COLUMNS) + "---|---|---|---|",
    ]
    for run in runs:
        startup = run.get("startup") or {}
        phases = startup.get("phases_s") or {}
        loads = startup.get("warp_module_loads") or {}
        build = loads.get("kernel_build") or {}
        ahead = (f"{build['workers']} · {_loads(loads.get('by_build_workers'))} · {_fmt(build['seconds'], 1)}"
                 if build.get("workers") else ("none" if loads else "–"))
        cold = (", ".join(startup["cold_caches"]) or "none") if "cold_caches" in startup else "–"
        lines.append(
            f"| {run.get('_file', '?')} | {_label(str(run.get('config')), [run])} | {run.get('setting')} | "
            + " | ".join(_fmt(phases.get(name), 1) for name, _ in START_PHASE_COLUMNS)
            + f" | {_fmt((run.get('warmup') or {}).get('startup_to_first_iteration_s'), 1)} | {ahead} | "
            f"{_loads(loads.get('at_launch'))} | {cold} |"
        )
    return "\n".join(lines)


def environment_section(runs: Sequence[dict[str, Any]]) -> str:
    """Machine, versions, drift, applied series, checks and provenance, from the runs themselves."""
    if not runs:
        return "_no runs_"
    # The first run whose learner process reported its versions (a run that died early reported none).
    device = next((r["device"] for r in runs if (r.get("device") or {}).get("package_versions")), runs[0].get("device", {}))
    out = [
        f"- GPU: {device.get('gpu')} (capability {device.get('capability')}), torch {device.get('torch')}, "
        f"host {device.get('hostname')}",
        f"- packages: {json.dumps(device.get('package_versions'))}",
        f"- version drift vs VERSIONS.env: {json.dumps(device.get('version_drift'))}",
        f"- applied series sha256: {sorted({str(r.get('series_sha256')) for r in runs})}",
        f"- checks: {json.dumps(runs[0].get('checks'))}",
    ]
    # The overlay's provenance hook flags every process whose uni_rl is not the overlay's: a fault for an
    # overlay configuration, the intent for a reference (1.3.2 baseline, installed 1.4.0).
    flagged = [r.get("_file") for r in runs if r.get("provenance_flagged") and r.get("learner_source_kind") == "overlay"]
    references = [r.get("_file") for r in runs if r.get("learner_source_kind") not in (None, "overlay")]
    missing = [r.get("_file") for r in runs if not r.get("provenance_processes")]
    wrong = [r.get("_file") for r in runs if not r.get("device", {}).get("flashsac_source_ok", False)]
    out.append(f"- provenance: {sum(int(r.get('provenance_processes') or 0) for r in runs)} process records; "
               f"overlay runs flagged in {flagged or 'none'}; missing in {missing or 'none'}; reference runs (flagged "
               f"as not the overlay, as intended): {references or 'none'}")
    out.append(f"- uni_rl imported from the wrong place in: {wrong or 'none'}")
    for run in runs:
        out.append(f"  - {run.get('_file')}: uni_rl from `{run.get('device', {}).get('flashsac_source')}`")
    return "\n".join(out)


def failures_section(runs: Sequence[dict[str, Any]]) -> str:
    failed = [r for r in runs if r.get("status") != "completed"]
    lines = [f"- **{r.get('_file')}** ({_label(str(r.get('config')), [r])}, {_schedule(r)}): {r.get('error')}"
             for r in failed]
    lines += [f"- earlier attempt of **{r.get('_file')}** ({_label(str(r.get('config')), [r])}, {_schedule(r)}), "
              f"then run again: {attempt.get('error')}"
              for r in runs for attempt in r.get("earlier_attempts") or []]
    return "\n".join(lines) if lines else "All runs completed."


def write_summary(runs: Sequence[dict[str, Any]], path: Path, *, title: str, notes: str = "") -> None:
    """summary.md: timings, pace against the collector, warm-up, environment, failures."""
    first = runs[0] if runs else {}
    keys = ("num_envs", "batch_size", "replay_buffer_n", "learning_starts")
    settings = sorted({(r.get("setting") or "report", *(r.get("training_config", {}).get(k) for k in keys))
                       for r in runs}, key=str)
    described = "; ".join(f"{name}: {envs} envs, batch {batch}, replay_buffer_n {rbn}, learning_starts {ls}"
                          for name, envs, batch, rbn, ls in settings)
    physics = " and ".join(sorted({"MuJoCo Warp" if r.get("backend") == "mjwarp" else "MuJoCo" for r in runs}))
    names = sorted({str(r.get("task") or bench_configs.DEFAULT_TASK) for r in runs})
    tasks = ", ".join(bench_configs.TASKS[n].label if n in bench_configs.TASKS else n for n in names)
    text = (
        f"# {title}\n\n"
        f"{tasks} ({physics}); settings {described}; "
        f"{first.get('iterations')} iterations, statistics over the last {first.get('summary_last')}; times in ms.\n\n"
        f"{notes}\n\n## What users feel: wall per iteration and env steps/s\n\n{throughput_table(runs)}\n\n"
        f"## Timings\n\n{summary_table(runs)}\n\n"
        f"## Collectors side by side (host syncs, the device-resident collector's split)\n\n{collector_table(runs)}\n\n"
        f"## The device env step by parts\n\n{env_step_split_table(runs)}\n\n"
        f"## Learner vs collector pace (means over the same window)\n\n{pace_table(runs)}\n\n"
        f"## Compile / capture warm-up (not in the table above)\n\n{warmup_table(runs)}\n\n"
        f"## Environment\n\n{environment_section(runs)}\n\n## Failures\n\n{failures_section(runs)}\n"
    )
    path.write_text(text, encoding="utf-8")


def plot_timings(runs: Sequence[dict[str, Any]], path: Path) -> None:
    """Per-iteration learner and iter time of every run; one column per schedule, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schedules = sorted({_schedule(r) for r in runs}, key=_schedule_order) or ["?"]
    fig, axes = plt.subplots(2, len(schedules), figsize=(7 * len(schedules), 8), squeeze=False, sharex="col")
    for col, schedule in enumerate(schedules):
        for run in (r for r in runs if _schedule(r) == schedule and r.get("rows_all")):
            steps = [row["step"] for row in run["rows_all"]]
            for ax, field in zip(axes[:, col], ("learner_train_ms", "iter_ms")):
                values = [row.get(field) if row.get(field) is not None else float("nan") for row in run["rows_all"]]
                ax.plot(steps, values, lw=0.8, label=f"{_label(str(run.get('config')), [run])} ({run.get('_file', '')})")
            first = run.get("summary_first_step")
            if first is not None:
                for ax in axes[:, col]:
                    ax.axvline(first, color="0.6", ls=":", lw=0.8)
        for ax, field in zip(axes[:, col], ("learner_train_ms", "iter_ms")):
            ax.set_yscale("log")
            ax.set_title(f"{field}, schedule {schedule}")
            ax.set_ylabel("ms")
            ax.grid(True, which="both", alpha=0.3)
        axes[1, col].set_xlabel("iteration (dotted: start of summary window)")
        axes[0, col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- learning parity

def plot_rewards(runs: Sequence[dict[str, Any]], path: Path) -> None:
    """Reward per iteration: thin line per seed, thick line for the mean over seeds, per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    configs = sorted({str(r.get("config")) for r in runs})
    for i, config in enumerate(configs):
        color = colors[i % len(colors)]
        curves = []
        for run in (r for r in runs if str(r.get("config")) == config and r.get("rows_all")):
            steps = [row["step"] for row in run["rows_all"]]
            rewards = [row.get("reward") if row.get("reward") is not None else float("nan") for row in run["rows_all"]]
            ax.plot(steps, rewards, color=color, lw=0.6, alpha=0.4)
            curves.append(dict(zip(steps, rewards)))
        if curves:
            steps = sorted(set().union(*curves))
            mean = [fmean(vals) if (vals := [c[s] for c in curves if s in c and not math.isnan(c[s])]) else float("nan")
                    for s in steps]
            ax.plot(steps, mean, color=color, lw=2.0, label=f"{_label(config, [])} (mean of {len(curves)} seeds)")
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean episode reward (collector)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Rebuild summary.md and timings.png of a results folder from its run JSONs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--title", default="FlashSAC training benchmark")
    args = parser.parse_args(argv)
    runs = load_runs(args.folder)
    if not runs:
        print(f"bench_report: error: no run JSON under {args.folder}", file=sys.stderr)
        return 1
    write_summary(runs, args.folder / "summary.md", title=args.title)
    plot_timings(runs, args.folder / "timings.png")
    print(f"wrote {args.folder / 'summary.md'} and {args.folder / 'timings.png'} from {len(runs)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
