"""The front page's one table: what a user feels end to end, per setting, build and physics.

Registered in ``readme_tables`` as the ``headline`` kind, so the README's block is regenerated from, and checked
against, committed run JSONs like every other table. A newcomer asks three things of a benchmark: how long an
iteration takes, how many env steps a second that is, and how long until training starts; and on what machine,
with which versions, it was measured. So each row carries its series sha256, GPU, usable cores and torch, and the
packages follow the table, all read from the runs. Only the three builds a user chooses between are shown
(unpatched 1.3.2, upstream 1.4.0, the patched default); the other configurations are in docs/benchmark.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench_configs
import bench_report
import mjwarp_report

PROJECT = Path(__file__).resolve().parents[2]
#: The builds a user chooses between, in table order.
HEADLINE_CONFIGS = ("baseline-1.3.2", "upstream-1.4.0", "patched-default")
#: Physics in table order: the task's own owner first.
PHYSICS = ("mujoco", "mjwarp")
#: Packages named under the table (``device.package_versions`` of the runs), in this order.
PACKAGES = ("unilab", "unilab-rl", "unisim-core", "mujoco", "mujoco-warp", "warp-lang")

Key = tuple[int, str, int, int, bool, bool, str]


def _envs(run: dict[str, Any]) -> int:
    """Envs × ranks: the env steps one iteration collects, so rows of one setting and any rank count compare."""
    return int(run["env_steps_per_s"]["envs"]) * int(run["env_steps_per_s"]["ranks"])


def _key(run: dict[str, Any]) -> Key:
    """(envs, schedule, build, physics, MPS on, device-resident collector, series): one row, whichever folder its
    runs come from (runs without a collector field ran the host collector)."""
    schedule = str(run.get("training_config", {}).get("schedule") or "?")
    return (_envs(run), schedule, HEADLINE_CONFIGS.index(str(run["config"])),
            PHYSICS.index(str(run.get("backend") or "mujoco")),
            bench_report.mps_suffix(run) != "", str(run.get("collector") or "host") == "device-resident",
            str(run.get("series_sha256") or "?")[:12])


def _first_iteration(runs: Sequence[dict[str, Any]]) -> str:
    """Seconds from launch to the first logged iteration: one value, or the range over the row's runs."""
    starts = ((r.get("warmup") or {}).get("startup_to_first_iteration_s") for r in runs)
    values = sorted(float(s) for s in starts if s is not None)
    if not values:
        return "not measured"
    return f"{values[0]:.0f}" if round(values[0]) == round(values[-1]) else f"{values[0]:.0f}–{values[-1]:.0f}"


def _machine(runs: Sequence[dict[str, Any]]) -> str:
    """GPU, usable cores and torch as the runs record them (cores: ``cpus_usable``, absent in older runs, whose
    folder name and README say what the host was)."""
    device = runs[0].get("device") or {}
    cores = sorted({int(r["cpus_usable"]) for r in runs if r.get("cpus_usable")})
    where = f"{device.get('gpu')}, {'/'.join(map(str, cores))} cores" if cores else str(device.get("gpu"))
    return f"{where}, torch {device.get('torch')}"


def _packages(runs: Sequence[dict[str, Any]]) -> str:
    """One line per series: the package versions its runs recorded (they must agree within a series)."""
    by_series: dict[str, set[str]] = {}
    for run in runs:
        versions = (run.get("device") or {}).get("package_versions") or {}
        text = ", ".join(f"{name} {versions[name]}" for name in PACKAGES if versions.get(name))
        by_series.setdefault(str(run.get("series_sha256") or "?")[:12], set()).add(text)
    return "; ".join(f"series `{series}`: {' / '.join(sorted(texts))}" for series, texts in sorted(by_series.items()))


def _newest_series(groups: dict[Key, list[dict[str, Any]]]) -> dict[Key, list[dict[str, Any]]]:
    """Per row (envs, schedule, build, physics, MPS, collector), only the runs of the series measured last (the
    latest ``started_utc`` of its runs): the front page shows what the product does now; earlier series stay in
    their evidence folders (results/README.md)."""
    newest: dict[tuple[Any, ...], Key] = {}
    for key in sorted(groups, key=lambda k: max(str(r.get("started_utc")) for r in groups[k])):
        newest[key[:6]] = key  # a later series of the same row replaces an earlier one
    return {key: groups[key] for key in newest.values()}


def _groups(runs: Sequence[dict[str, Any]]) -> dict[Key, list[dict[str, Any]]]:
    """The completed runs of the builds a user chooses between, by row, the newest series of each row."""
    groups: dict[Key, list[dict[str, Any]]] = {}
    for run in runs:
        if run.get("status") == "completed" and run.get("env_steps_per_s") and run.get("config") in HEADLINE_CONFIGS:
            groups.setdefault(_key(run), []).append(run)
    return _newest_series(groups)


def _build_and_physics(key: Key) -> tuple[str, str]:
    """A row's build (its configuration's label) and physics (with MPS and the device-resident collector)."""
    _, _, config, physics, mps, device_collector, _ = key
    sim = (mjwarp_report.SIM_LABELS[PHYSICS[physics]] + (", CUDA MPS" if mps else "")
           + (", device-resident collector" if device_collector else ""))
    return bench_configs.CONFIGS[HEADLINE_CONFIGS[config]].label, sim


