#!/usr/bin/env python3
"""UniLab's whole training run as a user waits for it: launch → first iteration → the compiled learner → the end.

The bench's figures are a window of the steady state; a user waits for the whole run, its start and its compile
included. This launches UniLab's own ``train_flashsac.py`` from an applied tree's root with the given Hydra
overrides (none: UniLab's defaults for the task), times the process from outside, and reads the trainer's own
records: the TensorBoard event file (``perf/iter_ms`` per iteration, with its wall time, and the mean reward) and
``run_summary.json`` (compile behind's record: the iteration of the swap to the compiled learner).

  python experiments/bench/whole_run.py --tree work/unilab-1.3.2 --out results/<study>/whole-run \\
      [--label NAME] [--env KEY=VALUE ...] [--beside unpatched-1.3.2] -- task=g1_walk_flat/mjwarp

Writes ``<label>.json`` and ``<label>-log.txt.gz`` (the run's output, each line with its seconds since launch)
into ``--out``; the run's interpreter is this one, its ``PYTHONPATH`` the caller's (overlay first).

``--beside unpatched-1.3.2`` then runs the same command line as UniLab 1.3.2 without this project
(``<label>-unpatched-1.3.2.json``): the pristine tree of the pinned sdist and the pristine ``uni_rl`` of the pinned
unilab-rl 1.3.2 wheel, the overlay and the patched tree off its path, the same overrides. A whole run is a figure
a user waits for, so its reference is waited for the same way, in the same invocation, one after the other. Each
record names the ``uni_rl`` its trainer imported (its provenance record); a run that imported another learner than
its build says is recorded as failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import bench_configs
import bench_driver
import bench_env
from bench_env import BenchSetupError
from bench_learner import provenance_site

TRAIN = "src/unilab/scripts/train_flashsac.py"
#: The trainer's per-iteration scalar: one event per logged iteration, stamped with its wall time.
ITERATION_TAG = "perf/iter_ms"
#: Besides the overrides given: no play-back and no ONNX export after training (no renderer on a GPU host).
QUIET = ("training.no_play=true", "training.export_onnx=false")


def _scalars(event_file: Path) -> dict[str, list[tuple[float, int, float]]]:
    """Every scalar tag of a TensorBoard event file: (wall time, step, value) in file order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(event_file), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.wall_time, e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


#: The mean episode reward as uni_rl's off-policy logger writes it (logged once an episode has ended).
REWARD_TAG = "reward/mean"
#: The mean length of the last finished episodes, the trainer panel's "Ep Len".
LENGTH_TAG = "episode/length"
#: The run JSON keeps the episode length at every this many logged iterations (and the last): its course.
LENGTH_EVERY = 50


#: The steady-state window: the last 500 logged iterations (the project's statistics of a 1000-iteration run), or
#: the second half of a shorter run.
STEADY_LAST = 500


