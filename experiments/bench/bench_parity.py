#!/usr/bin/env python3
"""`make bench-parity`: does the optimized learner learn as well as the unpatched one, and can the check fail?

Arms: the baseline (unpatched unilab-rl 1.3.2 on the pristine UniLab tree, what a user has without us), the
patched defaults, and the negative control (bench_configs.NEGATIVE_CONTROL: learning rates ÷10), each on the
same seeds, alternating arm order seed by seed. Every candidate arm is tested for equivalence with the baseline
(parity_stats: area under the reward curve and final-window mean, a margin fixed in advance). The check is
trusted only if it passes the patched defaults *and* fails the negative control. Any further arm (``--arms``, e.g.
a learner switch before it becomes a default) must pass; the exit status is 0 only when the check is trusted and
every further arm passed. A study of one further arm reads the baseline, the patched defaults and the negative
control from a committed study of the same setting, seeds and horizon (the ``parity`` table pools folders).
The report (summary.md, parity.json, rewards.png) is written from the run JSONs, so ``--report DIR`` rebuilds it
over runs of several invocations (seeds trained concurrently) copied into one folder.

``--task`` trains another of UniLab's FlashSAC tasks (``bench_configs.TASKS``) on its CPU MuJoCo owner, where the
baseline runs (the pristine tree has no other collector), with the same arms: the negative control divides the
learning rates of the one flashsac config every task shares. Its runs go to ``parity-<task>`` unless ``--study``
names another study, so that two tasks' runs never pool; an unknown task is one line before CUDA is looked for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean, stdev

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_driver  # noqa: E402
import bench_env  # noqa: E402
import bench_report  # noqa: E402
import parity_stats  # noqa: E402
import run_files  # noqa: E402
from bench_configs import CONFIGS, DEFAULT_TASK, NEGATIVE_CONTROL, SETTINGS, TASKS, task_refusal  # noqa: E402
from bench_env import BenchSetupError  # noqa: E402

PROG = "bench_parity"
BASELINE = "baseline-1.3.2"
#: Candidate arm → the verdict a trustworthy check gives it.
EXPECTED: dict[str, bool] = {"patched-default": True, NEGATIVE_CONTROL: False}
#: Final window: the last 500 logged rewards (of 3000 iterations), where the curves have flattened.
FINAL_LAST = 500
#: The physics every parity run steps: the baseline's (the pristine tree's host collector steps CPU MuJoCo).
SIM = "mujoco"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--unilab-root", type=Path, default=Path(os.environ.get("UNILAB", bench_env.DEFAULT_UNILAB_ROOT)))
    p.add_argument("--task", default=DEFAULT_TASK,
                   help=f"the FlashSAC task every arm trains on its {SIM} owner (known: {', '.join(TASKS)}; "
                        f"default: {DEFAULT_TASK})")
    p.add_argument("--synthetic-motion-clip", action="store_true",
                   help="a task that tracks a motion clip: where a tree has none, write the synthetic one "
                        "(scripts/offline/motion_clip.py), never over a clip that is there")
    p.add_argument("--iterations", type=int, help="default 3000 (QUICK: 60)")
    p.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",") if x.strip()], default=[1, 2, 3, 4, 5])
    p.add_argument("--arms", type=lambda t: [x for x in t.split(",") if x.strip()],
                   default=[BASELINE, *EXPECTED], help=f"configurations to train (default: {BASELINE},"
                   f"{','.join(EXPECTED)}); any of bench_configs.CONFIGS")
    p.add_argument("--final-last", type=int, default=FINAL_LAST, help="final reward = mean of the last N logged rewards")
    p.add_argument("--setting", choices=sorted(SETTINGS), default="report",
                   help="the named setting every run trains at (default: the report's; unilab-default: the tree's "
                        "task config, no overrides); the options below override single values of it")
    for option in ("--num-envs", "--batch-size", "--replay-buffer-n", "--learning-starts", "--updates-per-step",
                   "--policy-frequency"):
        p.add_argument(option, type=int)
    p.add_argument("--quick", action="store_true", help="smoke mode: 60 iterations, 2 seeds (no verdict meaning)")
    p.add_argument("--results-root", type=Path, default=bench_env.PROJECT_DIR / "results")
    p.add_argument("--machine", type=bench_driver.name_part(bench_driver.MACHINE_TOKEN, "--machine"),
                   help="<machine> of results/<date>-<machine>-<study>/ (default: as make bench names it)")
    p.add_argument("--study", type=bench_driver.name_part(bench_driver.STUDY_NAME, "--study"), default="parity",
                   help="<study> of results/<date>-<machine>-<study>/ (default: parity; for a task other than "
                        f"{DEFAULT_TASK} parity-<task>, underscores as dashes; QUICK adds -quick)")
    p.add_argument("--assets", type=Path, default=Path(os.environ["UNILAB_ASSETS"]) if os.environ.get("UNILAB_ASSETS") else None)
    p.add_argument("--skip-verify", action="store_true", help="development only: do not require the applied state")
    p.add_argument("--overlay", type=Path, default=bench_env.OVERLAY_DIR)
    p.add_argument("--baseline-uni-rl", type=Path)
    p.add_argument("--baseline-wheel", type=Path)
    p.add_argument("--timeout-s", type=float)
    p.add_argument("--live-panel", choices=("auto", "always", "never"), default="auto")
    p.add_argument("--list-arms", action="store_true", help="print the default arms (comma-separated) and exit")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="only rebuild DIR's report from the run JSONs in it (runs nothing)")
    return p


def task_args(args: argparse.Namespace) -> list[str]:
    """The single-run options every arm's run takes for the task: its owner on ``SIM``, and the synthetic clip
    where asked. Raises BenchSetupError (one line) for a task the bench cannot train there."""
    reason = task_refusal(args.task, SIM)
    if reason is not None:
        raise BenchSetupError(f"TASK={args.task}: {reason}")
    return ["--task", args.task, "--backend", SIM, *(["--synthetic-motion-clip"] if args.synthetic_motion_clip else [])]


def study(args: argparse.Namespace) -> str:
    """<study> of the results folder: the task's own parity study unless ``--study`` names another."""
    name = TASKS[args.task].study_of("parity") if args.study == "parity" else args.study
    return f"{name}-quick" if args.quick else name


