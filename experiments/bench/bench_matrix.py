#!/usr/bin/env python3
"""`make bench`: every configuration and both upstream references, both schedules, one invocation.

Runs alternate (configuration fastest, schedule next, round slowest; odd rounds in
reverse order) so that drift of the machine during the invocation hits every
configuration alike. Each run is the real UniLab FlashSAC training of
``benchmark_flashsac_training.py``; after each one the Markdown summary and the plot
under ``results/<date>-<machine>-<study>/`` are rewritten, so an interrupted invocation still
leaves its evidence. Exit status is non-zero when any run failed.
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

import bench_configs  # noqa: E402
import bench_driver  # noqa: E402
import bench_env  # noqa: E402
import bench_records  # noqa: E402
import bench_report  # noqa: E402
import run_files  # noqa: E402
from bench_env import BenchSetupError  # noqa: E402

PROG = "bench_matrix"
#: QUICK=1: a smoke run that exercises every configuration, not a measurement.
QUICK = {"iterations": 60, "summary_last": 30}
#: The reference setting of the original report: 1000 iterations, statistics over the last 500.
FULL = {"iterations": 1000, "summary_last": 500}


def _csv_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--unilab-root", type=Path, default=Path(os.environ.get("UNILAB", bench_env.DEFAULT_UNILAB_ROOT)))
    p.add_argument("--task", default=bench_configs.DEFAULT_TASK,
                   help=f"the FlashSAC task every run trains (known: {', '.join(bench_configs.TASKS)}; default: "
                        f"{bench_configs.DEFAULT_TASK}); at unilab-default its own task config decides")
    p.add_argument("--synthetic-motion-clip", action="store_true",
                   help="a task that tracks a motion clip: where a tree has none, write the synthetic one "
                        "(scripts/offline/motion_clip.py), never over a clip that is there")
    p.add_argument("--iterations", type=int, help="default 1000 (QUICK: 60)")
    p.add_argument("--summary-last", type=int, help="default 500 (QUICK: 30)")
    p.add_argument("--settings", type=_csv, default=["report"],
                   help=f"named settings, alternated within each round (known: {','.join(bench_configs.SETTINGS)}; "
                        "default: report)")
    p.add_argument("--schedules", type=_csv_ints,
                   help="updates_per_step values of the settings that take a schedule (report; default: 2,8 = "
                        "2/1/1 and 8/4/4); unilab-default always trains at the tree's own schedule (8/4/4)")
    p.add_argument("--sims", type=_csv, default=["mujoco"],
                   help=f"physics backends, alternated innermost with the configurations (known: "
                        f"{','.join(bench_env.SIMS)}; default: mujoco)")
    p.add_argument("--collectors", type=_csv, default=["host"],
                   help=f"who steps the env, alternated innermost (known: {','.join(bench_configs.COLLECTORS)}; "
                        "default: host); device runs only on mjwarp, the references only with host")
    p.add_argument("--configs", type=_csv, default=list(bench_configs.MATRIX_CONFIGS),
                   help=f"configurations (default: {','.join(bench_configs.MATRIX_CONFIGS)})")
    p.add_argument("--repeats", type=int, default=1, help="rounds over the whole matrix")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--quick", action="store_true", help=f"smoke mode: {QUICK}")
    p.add_argument("--results-root", type=Path, default=bench_env.PROJECT_DIR / "results")
    p.add_argument("--machine", type=bench_driver.name_part(bench_driver.MACHINE_TOKEN, "--machine"),
                   help="<machine> of results/<date>-<machine>-<study>/ (default: the GPU model and, when the "
                        "invocation sees several, their number: h200, h200x2)")
    p.add_argument("--study", type=bench_driver.name_part(bench_driver.STUDY_NAME, "--study"), default="bench",
                   help="<study> of results/<date>-<machine>-<study>/ (default: bench; for a task other than "
                        "g1_walk_flat bench-<task>, underscores as dashes; QUICK adds -quick)")
    p.add_argument("--assets", type=Path, default=Path(os.environ["UNILAB_ASSETS"]) if os.environ.get("UNILAB_ASSETS") else None)
    p.add_argument("--apply", action="store_true", help="run `make apply` before verifying the applied state")
    p.add_argument("--skip-verify", action="store_true",
                   help="development only: do not require `python -m patchset status` (recorded in every run)")
    p.add_argument("--overlay", type=Path, default=bench_env.OVERLAY_DIR)
    p.add_argument("--pristine-unilab-root", type=Path,
                   help="unpatched UniLab 1.3.2 tree for the references (default: made from the pinned sdist "
                        "under work/bench/)")
    p.add_argument("--baseline-uni-rl", type=Path, help="folder with pristine unilab-rl 1.3.2 uni_rl/")
    p.add_argument("--baseline-wheel", type=Path, help="the pinned unilab-rl 1.3.2 wheel to extract it from")
    p.add_argument("--check", action="append", default=[], metavar="NAME=COMMAND",
                   help="a numerics/replay-stability check to run first; its pass flag goes in every run")
    p.add_argument("--checks-json", type=Path,
                   help="instead of --check: results of checks already run on this machine (JSON: name -> {passed, ...})")
    p.add_argument("--timeout-s", type=float, help="per-run limit")
    p.add_argument("--live-panel", choices=("auto", "always", "never"), default="auto")
    return p


def _triples(configs: Sequence[str], sims: Sequence[str], collectors: Sequence[str],
             task: str = bench_configs.DEFAULT_TASK) -> list[tuple[str, str, str]]:
    """(configuration, physics, collector) of one round, in order, without what the table refuses."""
    return [(c, sim, col) for c in configs for sim in sims for col in collectors
            if bench_configs.refusal(c, sim, col, task) is None]


def plan(
    configs: Sequence[str], settings: Sequence[str], repeats: int, schedules: Sequence[int] | None = None,
    sims: Sequence[str] = ("mujoco",), collectors: Sequence[str] = ("host",), task: str = bench_configs.DEFAULT_TASK,
) -> list[bench_driver.RunSpec]:
    """Alternating order: configurations × physics × collectors innermost, then schedule, then setting; reversed
    on odd rounds.

    What ``bench_configs.refusal`` refuses is left out: the references (1.3.2, 1.4.0) are runs of what users
    have without us, on CPU MuJoCo with the host collector; the device-resident collector steps MJWarp only.
    """
    runs: list[bench_driver.RunSpec] = []
    for round_index in range(repeats):
        triples = _triples(configs, sims, collectors, task)
        order = triples if round_index % 2 == 0 else list(reversed(triples))
        for name in settings:
            setting = bench_configs.SETTINGS[name]
            chosen = setting.schedules if None in setting.schedules or schedules is None else tuple(schedules)
            for ups in chosen:
                runs.extend(bench_driver.RunSpec(config=c, updates_per_step=ups, setting=name, sim=sim, collector=col,
                                                 extra=[] if task == bench_configs.DEFAULT_TASK else ["--task", task])
                            for c, sim, col in order)
    return runs


def unplannable(configs: Sequence[str], sims: Sequence[str], collectors: Sequence[str],
                task: str = bench_configs.DEFAULT_TASK) -> str | None:
    """Why a requested collector has no run at all in this invocation (one line), or None.

    A combination the table refuses is dropped quietly when the invocation runs it otherwise (the references
    beside ``SIM=mjwarp``, the device collector beside ``SIM=mujoco``); a collector left with no run means
    the request itself cannot be met, and is refused before any GPU minute is spent.
    """
    unknown = [c for c in collectors if c not in bench_configs.COLLECTORS]
    if unknown:
        return f"unknown collector(s) {unknown}; known: {list(bench_configs.COLLECTORS)}"
    reason = bench_configs.task_refusal(task)
    if reason is not None:
        return f"TASK={task}: {reason}"
    without = [sim for sim in sims if bench_configs.task_refusal(task, sim) is not None]
    if without:
        return f"SIM={','.join(without)}: {bench_configs.task_refusal(task, without[0])}"
    for collector in collectors:
        reason = bench_configs.task_refusal(task, None, collector)
        if reason is not None:
            return f"COLLECTOR={collector}: {reason}"
    configs = [name for name in map(bench_configs.canonical_name, configs) if name in bench_configs.CONFIGS]
    planned = {col for _, _, col in _triples(configs, sims, collectors, task)}
    ours = [c for c in configs if not bench_configs.CONFIGS[c].reference] or configs
    for collector in collectors:
        if collector not in planned and configs and sims:
            reason = bench_configs.refusal(ours[0], sims[0], collector, task)
            return f"COLLECTOR={collector} has no run with SIM={','.join(sims)}: {reason}"
    return None


def _schedule_label(spec: bench_driver.RunSpec) -> str:
    """"2/1/1" for a planned schedule, "tree" where the setting keeps the tree's own."""
    if spec.updates_per_step is None:
        return "tree"
    pf = bench_configs.SETTINGS[spec.setting].value("policy_frequency") or 2
    return bench_configs.Schedule(spec.updates_per_step, pf).label