def steady_state(iterations: list[tuple[float, int, float]]) -> dict[str, Any]:
    """Wall per iteration (the trainer's ``perf/iter_ms``, mean and median) and env steps/s (env steps over wall
    time between the window's first and last events) over the steady-state window, and the window's size."""
    window = iterations[-min(STEADY_LAST, max(len(iterations) // 2, 1)):]
    values = sorted(v for _, _, v in window)
    out: dict[str, Any] = {"steady_iterations": len(window), "steady_iter_ms_mean": sum(values) / len(values),
                           "steady_iter_ms_median": values[len(values) // 2]}
    if len(window) > 1 and window[-1][0] > window[0][0]:
        out["steady_env_steps_per_s"] = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])
    return out


def summarize(run_dir: Path, launch_unix: float) -> dict[str, Any]:
    """The times and the reward of one finished run folder, seconds counted from ``launch_unix``."""
    events = sorted(run_dir.glob("events.out.tfevents.*"))
    if not events:
        raise RuntimeError(f"{run_dir} holds no TensorBoard event file")
    scalars: dict[str, list[tuple[float, int, float]]] = {}
    for path in events:
        for tag, rows in _scalars(path).items():
            scalars.setdefault(tag, []).extend(rows)
    iterations = scalars.get(ITERATION_TAG, [])
    if not iterations:
        raise RuntimeError(f"{run_dir}'s event files hold no {ITERATION_TAG}")
    first, last = iterations[0], iterations[-1]
    out: dict[str, Any] = {
        "event_files": [p.name for p in events], "iteration_tag": ITERATION_TAG,
        "iterations_logged": len(iterations), "first_step": first[1], "last_step": last[1],
        "launch_to_first_iteration_s": first[0] - launch_unix, "launch_to_last_iteration_s": last[0] - launch_unix,
        "env_steps_per_s_first_to_last": (last[1] - first[1]) / max(last[0] - first[0], 1e-9),
    }
    out.update(steady_state(iterations))
    if scalars.get(REWARD_TAG):
        out.update(reward_tag=REWARD_TAG, reward_mean_last=scalars[REWARD_TAG][-1][2])
    lengths = scalars.get(LENGTH_TAG, [])
    if lengths:
        course = [*lengths[::LENGTH_EVERY], *([lengths[-1]] if (len(lengths) - 1) % LENGTH_EVERY else [])]
        out.update(episode_length_last=lengths[-1][2],
                   episode_length_course=[[step, round(value, 3)] for _, step, value in course])
    summary_path = run_dir / "run_summary.json"
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        behind = summary.get("compile_behind")
        out["compile_behind"] = behind
        if isinstance(behind, dict) and behind.get("swap_iteration") is not None:
            # The iteration events are in iteration order; the swap is made at the boundary before that iteration.
            index = min(int(behind["swap_iteration"]), len(iterations) - 1)
            out["launch_to_compiled_s"] = iterations[index][0] - launch_unix
    return out


def newest_run_dir(root: Path, since_unix: float) -> Path | None:
    """The run folder the trainer wrote after ``since_unix`` under ``root`` (UniLab's ``logs/<algo>/<task>/<stamp>/``,
    or the folder ``training.log_dir`` names)."""
    found = [p.parent for p in root.rglob("events.out.tfevents.*") if p.stat().st_mtime >= since_unix]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def run(tree: Path, overrides: list[str], env: dict[str, str],
        timeout_s: float | None = None) -> tuple[dict[str, Any], list[str]]:
    """Launch the trainer, stream its output with timestamps, and return the record and the log lines. After
    ``timeout_s`` the trainer gets SIGTERM (its stop checkpoints and exits 143); the record says so."""
    command = [sys.executable, TRAIN, *overrides, *QUIET]
    launch_unix, launch = time.time(), time.monotonic()
    proc = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(timeout_s, proc.send_signal, (signal.SIGTERM,)) if timeout_s else None
    if timer is not None:
        timer.start()
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(f"{time.monotonic() - launch:9.3f} {line.rstrip()}")
    code = proc.wait()
    timed_out = timer is not None and not timer.is_alive() and timer.finished.is_set() and code != 0
    if timer is not None:
        timer.cancel()
    record: dict[str, Any] = {"command": ["python3", *command[1:]], "exit_code": code, "timed_out": timed_out,
                              "pid": proc.pid, "launch_unix": launch_unix, "launch_to_end_s": time.monotonic() - launch,
                              "output_lines": len(lines)}
    named = [o.split("=", 1)[1].strip("'\"") for o in overrides if o.startswith("training.log_dir=")]
    run_dir = newest_run_dir(tree / (named[-1] if named else "logs"), launch_unix - 1.0)
    if run_dir is None:
        record["error"] = "the run made no log folder with a TensorBoard event file"
        return record, lines
    record["run_dir"] = str(run_dir.relative_to(tree) if run_dir.is_relative_to(tree) else run_dir)
    try:
        record.update(summarize(run_dir, launch_unix))
    except RuntimeError as exc:
        record["error"] = str(exc)
    record.update(compiled_before_first_iteration(record, lines))
    return record, lines


#: The trainer's line when the warm-up's compile artifacts loaded and nothing compiles behind
#: (``flashsac_runtime.learner.compile_behind.ARTIFACTS_LOADED``).
ARTIFACTS_LOADED = "[compile behind] not needed: the warm-up's compile artifacts loaded"


def compiled_before_first_iteration(record: dict[str, Any], lines: list[str]) -> dict[str, Any]:
    """Where no swap was made because the compile artifacts loaded, the compiled learner serves from the first
    iteration on: its launch → compiled is the first iteration's."""
    if record.get("launch_to_compiled_s") is not None or record.get("launch_to_first_iteration_s") is None:
        return {}
    if not any(ARTIFACTS_LOADED in line for line in lines):
        return {}
    return {"launch_to_compiled_s": record["launch_to_first_iteration_s"],
            "compiled_from": "compile artifacts, before the first iteration"}


#: The compile helper's line when its warm-up is done (``flashsac_runtime.learner.compile_behind``).
HELPER_DONE = "[compile behind] helper: Learner warm-up"


def helper_done(log: Path) -> tuple[float, str] | None:
    """Seconds after launch and the text of the compile helper's warm-up line in a run's log, if it has one."""
    if not log.is_file():
        return None
    with gzip.open(log, "rt", encoding="utf-8") as handle:
        for line in handle:
            seconds, _, text = line.strip().partition(" ")
            if text.startswith(HELPER_DONE):
                # The machine's cache path says nothing about the run: its file name is kept.
                return float(seconds), re.sub(r"/\S*/", "", text.split("helper: ", 1)[1])
    return None


#: The points of a run's episode-length course the course table shows (indices into ``episode_length_course``:
#: every fourth, the last added).
COURSE_EVERY = 4


def _cell(value: float | None, digits: int = 1) -> str:
    """A table cell: the value to ``digits`` decimals, or a dash where the run has none."""
    return "–" if value is None else f"{value:.{digits}f}"


def course_table(folder: Path) -> str:
    """One row per whole run of ``folder`` with an episode-length course: the mean reward at the end, and the mean
    episode length (the panel's Ep Len) with its env step (the trainer's global step, in millions) at every
    ``COURSE_EVERY``-th point of its course and at its end."""
    rows = ["| run | mean reward (last) | mean episode length @ million env steps, along the run |", "|---|---|---|"]
    for path in sorted(folder.glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        course = run.get("episode_length_course")
        if not course:
            continue
        points = [*course[::COURSE_EVERY], *([course[-1]] if (len(course) - 1) % COURSE_EVERY else [])]
        reward = run.get("reward_mean_last")
        rows.append(f"| {run.get('label', path.stem)} | {'–' if reward is None else f'{reward:.3f}'} | "
                    + ", ".join(f"{value:.1f} @ {step / 1e6:.2f}" for step, value in points) + " |")
    return "\n".join(rows)


def table(folder: Path) -> str:
    """One row per whole run of ``folder`` (its ``<label>.json`` and ``<label>-log.txt.gz``)."""
    head = ("| run | exit | iterations | launch → 1st iteration (s) | compile helper done (s) | helper's warm-up | "
            "launch → compiled learner (s) | launch → end (s) | env steps/s | steady ms / iteration (last) |")
    rows = [head, "|---" * (head.count(" | ") + 1) + "|"]

    for path in sorted(folder.glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        if "launch_to_end_s" not in run:
            continue
        helper = helper_done(folder / f"{path.stem}-log.txt.gz")
        rows.append(f"| {run.get('label', path.stem)} | {run['exit_code']}{' (timed out)' if run.get('timed_out') else ''}"
                    f" | {run.get('iterations_logged', '–')} | {_cell(run.get('launch_to_first_iteration_s'))} | "
                    f"{_cell(helper[0] if helper else None)} | {helper[1] if helper else '–'} | "
                    f"{_cell(run.get('launch_to_compiled_s'))} | {_cell(run['launch_to_end_s'])} | "
                    f"{_cell(run.get('env_steps_per_s_first_to_last'), 0)} | "
                    f"{_cell(run.get('steady_iter_ms_mean'), 2)} ({run.get('steady_iterations', '–')}) |")
    return "\n".join(rows)


#: ``--beside``: UniLab 1.3.2 as a user has it without this project.
UNPATCHED = "unpatched-1.3.2"


def beside_table(folder: Path) -> str:
    """Each whole run of ``folder`` made with ``--beside`` next to its unpatched 1.3.2 run (``<label>.json`` and
    ``<label>-unpatched-1.3.2.json``, the same command line), and the two ratios a user feels: how many times sooner
    the patched run ends, and how many times its env steps per second (first to last iteration)."""
    head = ("| run | build | exit | launch → 1st iteration (s) | launch → compiled learner (s) | "
            "launch → end (s) | env steps/s | steady ms / iteration | mean reward (last) |")
    rows = [head, "|---" * (head.count(" | ") + 1) + "|"]

    for path in sorted(folder.glob(f"*-{UNPATCHED}.json")):
        ours_path = path.with_name(path.name.removesuffix(f"-{UNPATCHED}.json") + ".json")
        if not ours_path.is_file():
            continue
        pair = [json.loads(p.read_text(encoding="utf-8")) for p in (ours_path, path)]
        if pair[0]["command"][1:] != pair[1]["command"][1:]:
            raise ValueError(f"{ours_path.name} and {path.name} ran different command lines")
        for run in pair:
            rows.append(f"| {ours_path.stem} | {run.get('build', '–')} | {run['exit_code']} | "
                        f"{_cell(run.get('launch_to_first_iteration_s'))} | "
                        f"{_cell(run.get('launch_to_compiled_s'))} | "
                        f"{_cell(run['launch_to_end_s'])} | {_cell(run.get('env_steps_per_s_first_to_last'), 0)} | "
                        f"{_cell(run.get('steady_iter_ms_mean'), 2)} | {_cell(run.get('reward_mean_last'))} |")
        ours, ref = pair
        if ours["exit_code"] == 0 and ref["exit_code"] == 0 and "error" not in ours and "error" not in ref:
            rows.append(f"| {ours_path.stem} | unpatched ÷ patched | | "
                        f"{ref['launch_to_first_iteration_s'] / ours['launch_to_first_iteration_s']:.2f}× | | "
                        f"**{ref['launch_to_end_s'] / ours['launch_to_end_s']:.2f}×** | "
                        f"{ours['env_steps_per_s_first_to_last'] / ref['env_steps_per_s_first_to_last']:.2f}× "
                        "(patched ÷ unpatched) | | |")
    return "\n".join(rows)


@dataclasses.dataclass(frozen=True)
class Build:
    """One side of a comparison: the tree a run starts in, its environment, and the ``uni_rl`` it must import."""

    name: str
    tree: Path
    env: dict[str, str]
    uni_rl: Path


def task_of(overrides: list[str]) -> str:
    """The bench's task key (``g1_walk_flat``) of the ``task=<task>/<owner>`` override, else UniLab's default."""
    named = [o.split("=", 1)[1].split("/")[0] for o in overrides if o.startswith("task=")]
    return named[-1] if named else bench_configs.DEFAULT_TASK


def unpatched_build(patched: Build, args: argparse.Namespace, scratch: Path) -> Build:
    """UniLab 1.3.2 without this project: the pristine tree with the task's assets seeded from ``--assets``, the
    pristine ``uni_rl`` first on the path, the overlay's provenance hook without its packages after it, and neither
    the overlay nor the patched tree. Both folders are the given ones, else the bench's, made once from the pinned
    sdist and wheel, sha256-checked (``bench_driver``)."""
    tree = bench_env.require_unilab_root(args.pristine_tree or bench_driver.prepare_pristine_tree())
    learner = bench_driver.prepare_baseline(args.baseline_uni_rl, None)
    bench_env.ensure_assets(tree, args.assets, task=task_of(args.overrides), synthetic_clip=args.synthetic_motion_clip)
    overlay = args.overlay.resolve()
    dropped = {overlay, (patched.tree / "src").resolve()}
    inherited = [p for p in patched.env.get("PYTHONPATH", "").split(os.pathsep)
                 if p and Path(p).resolve() not in dropped]
    front = [str(p) for p in (learner, provenance_site(overlay, learner, scratch)) if p is not None]
    env = {**patched.env, "PYTHONPATH": os.pathsep.join([*front, str(tree / "src"), *inherited])}
    return Build(UNPATCHED, tree, env, learner / "uni_rl")


def imported_uni_rl(provenance: Path, pid: int) -> str | None:
    """The ``uni_rl`` package file the trainer process ``pid`` imported, from its provenance record in
    ``provenance`` (its collector and helper processes write records of their own there)."""
    path = provenance / f"provenance-{pid}.json"
    if not path.is_file():
        return None
    modules = json.loads(path.read_text(encoding="utf-8")).get("modules", [])
    return next((m["file"] for m in modules if m["name"] == "uni_rl"), None)


def learner_check(build: Build, imported: str | None) -> dict[str, Any]:
    """The record's ``uni_rl`` entry, and an error where the trainer imported another learner than its build's."""
    out: dict[str, Any] = {"build": build.name, "tree": str(build.tree), "uni_rl": imported}
    if imported is None:
        out["error"] = "the trainer left no provenance record naming its uni_rl"
    elif build.uni_rl.resolve() not in Path(imported).resolve().parents:
        out["error"] = f"the trainer imported uni_rl from {imported}, not from {build.uni_rl}"
    return out


def measure(build: Build, args: argparse.Namespace, label: str) -> bool:
    """One whole run of ``build``: its record and log written into ``--out``; whether it ran and ended well."""
    with tempfile.TemporaryDirectory(prefix="whole-run-provenance-") as provenance:
        env = {**build.env, "FLASHSAC_PROVENANCE_DIR": provenance}
        record, lines = run(build.tree, args.overrides, env, args.timeout_s)
        checked = learner_check(build, imported_uni_rl(Path(provenance), record["pid"]))
    if "error" in checked and "error" not in record:
        record["error"] = checked["error"]
    record.update({k: v for k, v in checked.items() if k != "error"}, label=label,
                  environment={item.partition("=")[0]: item.partition("=")[2] for item in args.env})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{label}.json").write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    with gzip.open(args.out / f"{label}-log.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print(json.dumps({k: record.get(k) for k in ("label", "build", "exit_code", "launch_to_first_iteration_s",
                                                   "launch_to_compiled_s", "launch_to_end_s", "steady_iter_ms_mean",
                                                   "steady_env_steps_per_s", "reward_mean_last",
                                                   "error")}), flush=True)
    return record["exit_code"] == 0 and "error" not in record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="the applied UniLab tree's root")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--label", default="whole-run")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the run's environment")
    parser.add_argument("--timeout-s", type=float, help="SIGTERM to the trainer after this many seconds")
    parser.add_argument("--overlay", type=Path, default=bench_env.PROJECT_DIR / "overlay",
                        help="the overlay whose uni_rl the patched run imports")
    parser.add_argument("--beside", choices=(UNPATCHED,),
                        help="then the same run on UniLab 1.3.2 without the project")
    parser.add_argument("--assets", help="--beside: the task's assets for the pristine tree (as UNILAB_ASSETS)")
    parser.add_argument("--synthetic-motion-clip", action="store_true",
                        help="--beside: the synthetic motion clip in the pristine tree where it has none")
    parser.add_argument("--pristine-tree", type=Path, help="--beside: UniLab 1.3.2's unpatched tree (default: the "
                        "bench's, unpacked from the pinned sdist)")
    parser.add_argument("--baseline-uni-rl", type=Path, help="--beside: a folder holding unilab-rl 1.3.2's pristine "
                        "uni_rl/ (default: the bench's, extracted from the pinned wheel)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (after --)")
    args = parser.parse_args()
    env = dict(os.environ)
    for item in args.env:
        key, _, value = item.partition("=")
        env[key] = value
    patched = Build("patched", args.tree.resolve(), env, args.overlay.resolve() / "uni_rl")
    with tempfile.TemporaryDirectory(prefix="whole-run-") as scratch:
        try:
            builds = [patched, *([unpatched_build(patched, args, Path(scratch))] if args.beside else [])]
        except BenchSetupError as exc:
            print(f"whole_run: error: {exc}", file=sys.stderr)
            return 2
        ended = [measure(build, args, args.label if build is patched else f"{args.label}-{build.name}")
                 for build in builds]
    return 0 if all(ended) else 1


if __name__ == "__main__":
    sys.exit(main())