def shape_overrides(args: argparse.Namespace) -> list[str]:
    """The single-run options of the values given explicitly; the rest come from ``--setting`` (the single-run
    script fills them from it, and leaves the tree's value where the setting has none)."""
    return [item for key in ("num_envs", "batch_size", "replay_buffer_n", "learning_starts", "policy_frequency")
            if getattr(args, key) is not None for item in (f"--{key.replace('_', '-')}", str(getattr(args, key)))]


def run_defaults(args: argparse.Namespace) -> None:
    """The values a training invocation fills in: QUICK's seeds and window, the iterations."""
    if args.quick:
        args.seeds, args.final_last = args.seeds[:2], 20
    args.iterations = args.iterations or (60 if args.quick else 3000)


def common_args(args: argparse.Namespace, root: Path, baseline: Path, pristine: Path | None, *,
                applied: bool) -> list[str]:
    """The single-run options every arm's run shares: the trees, the task, the horizon, the setting's values."""
    common = ["--unilab-root", str(root), *task_args(args), "--iterations", str(args.iterations),
              "--summary-last", str(max(1, args.iterations // 2)), *shape_overrides(args),
              "--overlay", str(args.overlay), "--baseline-uni-rl", str(baseline), "--live-panel", args.live_panel]
    if pristine is not None:
        common += ["--pristine-unilab-root", str(pristine)]
    if applied:
        common.append("--require-applied")
    if args.timeout_s:
        common += ["--timeout-s", str(args.timeout_s)]
    return common


def arm_specs(args: argparse.Namespace) -> list[bench_driver.RunSpec]:
    """Every arm on every seed, the arms' order rotated seed by seed (drift of the machine hits every arm alike)."""
    return [bench_driver.RunSpec(config=c, updates_per_step=args.updates_per_step, setting=args.setting, seed=s)
            for i, s in enumerate(args.seeds)
            for c in args.arms[i % len(args.arms):] + args.arms[:i % len(args.arms)]]


def parity_report(runs: list[dict], *, final_last: int) -> dict:
    """Per-arm metrics and, per candidate arm present, its equivalence verdict and the one it should get.

    ``check_trusted``: the patched defaults passed and the negative control failed (``EXPECTED``);
    ``passed``: that, and every further arm passed as well."""
    metrics = parity_stats.arm_metrics(runs, final_last=final_last)
    verdicts = {arm: {**parity_stats.verdict(metrics[arm], metrics.get(BASELINE, {})),
                      "expected": EXPECTED.get(arm, True)}
                for arm in metrics if arm != BASELINE}
    as_expected = {arm: v["passed"] == v["expected"] for arm, v in verdicts.items()}
    trusted = set(EXPECTED) <= set(verdicts) and all(as_expected[arm] for arm in EXPECTED)
    return {"metrics": metrics, "verdicts": verdicts, "final_last": final_last, "check_trusted": trusted,
            "passed": trusted and all(as_expected.values())}


def table(folders: Path | Sequence[Path]) -> str:
    """The parity table and verdicts of the runs of a parity folder, or of several pooled (readme_tables kind
    ``parity``): a study of one further arm beside the committed study that trained the others."""
    return report_markdown(parity_report(bench_report.load_pooled_runs(folders), final_last=FINAL_LAST))


def report_markdown(report: dict) -> str:
    """The metrics table and one verdict line per candidate arm."""
    last = report["final_last"]
    lines = [f"| arm | seeds | area under curve per env step, per seed | mean ± std | final (last {last}), per seed "
             "| mean ± std |", "|---|---|---|---|---|---|"]
    for arm, seeds in report["metrics"].items():
        cells = []
        for metric in parity_stats.METRICS:
            values = [m[metric] for m in seeds.values()]
            spread = f"{fmean(values):.3f} ± {stdev(values):.3f}" if len(values) > 1 else \
                f"{values[0]:.3f}"
            cells += [", ".join(f"{seed}: {m[metric]:.3f}" for seed, m in seeds.items()), spread]
        lines.append(f"| {CONFIGS[arm].label if arm in CONFIGS else arm} | {len(seeds)} | {' | '.join(cells)} |")
    lines.append("")
    for arm, v in report["verdicts"].items():
        lines.append(f"- **{arm}: {'PASS' if v['passed'] else 'FAIL'}** (a trustworthy check gives "
                     f"{'PASS' if v['expected'] else 'FAIL'}): {v['reason']}")
    lines.append(f"\n**The check {'is' if report['check_trusted'] else 'is NOT'} trusted** "
                 "(it must pass the patched defaults and fail the negative control).")
    further = [arm for arm in report["verdicts"] if arm not in EXPECTED]
    if further:
        lines.append(f"\n**{'Every further arm passed' if report['passed'] else 'Not every further arm passed'}** "
                     f"({', '.join(further)}).")
    return "\n".join(lines)


def write_report(out: Path, *, final_last: int, quick: bool = False) -> dict:
    """summary.md, parity.json and rewards.png of a parity folder, from the run JSONs it holds.

    Everything in the header comes from the runs themselves, so the report can be rebuilt
    (``--report DIR``) over the runs of several invocations copied into one folder, e.g.
    seeds trained concurrently on one GPU.
    """
    runs = bench_report.load_runs(out)
    report = parity_report(runs, final_last=final_last)
    bench_report.plot_rewards(runs, out / "rewards.png")
    (out / "parity.json").write_text(json.dumps(report, indent=2) + "\n")
    configs = [run.get("training_config") or {} for run in runs]
    tasks = sorted({str(run.get("task") or DEFAULT_TASK) for run in runs})
    labels = ", ".join(TASKS[t].label if t in TASKS else t for t in tasks)
    physics = " and ".join(sorted({"MuJoCo Warp" if run.get("backend") == "mjwarp" else "CPU MuJoCo" for run in runs}))
    seeds = sorted({c.get("seed") for c in configs if c.get("seed") is not None})
    schedules = sorted({str(c.get("schedule")) for c in configs})
    iterations = sorted({run.get("iterations") for run in runs if run.get("iterations") is not None})
    envs = sorted({c.get("num_envs") for c in configs if c.get("num_envs") is not None})
    batch = sorted({c.get("batch_size") for c in configs if c.get("batch_size") is not None})
    text = (f"# FlashSAC learning parity: {out.name}\n\n"
            f"{labels} ({physics}), {'/'.join(map(str, iterations))} iterations, seeds {seeds}, schedule {', '.join(schedules)}, "
            f"{'/'.join(map(str, envs))} envs, batch {'/'.join(map(str, batch))}. Test (fixed before the runs, "
            f"`experiments/bench/parity_stats.py`): {100 * (1 - 2 * parity_stats.ALPHA):.0f}% Welch interval of "
            f"candidate − baseline inside ±{100 * parity_stats.MARGIN_FRACTION:.0f}% of the baseline's learning "
            f"gain, for both metrics."
            f"{' QUICK mode: smoke run, the verdict means nothing.' if quick else ''}\n\n"
            f"{report_markdown(report)}\n\n"
            f"![reward curves](rewards.png)\n\n## Environment\n\n{bench_report.environment_section(runs)}\n\n"
            f"## Failures\n\n{bench_report.failures_section(runs)}\n")
    (out / "summary.md").write_text(text, encoding="utf-8")
    print("\n" + report_markdown(report))
    print(f"[parity] {out / 'summary.md'}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_arms:
        print(",".join(args.arms))
        return 0
    if args.report is not None:
        if not bench_report.load_runs(args.report):
            print(f"{PROG}: error: no run JSON under {args.report}", file=sys.stderr)
            return 1
        return 0 if write_report(args.report, final_last=args.final_last)["passed"] else 3
    run_defaults(args)
    unknown = [arm for arm in args.arms if arm not in CONFIGS]
    if unknown:
        print(f"{PROG}: error: unknown arm {', '.join(unknown)} (bench_configs.CONFIGS)", file=sys.stderr)
        return 2
    try:
        task_args(args)
        device = bench_env.require_cuda()
        root = bench_env.require_unilab_root(args.unilab_root)
        state = None if args.skip_verify else bench_env.patchset_status(root, args.overlay)
        if state is not None:
            bench_env.require_applied(state)
        assets = {"task": args.task, "synthetic_clip": args.synthetic_motion_clip}
        bench_env.ensure_assets(root, args.assets, **assets)
        baseline = bench_driver.prepare_baseline(args.baseline_uni_rl, args.baseline_wheel)
        pristine = None
        if any(CONFIGS[arm].tree == "pristine" for arm in args.arms):
            pristine = bench_env.require_unilab_root(bench_driver.prepare_pristine_tree())
            bench_env.ensure_assets(pristine, args.assets, **assets)
    except (BenchSetupError, subprocess.CalledProcessError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    out = bench_driver.results_dir(args.results_root, args.machine or bench_driver.this_machine(device["gpu"]),
                                   study(args))
    logs_root = bench_env.PROJECT_DIR / "work" / "bench-logs" / out.name
    common = common_args(args, root, baseline, pristine, applied=state is not None)
    specs = arm_specs(args)
    progress = bench_driver.Progress(total=len(specs))
    failures = 0
    for index, spec in enumerate(specs, 1):
        stem = f"{index:02d}-{spec.config}-seed{spec.seed}"
        output = out / "runs" / f"{stem}{run_files.STORED}"
        argv = bench_driver.single_run_argv(spec, common=common, output=output, run_dir=logs_root / stem)
        code = bench_driver.execute(argv, progress, f"{spec.config}, seed {spec.seed}")
        if code != 0 and CONFIGS[spec.config].reference == "upstream":
            code = bench_driver.retry_cold_reference(argv, output, progress, f"{spec.config}, seed {spec.seed}")
        updates = args.updates_per_step or SETTINGS[args.setting].schedules[0]
        bench_driver.ensure_record(output, spec, f"{updates or 'tree'}/?/?", code)
        failures += code != 0
    report = write_report(out, final_last=args.final_last, quick=args.quick)
    if failures:
        return 1
    return 0 if report["passed"] else 3


if __name__ == "__main__":
    raise SystemExit(main())
