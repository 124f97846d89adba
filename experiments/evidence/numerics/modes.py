"""The two modes: the parent writes the data, starts one worker per configuration, and gates the results.

CPU mode (what CI runs):
  * patched eager, every switch off, against the baseline: bitwise equal;
  * patched eager with ``finite_guard`` and ``deferred_metrics`` on: bitwise equal too
    (finite steps are unchanged by the guard; metrics are the same iteration means);
  * NaN/Inf injection into the patched learner: the poisoned step is skipped and the
    parameters, optimizer state and target critic are bitwise unchanged, the skip is
    counted in the metrics; the baseline run with the same injection shows the damage.

GPU mode: every configuration (eager, loss-only compile, full-objective compile,
full-objective compile + manual CUDA graphs, whole-cycle CUDA graph) of the patched
learner against patched eager, fp32 and bf16 autocast: the first update's losses,
gradients and BatchNorm statistics, and the drift after 12 iterations relative to the
measured drift of a one-ulp change (tolerances and their grounds: ``compare``); the
patched eager learner's first critic update against the baseline's; graph breaks and
recompiles of the compiled objectives; a host-sync audit and a kernel-launch count of
one update cycle per configuration, at 2 critic / 1 actor and at 8 / 4 updates; the
launches of one collector inference request, eager and graphed.

The same configurations and gates run on CPU too (tests/test_learner_patches.py): a
worker config ``compile_on_cpu`` lifts the learner's CUDA-only compile gate so that
Inductor's C++ backend compiles the very objectives the CUDA path compiles, and
``compare_configurations`` applies GPU mode's rules to the results.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import learner_study

from .config import (
    FIRST_CRITIC_SNAPSHOT,
    GPU_CONFIGS,
    GPU_LEARNER_KWARGS,
    ROBUSTNESS_CONFIG,
    TIER_A_SNAPSHOT,
    WorkerConfig,
)
from .configurations import PATCHED_VS_BASELINE_CHECK, compare_configurations, configuration_check
from .gates import (
    bitwise_vs_baseline,
    checkpoint_report,
    frozen_critic_report,
    graph_breaks_report,
    host_sync_report,
    inference_graph_report,
    injection_report,
    no_compilation_report,
    recovery_report,
    whole_cycle_kept_report,
)

#: The entry script; ``--worker`` runs ``worker.worker_main`` (its directory first on ``sys.path``).
ENTRY = Path(__file__).resolve().parents[1] / "validate_numerics.py"
ITERATIONS, UPDATES_PER_STEP, POLICY_FREQUENCY = 12, 2, 2

#: Every entry a mode may write under ``checks`` -> the gate that computes it. ``cli``
#: refuses to write a report with any other entry, and tests/test_validation_gates.py
#: holds a failing input per gate for exactly these (the configuration gates are failed
#: on real CPU results in tests/test_learner_patches.py).
CHECK_GATES: dict[str, Callable[..., Any]] = {
    "eager_switches_off_vs_baseline": bitwise_vs_baseline,
    "eager_warm_up_guard_deferred_vs_baseline": bitwise_vs_baseline,
    "frozen_critic_actor_update": frozen_critic_report,
    "finite_guard_injection": injection_report,
    "finite_guard_recovery": recovery_report,
    "checkpoint_resume_keeps_graphs": checkpoint_report,
    "full_objective_graph_breaks": graph_breaks_report,
    "host_sync_audit": host_sync_report,
    "whole_cycle_graph_kept": whole_cycle_kept_report,
    "inference_graph_matches_eager": inference_graph_report,
    "no_compilation_after_warm_up": no_compilation_report,
    PATCHED_VS_BASELINE_CHECK: compare_configurations,
    **{
        configuration_check(precision, name): compare_configurations
        for precision in ("fp32", "bf16")
        for name in GPU_CONFIGS
        if name != "eager"
    },
}


def undeclared_checks(checks: dict[str, Any]) -> list[str]:
    """The entries of ``checks`` that ``CHECK_GATES`` does not declare (none in a valid report)."""
    return sorted(set(checks) - set(CHECK_GATES))


def make_data(path: Path, iterations: int, updates_per_step: int, batch_size: int) -> None:
    """The batches and reward chunks every worker of a run trains on (seeded: the same every run)."""
    import torch

    generator = torch.Generator().manual_seed(1234)
    batches = [
        learner_study.random_batch(torch, generator, batch_size) for _ in range(iterations * updates_per_step)
    ]
    reward_chunks = [
        {
            "rewards": torch.randn(2, 32, generator=generator) * 0.5 + 0.2,
            "dones": (torch.rand(2, 32, generator=generator) < 0.05).float(),
        }
        for _ in range(iterations)
    ]
    torch.save({"batches": batches, "reward_chunks": reward_chunks}, path)


def run_worker(root: Path, data: Path, config: WorkerConfig, workdir: Path, name: str,
               torch_threads: int | None = None) -> Any:
    """Run one worker with ``root``'s ``uni_rl`` first on its path; its result dict.

    ``torch_threads``: the worker's intra-op threads (OMP_NUM_THREADS), for workers that run side by side on the
    CPU; None keeps torch's default (one per core).
    """
    import torch

    config_path = workdir / f"{name}.json"
    out_path = workdir / f"{name}.pt"
    config.write(config_path)
    env = dict(os.environ)
    if torch_threads is not None:
        env["OMP_NUM_THREADS"] = str(torch_threads)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    command = [sys.executable, str(ENTRY), "--worker", "--root", str(root), "--data", str(data),
               "--config", str(config_path), "--out", str(out_path)]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"worker {name} failed:\n{completed.stdout}\n{completed.stderr}")
    return torch.load(out_path, weights_only=False)


def cpu_checks(baseline_root: Path, patched_root: Path, workdir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(gated checks, measurements) of CPU mode.

    The six workers are independent processes (each reads the data file and writes its own result), so they run
    side by side, one per core with one torch thread each (the small learner gains nothing from a second thread,
    and two threads per worker on a busy 2-core machine spend most of their time waiting): 83 s sequentially on
    2 cores, about 35 s so. Every comparison is between workers run alike.
    """
    from concurrent.futures import ThreadPoolExecutor

    iterations, updates_per_step, policy_frequency = ITERATIONS, UPDATES_PER_STEP, POLICY_FREQUENCY
    data = workdir / "data.pt"
    make_data(data, iterations, updates_per_step, batch_size=64)
    base = WorkerConfig(device="cpu", seed=7, updates_per_step=updates_per_step, policy_frequency=policy_frequency)
    measurements: dict[str, Any] = {
        "critic_updates": iterations * updates_per_step,
        "actor_updates": iterations * updates_per_step // policy_frequency,
    }
    toggles = base.replace(count_requires_grad_toggles=True)
    switches = {"finite_guard": True, "deferred_metrics": True}
    inject = [
        {"update": 9, "phase": "critic", "field": "rewards"},
        {"update": 14, "phase": "actor", "field": "critic"},
    ]
    snapshots = ["9:critic", "10:critic", "14:actor", "15:critic"]
    jobs: dict[str, tuple[Path, WorkerConfig]] = {
        "baseline": (baseline_root, toggles),
        # 1. every switch off: the patched learner is the baseline, bitwise.
        "patched_off": (patched_root, toggles),
        # 2. guard + deferred metrics on, after a warm-up: finite steps, iteration means and the restored state
        #    are unchanged.
        "patched_guard_deferred": (patched_root, toggles.replace(learner=switches, warm_up=True)),
        # 4. NaN/Inf injection: skipped steps, unchanged parameters, counted skips; the baseline shows the damage.
        "patched_injected": (patched_root, base.replace(learner=switches, inject=inject, snapshot_at=snapshots)),
        "baseline_injected": (baseline_root, base.replace(inject=inject)),
        # 5. One bad batch, then clean ones; started from another learner's checkpoint.
        "patched_robustness": (patched_root, base.replace(learner=switches, warm_up=True, **ROBUSTNESS_CONFIG)),
    }

    def run(name: str) -> tuple[str, Any]:
        root, config = jobs[name]
        return name, run_worker(root, data, config, workdir, name, torch_threads=1)

    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        results = dict(pool.map(run, jobs))

    checks: dict[str, Any] = {}
    checks["eager_switches_off_vs_baseline"] = bitwise_vs_baseline(results["baseline"], results["patched_off"])
    checks["eager_warm_up_guard_deferred_vs_baseline"] = bitwise_vs_baseline(
        results["baseline"], results["patched_guard_deferred"], require_no_skips=True
    )
    # 3. frozen critic: the actor update gives no critic gradient and toggles nothing.
    checks["frozen_critic_actor_update"] = frozen_critic_report(
        results["baseline"], results["patched_off"], results["patched_guard_deferred"]
    )
    checks["finite_guard_injection"] = injection_report(
        results["patched_injected"], results["baseline_injected"], updates_per_step
    )
    robust = {"cpu/eager": results["patched_robustness"]}
    checks["finite_guard_recovery"] = recovery_report(robust, updates_per_step)
    checks["checkpoint_resume_keeps_graphs"] = checkpoint_report(robust)
    return checks, measurements


