#!/usr/bin/env python3
"""`make bench-parity`: does the optimized learner learn as well as the unpatched one?

The patched defaults and the unpatched unilab-rl 1.3.2 learner each train the same
G1 task on the same seeds (alternating, seed by seed). The report gives reward curves
(PNG), each configuration's final mean reward per seed and its spread, and a verdict:
the patched learner passes when its mean final reward is not below the baseline's by
more than two standard errors. A failing verdict exits non-zero: a learner that is
fast but learns worse is a bug to find, not a number to hide.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_driver  # noqa: E402
import bench_env  # noqa: E402
import bench_report  # noqa: E402
from bench_env import BenchSetupError  # noqa: E402

PROG = "bench_parity"
CANDIDATE, BASELINE = "patched-default", "baseline-1.3.2"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--unilab-root", type=Path, default=Path(os.environ.get("UNILAB", bench_env.DEFAULT_UNILAB_ROOT)))
    p.add_argument("--iterations", type=int, help="default 1000 (QUICK: 60)")
    p.add_argument("--seeds", type=lambda t: [int(x) for x in t.split(",") if x.strip()], default=[1, 2, 3])
    p.add_argument("--final-last", type=int, default=100, help="final reward = mean of the last N logged rewards")
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--replay-buffer-n", type=int, default=32)
    p.add_argument("--learning-starts", type=int, default=8)
    p.add_argument("--updates-per-step", type=int, default=2)
    p.add_argument("--policy-frequency", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="smoke mode: 60 iterations, 2 seeds (no verdict meaning)")
    p.add_argument("--results-root", type=Path, default=bench_env.PROJECT_DIR / "results")
    p.add_argument("--machine")
    p.add_argument("--assets", type=Path, default=Path(os.environ["UNILAB_ASSETS"]) if os.environ.get("UNILAB_ASSETS") else None)
    p.add_argument("--skip-verify", action="store_true", help="development only: do not require the applied state")
    p.add_argument("--overlay", type=Path, default=bench_env.OVERLAY_DIR)
    p.add_argument("--baseline-uni-rl", type=Path)
    p.add_argument("--baseline-wheel", type=Path)
    p.add_argument("--timeout-s", type=float)
    p.add_argument("--live-panel", choices=("auto", "always", "never"), default="auto")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="only rebuild DIR's report from the run JSONs in it (runs nothing)")
    return p


def write_report(out: Path, *, final_last: int, quick: bool = False) -> dict:
    """summary.md, parity.json and rewards.png of a parity folder, from the run JSONs it holds.

    Everything in the header comes from the runs themselves, so the report can be rebuilt
    (``--report DIR``) over the runs of several invocations copied into one folder, e.g.
    seeds trained concurrently on one GPU.
    """
    runs = bench_report.load_runs(out)
    summary = bench_report.parity_summary(runs, last=final_last)
    verdict = bench_report.parity_verdict(summary, candidate=CANDIDATE, baseline=BASELINE)
    bench_report.plot_rewards(runs, out / "rewards.png")
    (out / "parity.json").write_text(json.dumps({"summary": summary, "verdict": verdict}, indent=2) + "\n")
    configs = [run.get("training_config") or {} for run in runs]
    seeds = sorted({c.get("seed") for c in configs if c.get("seed") is not None})
    schedules = sorted({str(c.get("schedule")) for c in configs})
    iterations = sorted({run.get("iterations") for run in runs if run.get("iterations") is not None})
    envs = sorted({c.get("num_envs") for c in configs if c.get("num_envs") is not None})
    batch = sorted({c.get("batch_size") for c in configs if c.get("batch_size") is not None})
    text = (f"# FlashSAC learning parity: {out.name}\n\n"
            f"{'/'.join(map(str, iterations))} iterations, seeds {seeds}, schedule {', '.join(schedules)}, "
            f"{'/'.join(map(str, envs))} envs, batch {'/'.join(map(str, batch))}."
            f"{' QUICK mode: smoke run, the verdict means nothing.' if quick else ''}\n\n"
            f"{bench_report.parity_markdown(summary, verdict, last=final_last)}\n\n"
            f"![reward curves](rewards.png)\n\n## Environment\n\n{bench_report.environment_section(runs)}\n\n"
            f"## Failures\n\n{bench_report.failures_section(runs)}\n")
    (out / "summary.md").write_text(text, encoding="utf-8")
    print("\n" + bench_report.parity_markdown(summary, verdict, last=final_last))
    print(f"[parity] {out / 'summary.md'}")
    return verdict


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.report is not None:
        if not bench_report.load_runs(args.report):
            print(f"{PROG}: error: no run JSON under {args.report}", file=sys.stderr)
            return 1
        return 0 if write_report(args.report, final_last=args.final_last).get("passed") else 3
    if args.quick:
        args.seeds, args.final_last = args.seeds[:2], 20
    args.iterations = args.iterations or (60 if args.quick else 1000)
    try:
        device = bench_env.require_cuda()
        root = bench_env.require_unilab_root(args.unilab_root)
        state = None if args.skip_verify else bench_env.patchset_status(root, args.overlay)
        if state is not None:
            bench_env.require_applied(state)
        bench_env.ensure_assets(root, args.assets)
        baseline = bench_driver.prepare_baseline(args.baseline_uni_rl, args.baseline_wheel)
    except (BenchSetupError, subprocess.CalledProcessError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    out = bench_driver.results_dir(args.results_root, args.machine or bench_driver.machine_slug(device["gpu"]),
                                   "-parity-quick" if args.quick else "-parity")
    logs_root = bench_env.PROJECT_DIR / "work" / "bench-logs" / out.name
    common = ["--unilab-root", str(root), "--backend", "mujoco", "--iterations", str(args.iterations),
              "--summary-last", str(max(1, args.iterations // 2)), "--num-envs", str(args.num_envs),
              "--batch-size", str(args.batch_size), "--replay-buffer-n", str(args.replay_buffer_n),
              "--learning-starts", str(args.learning_starts), "--policy-frequency", str(args.policy_frequency),
              "--overlay", str(args.overlay), "--baseline-uni-rl", str(baseline), "--live-panel", args.live_panel]
    if state is not None:
        common.append("--require-applied")
    if args.timeout_s:
        common += ["--timeout-s", str(args.timeout_s)]
    specs = [bench_driver.RunSpec(config=c, updates_per_step=args.updates_per_step, seed=s)
             for i, s in enumerate(args.seeds)
             for c in ((CANDIDATE, BASELINE) if i % 2 == 0 else (BASELINE, CANDIDATE))]
    progress = bench_driver.Progress(total=len(specs))
    failures = 0
    for index, spec in enumerate(specs, 1):
        stem = f"{index:02d}-{spec.config}-seed{spec.seed}"
        output = out / "runs" / f"{stem}.json"
        code = bench_driver.execute(
            bench_driver.single_run_argv(spec, common=common, output=output, run_dir=logs_root / stem),
            progress, f"{spec.config}, seed {spec.seed}")
        bench_driver.ensure_record(output, spec, f"{args.updates_per_step}/?/?", code)
        failures += code != 0
    verdict = write_report(out, final_last=args.final_last, quick=args.quick)
    if failures:
        return 1
    return 0 if verdict.get("passed") else 3


if __name__ == "__main__":
    raise SystemExit(main())