def headline_table(runs: Sequence[dict[str, Any]]) -> str:
    """Markdown: per envs × schedule × build × physics, wall per iteration, env steps/s, launch to 1st iteration.

    *wall* is the mean wall clock between consecutive iterations over each run's summary window, pooled over the
    row's runs; *env steps/s* = envs × ranks / mean wall; *evidence* the results folder (``_folder``, set by
    ``readme_tables``) whose README says how the runs were made. Rows without a completed run are left out, so a build
    or physics that was not measured at a setting has no row (the README says so) rather than an empty one; a row
    measured with several series shows the newest (``_newest_series``).
    """
    groups = _groups(runs)
    lines = [
        "| envs · schedule | build | physics | runs | wall per iteration (ms) | env steps/s "
        "| launch → 1st iteration (s) | series | machine | evidence |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(groups):
        envs, schedule, *_, series = key
        group = groups[key]
        folders = sorted({str(r.get("_folder", "?")).removeprefix("results/").split("/")[0] for r in group})
        wall = bench_report.pooled(group, "wall_per_iter_ms")
        if wall is None:
            continue
        mean = float(wall["mean_ms"])
        label, sim = _build_and_physics(key)
        lines.append(
            f"| {envs} · {schedule} | {label} | {sim} | "
            f"{len(group)} | {mean:.1f} | {envs * 1000.0 / mean:.0f} | {_first_iteration(group)} | `{series}` | "
            f"{_machine(group)} | {', '.join(folders)} |"
        )
    kept = [run for group in groups.values() for run in group]
    return "\n".join(lines) + f"\n\nPackages, as the runs record them: {_packages(kept)}."


#: The settings' names, by envs × schedule (the bench's ``report`` and ``unilab-default``).
#: A table's title by the setting its runs recorded (the bench's SETTINGS names): UniLab's defaults are each
#: task's own config; the report's setting names its schedule when it is not the report's 2/1/1.
SETTING_TITLES = {"report": "the report's setting", "unilab-default": "UniLab's defaults"}


def _title(names: set[str], schedule: str) -> str:
    """The title of one setting's table from the setting names of its runs."""
    if len(names) != 1 or next(iter(names)) not in SETTING_TITLES:
        return "a setting of its own"
    name = next(iter(names))
    return SETTING_TITLES[name] + (f", {schedule}" if name == "report" and schedule != "2/1/1" else "")


def front_tables(runs: Sequence[dict[str, Any]]) -> str:
    """Markdown: the front page's small tables, one per setting: build and physics, wall per iteration, env
    steps/s, the speed-up over unpatched 1.3.2 on CPU MuJoCo (its wall over the row's) and launch to 1st
    iteration, then the machine, series and packages the runs record.

    Meant for one folder of one invocation (one machine, one series), so that every row of a table is comparable;
    rows as in ``headline_table`` (completed runs of the three builds a user chooses between, the newest series).
    """
    groups = _groups(runs)
    blocks = []
    for setting in sorted({key[:2] for key in groups}):
        envs, schedule = setting
        names = {str(r.get("setting")) for key, rows in groups.items() if key[:2] == setting for r in rows}
        lines = [f"**{_title(names, schedule)}** ({envs} envs, {schedule})", "",
                 "| build | physics | wall per iteration (ms) | env steps/s | speed-up "
                 "| launch → 1st iteration (s) |",
                 "|---|---|---|---|---|---|"]
        walls = {key: bench_report.pooled(groups[key], "wall_per_iter_ms") for key in groups if key[:2] == setting}
        base = [float(w["mean_ms"]) for k, w in walls.items() if w and k[2] == 0 and k[3] == 0]
        for key in sorted(k for k in groups if k[:2] == setting):
            wall = walls[key]
            if wall is None:
                continue
            mean = float(wall["mean_ms"])
            label, sim = _build_and_physics(key)
            speed = f"{base[0] / mean:.2f}×" if base else "–"
            lines.append(f"| {label} | {sim} | {mean:.1f} | {envs * 1000.0 / mean:.0f} | {speed} | "
                         f"{_first_iteration(groups[key])} |")
        blocks.append("\n".join(lines))
    kept = [run for group in groups.values() for run in group]
    machines = sorted({_machine([run]) for run in kept})
    whole = [_whole_run(folder) for folder in sorted({str(run.get("_folder")) for run in kept})]
    return ("\n\n".join(blocks) + "".join(f"\n\n{line}" for line in whole if line)
            + f"\n\nMeasured on {'; '.join(machines)}. Packages, as the runs record them: {_packages(kept)}.")


def _whole_run(folder: str) -> str | None:
    """One line on the whole UniLab run a folder recorded beside its bench runs (``whole-run/whole-run.json``: a
    trainer launched as a user launches it, timed from outside), or None where it has none."""
    path = PROJECT / folder / "whole-run" / "whole-run.json"
    if not path.is_file():
        return None
    run = bench_report.read_run(path)
    task = next((arg for arg in run["command"] if arg.startswith("task=")), "the task's default")
    return (f"UniLab's whole default run, `{task}` with no other overrides ({run['iterations_logged']} iterations, "
            f"exit {run['exit_code']}): first iteration {run['launch_to_first_iteration_s']:.1f} s after launch, "
            f"ended {run['launch_to_end_s']:.1f} s after launch, mean reward at the end "
            f"{run['reward_mean_last']:.1f}.")