def available_configs(requested: Sequence[str], unilab_root: Path) -> list[str]:
    """Drop configurations the applied tree cannot run yet (e.g. the whole-cycle graph)."""
    requested = [bench_configs.canonical_name(c) for c in requested]
    unknown = [c for c in requested if c not in bench_configs.CONFIGS]
    if unknown:
        raise BenchSetupError(f"unknown configuration(s) {unknown}; known: {sorted(bench_configs.CONFIGS)}")
    keys = bench_env.flashsac_config_keys(unilab_root)
    kept = []
    for name in requested:
        need = bench_configs.CONFIGS[name].requires_key
        if need and need not in keys:
            print(f"[bench] skipping {name}: the tree's flashsac config has no {need} yet", flush=True)
            continue
        kept.append(name)
    return kept


def prepare(args: argparse.Namespace) -> tuple[dict, Path, list[str], Path | None, dict | None]:
    """All preconditions, before any GPU minute is spent; raises BenchSetupError with the reason."""
    device = bench_env.require_cuda()
    if args.apply:
        custom = args.unilab_root.resolve() != bench_env.DEFAULT_UNILAB_ROOT.resolve()
        subprocess.run(["make", "apply", *([f"UNILAB={args.unilab_root.resolve()}"] if custom else [])],
                       cwd=bench_env.PROJECT_DIR, check=True)
    state = None
    root = bench_env.require_unilab_root(args.unilab_root)
    if not args.skip_verify:
        state = bench_env.patchset_status(root, args.overlay)
        bench_env.require_applied(state)
    unknown = [s for s in args.settings if s not in bench_configs.SETTINGS]
    if unknown:
        raise BenchSetupError(f"unknown setting(s) {unknown}; known: {sorted(bench_configs.SETTINGS)}")
    unknown = [s for s in args.sims if s not in bench_env.SIMS]
    if unknown:
        raise BenchSetupError(f"unknown physics {unknown}; known: {list(bench_env.SIMS)}")
    for sim in args.sims:
        bench_env.require_sim(sim)
    bench_env.ensure_assets(root, args.assets, task=args.task, synthetic_clip=args.synthetic_motion_clip)
    keys = bench_env.flashsac_config_keys(root)
    for name in args.collectors:
        need = bench_configs.COLLECTORS[name].requires_key
        if need and need not in keys:
            raise BenchSetupError(f"COLLECTOR={name} needs {need} in the tree's flashsac config (unilab 0005)")
    configs = available_configs(args.configs, root)
    needs_baseline = any(bench_configs.CONFIGS[c].source == "baseline" for c in configs)
    baseline = bench_driver.prepare_baseline(args.baseline_uni_rl, args.baseline_wheel) if needs_baseline else None
    if any(bench_configs.CONFIGS[c].tree == "pristine" for c in configs):
        args.pristine_unilab_root = bench_env.require_unilab_root(
            args.pristine_unilab_root or bench_driver.prepare_pristine_tree())
        bench_env.ensure_assets(args.pristine_unilab_root, args.assets, task=args.task,
                                synthetic_clip=args.synthetic_motion_clip)
    return device, root, configs, baseline, state