def gpu_jobs(baseline_root: Path, patched_root: Path) -> dict[str, tuple[Path, WorkerConfig]]:
    """GPU mode's workers: ``<side>/<precision>/<configuration>`` -> (root, configuration)."""
    common = WorkerConfig(
        device="cuda",
        seed=7,
        updates_per_step=UPDATES_PER_STEP,
        policy_frequency=POLICY_FREQUENCY,
        fallback_random=True,
        audit=True,
        audit_updates=8,
        snapshot_at=[FIRST_CRITIC_SNAPSHOT, TIER_A_SNAPSHOT],
    )
    jobs: dict[str, tuple[Path, WorkerConfig]] = {}
    for precision in ("fp32", "bf16"):
        for name, switches in GPU_CONFIGS.items():
            if precision == "bf16" and name == "loss_only_compile":
                continue
            learner = dict(GPU_LEARNER_KWARGS, **switches)
            learner.update(finite_guard=True, deferred_metrics=True, use_amp=precision == "bf16", amp_dtype="bf16")
            jobs[f"patched/{precision}/{name}"] = (
                patched_root,
                common.replace(
                    learner=learner,
                    warm_up=True,
                    first_update_probe=True,
                    explain=name == "full_objective_compile",
                    inference_probe=bool(switches.get("use_cuda_graph_inference")),
                ),
            )
    jobs["patched/fp32/eager_one_ulp"] = (
        patched_root,
        common.replace(
            learner=dict(GPU_LEARNER_KWARGS, finite_guard=True, deferred_metrics=True),
            warm_up=True,
            one_ulp_rewards=True,
        ),
    )
    for name in ("eager", "loss_only_compile"):
        learner = dict(GPU_LEARNER_KWARGS, use_compile=name != "eager")
        jobs[f"baseline/fp32/{name}"] = (baseline_root, common.replace(learner=learner))
    # One bad batch and a resumed checkpoint on every update path (not compared numerically).
    robust = WorkerConfig(
        device="cuda", seed=7, updates_per_step=UPDATES_PER_STEP, policy_frequency=POLICY_FREQUENCY,
        fallback_random=True, warm_up=True, **ROBUSTNESS_CONFIG,
    )
    for name in ("eager", "full_objective_compile", "full_objective_compile_manual_graphs", "whole_cycle_graph"):
        learner = dict(GPU_LEARNER_KWARGS, **GPU_CONFIGS[name], finite_guard=True, deferred_metrics=True)
        jobs[f"robustness/fp32/{name}"] = (patched_root, robust.replace(learner=learner))
    return jobs


