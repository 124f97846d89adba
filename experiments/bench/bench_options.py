"""What one single-run invocation asks for: its command line, and the Hydra overrides that amounts to.

The command line is the original report's (``--num-envs`` ... ``--compile``) followed by this project's additions
(``--setting``, ``--config``, ``--collector`` ...); ``benchmark_flashsac_training.py`` parses it here, and the
matrix and parity drivers build it (``bench_driver.single_run_argv``). Kept apart from the run so that a named
configuration's overrides, and the refusals of what cannot run, are checked on a CPU without a trainer.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import bench_configs
import bench_env
from bench_env import BenchSetupError

#: The command's name, in its usage line and in every error line it prints.
PROG = "benchmark_flashsac_training"
DESCRIPTION = "One real FlashSAC training run (UniLab, a FlashSAC task, G1 Walk Flat by default) with per-iteration learner timings."


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
    p = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION)
    p.add_argument("--unilab-root", type=Path,
                   default=Path(os.environ.get("UNILAB", bench_env.DEFAULT_UNILAB_ROOT)),
                   help="UniLab tree with src/unilab/scripts/train_flashsac.py (default: $UNILAB or the applier's embedded tree)")
    p.add_argument("--backend", choices=bench_env.SIMS, default="mujoco",
                   help="physics of the collector: CPU MuJoCo (the task's own owner) or MuJoCo Warp on the GPU "
                        "(task g1_walk_flat/mjwarp)")
    p.add_argument("--task", default=bench_configs.DEFAULT_TASK,
                   help=f"FlashSAC task config group (known: {', '.join(bench_configs.TASKS)}; default: "
                        f"{bench_configs.DEFAULT_TASK}); an unknown one is refused in one line")
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
    p.add_argument("--synthetic-motion-clip", action="store_true",
                   help="a task that tracks a motion clip: where the tree has none, write the synthetic one "
                        "(scripts/offline/motion_clip.py; never over a clip that is there); recorded in the run JSON")
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
    overrides.extend(bench_configs.COLLECTORS[args.collector].overrides_on(config.tree if config else "patched"))
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


def require_runnable(args: argparse.Namespace) -> None:
    """Refuse, in one line and before any device is touched, what cannot run: the table's rule, and a CPU
    smoke run of the host collector (its replay pipeline needs CUDA)."""
    name, _ = config_identity(args)
    reason = bench_configs.refusal(name, args.backend, args.collector, args.task)
    if reason is None and args.cpu_smoke and args.collector == "host":
        reason = "--cpu-smoke runs the device collector only (--collector device): the host path needs CUDA"
    if reason is not None:
        raise BenchSetupError(reason)