def common_args(args: argparse.Namespace, root: Path, baseline: Path | None, checks_json: Path | None) -> list[str]:
    """Options every run of this invocation shares."""
    common = ["--unilab-root", str(root), "--iterations", str(args.iterations),
              "--summary-last", str(args.summary_last), "--overlay", str(args.overlay), "--live-panel", args.live_panel]
    if args.pristine_unilab_root is not None:
        common += ["--pristine-unilab-root", str(args.pristine_unilab_root)]
    if baseline is not None:
        common += ["--baseline-uni-rl", str(baseline)]
    if not args.skip_verify:
        common.append("--require-applied")
    if checks_json is not None:
        common += ["--checks-json", str(checks_json)]
    if args.timeout_s:
        common += ["--timeout-s", str(args.timeout_s)]
    if args.seed is not None:
        common += ["--seed", str(args.seed)]
    return common


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    defaults = QUICK if args.quick else FULL
    args.iterations = args.iterations or defaults["iterations"]
    args.summary_last = args.summary_last or min(defaults["summary_last"], args.iterations)
    try:
        checks = [bench_driver.parse_check(c) for c in args.check]
        if checks and args.checks_json is not None:
            raise BenchSetupError("--check and --checks-json exclude each other")
        if args.checks_json is not None and bench_records.load_json_object(args.checks_json) is None:
            raise BenchSetupError(f"--checks-json {args.checks_json} is not a readable JSON object")
        reason = unplannable(args.configs, args.sims, args.collectors, args.task)
        if reason is not None:
            raise BenchSetupError(reason)
        device, root, configs, baseline, state = prepare(args)
    except (BenchSetupError, subprocess.CalledProcessError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    cold = bench_driver.inductor_cache_empty()
    study = bench_configs.TASKS[args.task].study if args.study == "bench" else args.study
    out = bench_driver.results_dir(args.results_root, args.machine or bench_driver.this_machine(device["gpu"]),
                                   f"{study}-quick" if args.quick else study)
    logs_root = bench_env.PROJECT_DIR / "work" / "bench-logs" / out.name
    checks_json = None
    if checks:
        checks_json = out / "checks.json"
        checks_json.write_text(json.dumps(bench_driver.run_checks(checks, bench_env.PROJECT_DIR), indent=2) + "\n")
    elif args.checks_json is not None:
        checks_json = out / "checks.json"
        checks_json.write_text(args.checks_json.read_text(encoding="utf-8"), encoding="utf-8")
    common = common_args(args, root, baseline, checks_json)
    specs = plan(configs, args.settings, args.repeats, args.schedules, args.sims, args.collectors, args.task)
    progress = bench_driver.Progress(total=len(specs))
    notes = (f"Task: {args.task} ({bench_configs.TASKS[args.task].label}). "
             f"Invocation: {len(specs)} runs ({', '.join(configs)}) × physics {args.sims} × collectors "
             f"{args.collectors} × settings {args.settings}"
             f"{' × schedules ' + str(args.schedules) if args.schedules else ''}, "
             f"{args.repeats} round(s), alternating. References (1.3.2, 1.4.0) train on the pristine UniLab tree, "
             f"the patched configurations on the applied one. Inductor cache empty at start (cold start): {cold}. "
             f"Applied state verified: {not args.skip_verify}"
             f"{' (series ' + str(state.get('series_sha256')) + ')' if state else ''}."
             f"{' QUICK mode: smoke run, not a measurement.' if args.quick else ''}")
    failures = 0
    print(f"[bench] {len(specs)} runs -> {out}", flush=True)
    for index, spec in enumerate(specs, 1):
        schedule = _schedule_label(spec)
        sim = "" if spec.sim == "mujoco" else f"-{spec.sim}"
        sim += "" if spec.collector == "host" else f"-{spec.collector}"
        stem = f"{index:02d}-{spec.setting}-{spec.config}{sim}-{schedule.replace('/', '-')}"
        output = out / "runs" / f"{stem}{run_files.STORED}"
        argv_run = bench_driver.single_run_argv(spec, common=common, output=output, run_dir=logs_root / stem)
        what = f"{spec.config} on {spec.sim}, {spec.collector} collector, setting {spec.setting}, schedule {schedule}"
        code = bench_driver.execute(argv_run, progress, what)
        if code != 0 and bench_configs.CONFIGS[spec.config].reference == "upstream":
            code = bench_driver.retry_cold_reference(argv_run, output, progress, what)
        bench_driver.ensure_record(output, spec, schedule, code)
        failures += code != 0
        runs = bench_report.load_runs(out)
        if runs:
            bench_report.write_summary(runs, out / "summary.md", title=f"FlashSAC training benchmark: {out.name}", notes=notes)
            bench_report.plot_timings(runs, out / "timings.png")
    print(f"\n[bench] done: {len(specs) - failures}/{len(specs)} runs completed; {out / 'summary.md'}")
    runs = bench_report.load_runs(out)
    if runs:
        print(bench_report.summary_table(runs))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