def gpu_checks(baseline_root: Path, patched_root: Path, workdir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(gated checks, measurements) of GPU mode."""
    from concurrent.futures import ThreadPoolExecutor

    data = workdir / "data.pt"
    make_data(data, ITERATIONS, UPDATES_PER_STEP, batch_size=256)
    jobs = gpu_jobs(baseline_root, patched_root)

    def run(item: tuple[str, tuple[Path, WorkerConfig]]) -> tuple[str, Any]:
        key, (root, config) = item
        return key, run_worker(root, data, config, workdir, key.replace("/", "_"))

    # Compilation is CPU-bound: four workers in parallel share the 16 cores.
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(pool.map(run, jobs.items()))
    robustness = {key: results.pop(key) for key in list(results) if key.startswith("robustness/")}
    requested = [
        key for key, (_, config) in jobs.items()
        if key in results and config.learner.get("use_whole_cycle_cuda_graph")
    ]
    return gpu_gates(results, robustness, requested)


def gpu_gates(
    results: dict[str, Any], robustness: dict[str, Any], requested: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(gated checks, measurements) over GPU mode's results; ``requested``: the whole-cycle runs."""
    checks, measurements = compare_configurations(results, ITERATIONS)
    checks["finite_guard_recovery"] = recovery_report(robustness, UPDATES_PER_STEP, POLICY_FREQUENCY)
    checks["checkpoint_resume_keeps_graphs"] = checkpoint_report(robustness)
    checks["full_objective_graph_breaks"] = graph_breaks_report(
        results["patched/fp32/full_objective_compile"]["explain"]
    )
    per_config = {
        key: {
            "audit": result.get("audit"),
            "audit_8_updates": result.get("audit_large"),
            "warm_up_seconds": result.get("warm_up_seconds"),
            "training_seconds_12_iterations": result.get("seconds"),
            "graphs_compiled_after_warm_up": result.get("graphs_compiled_after_warm_up"),
            "graph_breaks_counted_by_dynamo": result.get("graph_breaks"),
            "tf32": result.get("tf32"),
        }
        for key, result in results.items()
    }
    recommended = [k for k in per_config if k.startswith("patched/") and ("compile" in k or "graph" in k)]
    checks["host_sync_audit"] = host_sync_report(per_config)
    checks["whole_cycle_graph_kept"] = whole_cycle_kept_report(results, requested)
    probed = {key: results[key]["inference"] for key in results if "inference" in results[key]}
    checks["inference_graph_matches_eager"] = inference_graph_report(probed)
    checks["no_compilation_after_warm_up"] = no_compilation_report(per_config, recommended)
    return checks, measurements
