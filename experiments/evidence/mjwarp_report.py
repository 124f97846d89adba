"""Markdown tables of the GPU-physics evidence, generated from committed result files.

Four tables, registered in ``readme_tables`` so README blocks are regenerated and checked like the bench's:
``physics`` (bench runs: the same configuration on CPU MuJoCo and on MuJoCo Warp, side by side, with the
ratio), ``agreement`` (``mjwarp_agreement.py`` JSONs: one-step agreement with CPU MuJoCo),
``env-profile`` (``collector_profile.py --mode profile`` JSONs: the env alone, no learner, per phase) and
``sim-training`` (training runs of several seeds on each physics: learning per env step compared with
``parity_stats``' equivalence test, MJWarp against CPU MuJoCo).

Imported by ``tables/readme_tables.py`` and ``tables/headline_table.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench_report
import parity_stats
from bench_configs import NEGATIVE_CONTROL

#: The env's own per-step timings shown by the profile table (``info["timing"]`` keys, ms per env step).
PROFILE_PHASES = (
    ("backend_physics_ms", "physics"),
    ("backend_control_upload_ms", "actions to GPU"),
    ("backend_host_cache_refresh_ms", "state to host"),
    ("update_state_ms", "state refresh"),
    ("reset_done_ms", "reset"),
    ("set_state_reset_rand_ms", "reset: model writes"),
    ("set_state_reset_forward_ms", "reset: forward"),
    ("set_state_host_cache_refresh_ms", "reset: host cache"),
    ("set_state_internal_gap_ms", "reset: host copies"),
)


def _mean(runs: Sequence[dict[str, Any]], field: str) -> float | None:
    return bench_report._mean(bench_report.pooled(runs, field))  # noqa: SLF001 - the bench report's own pooling


def physics_table(runs: Sequence[dict[str, Any]]) -> str:
    """Per configuration × setting run on both physics: wall, env steps/s, learner and collector phases.

    *× MJWarp* is CPU MuJoCo's mean wall over MJWarp's (> 1: MJWarp's iterations are shorter).
    """
    by_key: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for run in runs:
        if run.get("status") != "completed":
            continue
        # runs of another collector or under MPS pair among themselves
        config = str(run.get("config")) + bench_report.pairing_suffix(run)
        key = (config, bench_report._schedule(run))  # noqa: SLF001 - the report's own column
        by_key.setdefault(key, {}).setdefault(str(run.get("backend") or "mujoco"), []).append(run)
    lines = [
        "| configuration | setting · schedule | physics | runs | wall mean | env steps/s | learner | collector physics "
        "| reset | state refresh | × MJWarp |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (config, schedule), sims in sorted(by_key.items()):
        if set(sims) != {"mujoco", "mjwarp"}:
            continue
        walls = {sim: _mean(group, "wall_per_iter_ms") for sim, group in sims.items()}
        for sim in ("mujoco", "mjwarp"):
            group, wall = sims[sim], walls[sim]
            envs = int(group[0]["env_steps_per_s"]["envs"]) * int(group[0]["env_steps_per_s"]["ranks"])
            phases = [bench_report._pooled_phase(group, p) for p in ("physics", "reset", "state_refresh")]  # noqa: SLF001
            ratio = f"{walls['mujoco'] / wall:.2f}×" if sim == "mjwarp" and wall and walls["mujoco"] else ""
            lines.append(
                f"| {bench_report._label(config, group)} | {schedule} | {bench_report.physics_label(sim)} "  # noqa: SLF001
                f"| {len(group)} | {bench_report._fmt(wall)} | {bench_report._fmt(envs * 1000.0 / wall if wall else None, 0)} "  # noqa: SLF001
                f"| {bench_report._fmt(_mean(group, 'learner_train_ms'))} | "  # noqa: SLF001
                + " | ".join(bench_report._fmt(p) for p in phases) + f" | {ratio} |"  # noqa: SLF001
            )
    return "\n".join(lines)


def _jsons(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    return [(p.stem, json.loads(p.read_text(encoding="utf-8"))) for p in sorted(folder.glob("*.json"))]


def agreement_table(folder: Path) -> str:
    """One row per agreement JSON: where MJWarp ran, rows compared, relative errors and the verdict."""
    lines = ["| study | MJWarp device | states × envs | quantity | median | q0.99 | max | max abs error | tolerance (q0.99) | passed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, result in _jsons(folder):
        args, versions = result["args"], result["versions"]
        quantile = f"q{args['quantile']}"
        for quantity, stats in result["relative_error"].items():
            lines.append(
                f"| {name} | {versions.get('warp_device_name') or versions.get('warp_device')} | "
                f"{result['states']} × {args['num_envs']} | {quantity} | {stats['median']:.2e} | {stats[quantile]:.2e} | "
                f"{stats['max']:.2e} | {stats['max_abs_error']:.3g} | {args['tolerance']:g} | {stats['passed']} |"
            )
    return "\n".join(lines)


def profile_table(folder: Path) -> str:
    """One row per env profile JSON: env step wall and the env's own phase means (ms per env step)."""
    header = " | ".join(label for _, label in PROFILE_PHASES)
    lines = [f"| profile | task | reset route | envs | timed steps | resets | env step (wall) | {header} |",
             "|---|---|---|---|---|---|---|" + "---|" * len(PROFILE_PHASES)]
    for name, result in _jsons(folder):
        means = result["mean_ms"]
        cells = " | ".join(bench_report._fmt(means.get(key)) for key, _ in PROFILE_PHASES)  # noqa: SLF001
        task = result.get("task", "g1_walk_flat/mujoco")
        # Profiles before unisim 0003 carry no route: the mjwarp adapter then had only the whole-array one.
        route = result.get("mjwarp_reset_route", "whole-array" if task.endswith("/mjwarp") else None) or "–"
        lines.append(f"| {name} | {task} | {route} | {result['num_envs']} | "
                     f"{result['timed_steps']} | {result['resets']} | {result['wall_ms_per_step']:.2f} | {cells} |")
    return "\n".join(lines)


def block_dim_table(folder: Path) -> str:
    """MuJoCo Warp's solver kernels at other thread-block widths (``mjwarp_block_dim_bench.py``): per env count and
    width, the median ms per env step of the substeps' graph over alternating blocks, its ratio to the tree's
    widths, and how far one step from the kept state moved from the default's (``qacc``, the largest difference;
    the default's own second run beside it says what MuJoCo Warp's atomic sums alone move)."""
    lines = ["| record | GPU | envs | largest constraint rows in a world | width | ms per env step (ratio) | "
             "one step's largest qacc difference to the default |", "|---|---|---|---|---|---|---|"]
    for name, result in _jsons(folder):
        if result.get("study") != "mjwarp-block-dim":
            continue
        for run in result["runs"]:
            diffs = run["max_abs_diff_to_default"]
            for variant, changed in result["variants"].items():
                width = ", ".join(f"{field} {value}" for field, value in changed.items()) or "the tree's"
                median = run["median_ms_per_step"].get(variant)
                timed = f"{median:.2f} ({run['ratio_to_default'][variant]:.3f})" if median is not None else "–"
                shown = "default, run again" if variant == "default" else variant
                lines.append(f"| {name} | {result['machine']['gpu']} | {run['num_envs']} | {run['nefc_max']} | "
                             f"{variant}: {width} | {timed} | {diffs[shown]['qacc']:.3g}"
                             f"{' (itself, run again)' if variant == 'default' else ''} |")
    return "\n".join(lines)


#: Row labels of the sim-training table (its verdict takes the MuJoCo arm as the reference).
SIM_LABELS = bench_report.PHYSICS_LABELS
#: The parity test's negative control (learning rates ÷ 10) on the device-resident collector: an arm the test
#: must fail for its verdicts to be trusted.
CONTROL_ARM = f"mjwarp-device-{NEGATIVE_CONTROL}"
#: The arms of a sim-to-sim study: the physics, for MJWarp the collector (host env or device-resident), and the
#: negative control.
ARM_LABELS = {**SIM_LABELS, "mjwarp-device": "MuJoCo Warp (GPU), device-resident collector",
              CONTROL_ARM: "MuJoCo Warp (GPU), device-resident collector, learning rates ÷ 10 (negative control)"}


def sim_arm(run: dict[str, Any]) -> str:
    """``mujoco``, ``mjwarp`` (host-env collector) or ``mjwarp-device`` (the device-resident collector), followed
    by ``-<config>`` for the negative control's runs."""
    backend = str(run.get("backend", "mujoco"))
    arm = f"{backend}-device" if run.get("collector") == "device-resident" else backend
    return f"{arm}-{NEGATIVE_CONTROL}" if run.get("config") == NEGATIVE_CONTROL else arm


def sim_training_table(folders: Path | Sequence[Path], *, final_last: int = 500) -> str:
    """Learning per env step on each arm: per-seed metrics and each arm's equivalence verdict against CPU MuJoCo.

    Each run's reward curve is its collector's logged reward on its **own** simulator (exploration on), so this
    says whether MJWarp-trained runs (host-env or device-resident collector) learn the task as fast per env
    step as MuJoCo-trained ones, judged by the same two-sided test as the learning-parity check
    (``parity_stats.verdict``: the 90 % Welch interval of the difference of each metric inside ±15 % of the
    MuJoCo arm's learning gain). Several folders are pooled: a study of one arm reads the CPU MuJoCo arm from
    the committed study that trained it, rather than a copy.
    """
    runs = bench_report.load_pooled_runs(folders)
    arms = parity_stats.arm_metrics(runs, final_last=final_last, arm_of=sim_arm)
    lines = [f"| physics | seeds | area under curve per env step, per seed | final (last {final_last}), per seed |",
             "|---|---|---|---|"]
    present = [arm for arm in ARM_LABELS if arm in arms or arm == "mujoco"]
    for arm in present:
        seeds = arms.get(arm, {})
        cells = [", ".join(f"{seed}: {m[metric]:.3f}" for seed, m in sorted(seeds.items()))
                 for metric in parity_stats.METRICS]
        lines.append(f"| {ARM_LABELS[arm]} | {len(seeds)} | {' | '.join(cells)} |")
    for arm in present[1:] or ["mjwarp"]:
        result = parity_stats.verdict(arms.get(arm, {}), arms.get("mujoco", {}))
        name = "MuJoCo Warp" if arm == "mjwarp" else ARM_LABELS[arm]
        expected = " (a trustworthy test fails it)" if arm == CONTROL_ARM else ""
        lines.append(f"\n**{name} vs CPU MuJoCo: {'EQUIVALENT' if result['passed'] else 'NOT SHOWN EQUIVALENT'}**"
                     f"{expected} — {result['reason']}")
    if CONTROL_ARM in arms:
        failed = not parity_stats.verdict(arms[CONTROL_ARM], arms.get("mujoco", {}))["passed"]
        lines.append(f"\n**The test {'is trusted: it fails' if failed else 'is not trusted: it passes'} the "
                     "negative control.**")
    return "\n".join(lines)
