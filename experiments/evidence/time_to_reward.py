#!/usr/bin/env python3
"""Time to reward: wall-clock minutes from launch until a run's reward first reaches a threshold fixed in advance.

The headline a user wants is not milliseconds per iteration but how soon the policy is good. Per arm (unpatched
unilab-rl 1.3.2, upstream 1.4.0, the patched defaults compiled before tick 0 and compiled behind), from the same
runs:

* **Threshold** (fixed before the runs): ``THRESHOLD_FRACTION`` (80 %) of the baseline's plateau, the mean over
  the parity check's baseline seeds of their final-window reward (the runs of ``--parity``, by default the
  TTR folder's sibling ``parity/``; another study's parity folder is recorded in ttr.json, relative to the
  results folder, so that a later study keeps the threshold fixed before it). Where no parity study exists at
  the runs' setting (UniLab's defaults, whose unpatched learner takes about 200 ms an iteration), the threshold
  is the reward a committed unpatched 1.3.2 run at that setting had reached at a given iteration (its trailing
  mean there; ``--threshold-run RUN --threshold-iteration N``, recorded in ttr.json the same way): the time each
  arm takes to learn as far as the unpatched learner had after N iterations.
* **Reached**: the first iteration whose trailing mean over ``SMOOTHING`` (50) logged rewards is at or above the
  threshold; its time is the run's own clock (``rows_all[].wall_s``: seconds since the trainer process started,
  so the cold start and compile a user waits through are included).
* Wall clocks compare only between runs that had the same machine: ``device_evidence.sh ttr`` pins each arm to
  its own block of cores, all at once, and the table states the CPUs each run could use.
* Each row names the physics and collector its run recorded: one study may train an arm on CPU MuJoCo (the parity
  harness's) and on MuJoCo Warp with the device collector (the tree's default for that physics).

Writes ttr.json, ttr.md and the two plots (reward vs env steps, reward vs wall clock) into the TTR folder.

Called by ``tables/readme_tables.py`` (the ``ttr`` tables), by ``device/device_evidence.sh ttr``
(``--list-arms``) and by hand on a folder of runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_parity  # noqa: E402
import bench_report  # noqa: E402
import parity_stats  # noqa: E402
from bench_configs import CONFIGS  # noqa: E402

PROG = "time_to_reward"
BASELINE = bench_parity.BASELINE
#: Every arm a TTR table shows, in its order.
ARMS = (BASELINE, "upstream-1.4.0", "patched-default", "compile-behind")
#: The arms a study runs (``--list-arms``): three, each on its own 5 of a 16-core machine's cores. The learner
#: compiled before tick 0 and compiled behind (the default with one CUDA rank); upstream 1.4.0's is committed.
STUDY_ARMS = (BASELINE, "patched-default", "compile-behind")
THRESHOLD_FRACTION = 0.8
SMOOTHING = 50


def threshold_from_parity(parity_folder: Path) -> float:
    """``THRESHOLD_FRACTION`` of the baseline arm's plateau (mean final-window reward over its seeds' runs)."""
    metrics = parity_stats.arm_metrics(bench_report.load_runs(parity_folder), final_last=bench_parity.FINAL_LAST)
    seeds = metrics.get(BASELINE) or {}
    if not seeds:
        raise ValueError(f"{parity_folder} has no completed {BASELINE} run")
    return THRESHOLD_FRACTION * fmean(m["final"] for m in seeds.values())


def threshold_from_run(run_path: Path, iteration: int) -> float:
    """The trailing mean (``SMOOTHING`` logged rewards) of a completed unpatched 1.3.2 run at ``iteration``."""
    run = bench_report.read_run(run_path)
    if not isinstance(run, dict) or run.get("config") != BASELINE or run.get("status") != "completed":
        raise ValueError(f"{run_path} is not a completed {BASELINE} run")
    window = [float(row["reward"]) for row in run.get("rows_all") or []
              if row.get("reward") is not None and row["step"] <= iteration][-SMOOTHING:]
    if len(window) < SMOOTHING:
        raise ValueError(f"{run_path} has fewer than {SMOOTHING} logged rewards up to iteration {iteration}")
    return fmean(window)


def crossing(run: dict[str, Any], threshold: float) -> dict[str, Any] | None:
    """The first logged iteration whose trailing mean reward reaches ``threshold``, with its clock; None if never."""
    window: list[float] = []
    for row in run.get("rows_all") or []:
        if row.get("reward") is None:
            continue
        window = [*window[-(SMOOTHING - 1):], float(row["reward"])]
        if len(window) == SMOOTHING and fmean(window) >= threshold:
            return {"iteration": row["step"], "wall_s": row["wall_s"]}
    return None


def env_steps_per_iteration(run: dict[str, Any]) -> int:
    rate = run.get("env_steps_per_s") or {}
    return int(rate.get("envs") or run["training_config"]["num_envs"]) * int(rate.get("ranks") or 1)


def arm_rows(runs: Sequence[dict[str, Any]], threshold: float) -> list[dict[str, Any]]:
    """One row per completed run of an arm: when it reached the threshold, and its whole run."""
    rows = []
    for run in runs:
        if run.get("status") != "completed" or run.get("config") not in ARMS:
            continue
        hit = crossing(run, threshold)
        steps = env_steps_per_iteration(run)
        # A run that died first (upstream 1.4.0 on a cold compile cache) cost its user that attempt's time too.
        lost_s = sum(a.get("wall_s") or 0.0 for a in run.get("earlier_attempts") or [])
        rows.append({
            "arm": run["config"], "physics": run.get("backend") or "mujoco", "collector": run.get("collector") or "host",
            "seed": run["training_config"].get("seed"), "cpus": run.get("cpus_usable"),
            "iteration": hit and hit["iteration"], "env_steps": hit and hit["iteration"] * steps,
            "minutes": hit and (lost_s + hit["wall_s"]) / 60, "failed_attempts_s": lost_s,
            "run_minutes": run["rows_all"][-1]["wall_s"] / 60,
            "iterations": run.get("iterations"), "startup_s": run["rows_all"][0]["wall_s"],
            "training_minutes": hit and (hit["wall_s"] - run["rows_all"][0]["wall_s"]) / 60,
        })
    return sorted(rows, key=lambda r: (ARMS.index(r["arm"]), r["physics"] != "mujoco", r["collector"], r["seed"] or 0))


PLATEAU_RULE = f"{100 * THRESHOLD_FRACTION:.0f}% of the baseline's plateau"


def markdown(rows: Sequence[dict[str, Any]], threshold: float, rule: str = PLATEAU_RULE) -> str:
    """The time-to-reward table, with each arm's speed-up over the baseline; ``rule``: how the threshold was fixed."""
    base = [r["minutes"] for r in rows if r["arm"] == BASELINE and r["minutes"] is not None]
    lines = [f"Threshold: reward {threshold:.3f} ({rule}), trailing mean over {SMOOTHING} iterations.", "",
             "| arm | physics · collector | seed | CPUs | reached at iteration | env steps | minutes from launch "
             "| × faster than 1.3.2 | of which failed attempts (s) | first iteration at (s) "
             "| minutes from first iteration | whole run (min) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speedup = f"{fmean(base) / r['minutes']:.2f}×" if base and r["minutes"] else "–"
        reached = "never" if r["iteration"] is None else f"{r['iteration']}"
        minutes = "–" if r["minutes"] is None else f"{r['minutes']:.2f}"
        training = "–" if r["training_minutes"] is None else f"{r['training_minutes']:.2f}"
        lines.append(f"| {CONFIGS[r['arm']].label} | {bench_report.physics_label(r['physics'])} · {r['collector']} | "
                     f"{r['seed']} | {r['cpus'] or '?'} | {reached} | "
                     f"{r['env_steps'] or '–'} | {minutes} | "
                     f"{speedup} | {r['failed_attempts_s']:.0f} | {r['startup_s']:.0f} | {training} | {r['run_minutes']:.2f} |")
    return "\n".join(lines)


def plot(runs: Sequence[dict[str, Any]], threshold: float, folder: Path) -> None:
    """reward vs env steps and reward vs wall-clock minutes, one line per run, the threshold dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name, xlabel in (("reward-vs-env-steps.png", "env steps"), ("reward-vs-wall-clock.png", "minutes from launch")):
        fig, ax = plt.subplots(figsize=(9, 5))
        for run in runs:
            if run.get("status") != "completed" or run.get("config") not in ARMS:
                continue
            rows = [row for row in run["rows_all"] if row.get("reward") is not None]
            steps = env_steps_per_iteration(run)
            xs = [row["step"] * steps if xlabel == "env steps" else row["wall_s"] / 60 for row in rows]
            ax.plot(xs, [row["reward"] for row in rows], lw=1.0,
                    label=f"{CONFIGS[run['config']].label}, {bench_report.physics_label(run.get('backend'))} · "
                          f"{run.get('collector') or 'host'}, seed {run['training_config'].get('seed')}")
        ax.axhline(threshold, ls="--", color="grey", lw=1.0, label=f"threshold {threshold:.2f}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean episode reward (collector)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)


def parity_folder_of(folder: Path) -> Path:
    """The parity runs that fix a TTR folder's threshold: its sibling ``parity/``, else the one its ttr.json names."""
    sibling = folder.parent / "parity"
    if sibling.is_dir():
        return sibling
    recorded = json.loads((folder / "ttr.json").read_text(encoding="utf-8"))["parity_folder"]
    return folder.parents[1] / recorded


def run_rule(run: str, iteration: int) -> str:
    return f"unpatched 1.3.2's reward at iteration {iteration} of `{run}`"


def threshold_of(folder: Path) -> tuple[float, str]:
    """A TTR folder's threshold and its rule: from the committed run its ttr.json names, else its parity runs."""
    record = folder / "ttr.json"
    recorded = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
    if "threshold_run" in recorded:
        run, iteration = recorded["threshold_run"], int(recorded["threshold_iteration"])
        return threshold_from_run(folder.parents[1] / run, iteration), run_rule(run, iteration)
    return threshold_from_parity(parity_folder_of(folder)), PLATEAU_RULE


def table(folder: Path) -> str:
    """The time-to-reward table of a TTR folder, with the threshold its study fixed (readme_tables ``ttr``)."""
    threshold, rule = threshold_of(folder)
    return markdown(arm_rows(bench_report.load_runs(folder), threshold), threshold, rule)


def write_report(folder: Path, parity_folder: Path | None = None, *, threshold_run: Path | None = None,
                 threshold_iteration: int | None = None) -> dict[str, Any]:
    """ttr.json, ttr.md and the plots of ``folder``'s runs; the threshold from ``parity_folder``'s runs, or from
    ``threshold_run`` at ``threshold_iteration`` (a committed unpatched run at the runs' own setting)."""
    runs = bench_report.load_runs(folder)
    results = folder.resolve().parents[1]
    if threshold_run is not None:
        if threshold_iteration is None:
            raise ValueError("--threshold-run needs --threshold-iteration")
        threshold = threshold_from_run(threshold_run, threshold_iteration)
        setting = bench_report.read_run(threshold_run).get("setting")
        other = sorted({str(run.get("setting")) for run in runs} - {str(setting)})
        if other:
            raise ValueError(f"the threshold run is at the {setting} setting, some runs at {', '.join(other)}")
        run = str(threshold_run.resolve().relative_to(results))
        fixed = {"threshold_run": run, "threshold_iteration": threshold_iteration}
        rule = run_rule(run, threshold_iteration)
    else:
        parity_folder = parity_folder or folder.parent / "parity"
        threshold, rule = threshold_from_parity(parity_folder), PLATEAU_RULE
        sibling = parity_folder.resolve() == (folder.parent / "parity").resolve()
        fixed = {"threshold_fraction": THRESHOLD_FRACTION,
                 "parity_folder": parity_folder.name if sibling else str(parity_folder.resolve().relative_to(results))}
    rows = arm_rows(runs, threshold)
    report = {"threshold": threshold, **fixed, "smoothing": SMOOTHING, "rows": rows}
    (folder / "ttr.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (folder / "ttr.md").write_text(markdown(rows, threshold, rule) + "\n", encoding="utf-8")
    plot(runs, threshold, folder)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--list-arms", action="store_true", help="print the arms (comma-separated) and exit")
    p.add_argument("folder", type=Path, nargs="?", help="the time-to-reward runs (device_evidence.sh ttr)")
    p.add_argument("--parity", type=Path, help="the parity folder whose baseline runs give the plateau "
                   "(default: FOLDER/../parity)")
    p.add_argument("--threshold-run", type=Path, help="instead of a parity folder: a committed unpatched 1.3.2 run "
                   "at the runs' setting, whose reward at --threshold-iteration is the threshold")
    p.add_argument("--threshold-iteration", type=int)
    args = p.parse_args(argv)
    if args.list_arms:
        print(",".join(STUDY_ARMS))
        return 0
    if args.folder is None:
        p.error("give the TTR folder")
    try:
        if args.parity is not None and args.threshold_run is not None:
            raise ValueError("--parity and --threshold-run are exclusive")
        write_report(args.folder, args.parity, threshold_run=args.threshold_run,
                     threshold_iteration=args.threshold_iteration)
    except (OSError, ValueError, KeyError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    print(table(args.folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
