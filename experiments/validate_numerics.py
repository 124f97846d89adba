"""Numerical validation of the patched FlashSAC learner against unpatched unilab-rl 1.3.2.

Each side runs in its own subprocess with its root (a directory holding a ``uni_rl/``
package) first on ``sys.path``, so the two ``uni_rl`` versions never share an
interpreter. The parent writes the batches once, each worker replays the same update
schedule as ``DoubleBufferOffPolicyRunner`` (per iteration: reward statistics, then per
update a critic step, an actor step every ``policy_frequency`` updates, a target update)
and saves its final state and per-iteration metrics with ``torch.save``; the parent
compares them.

CPU mode (what CI runs):
  * patched eager, every switch off, against the baseline: bitwise equal;
  * patched eager with ``finite_guard`` and ``deferred_metrics`` on: bitwise equal too
    (finite steps are unchanged by the guard; metrics are the same iteration means);
  * NaN/Inf injection into the patched learner: the poisoned step is skipped and the
    parameters, optimizer state and target critic are bitwise unchanged, the skip is
    counted in the metrics; the baseline run with the same injection shows the damage.

GPU mode: every configuration (eager, loss-only compile, full-objective compile,
full-objective compile + manual CUDA graphs) of the patched learner against patched
eager, fp32 and bf16 autocast, with stated tolerances; the patched eager learner
against the baseline (tolerance: see ``GPU_BASELINE_RTOL``); graph breaks and
recompiles of the compiled objectives; a host-sync audit and a kernel-launch count of
one update cycle per configuration.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

# Learner size: small enough for 2 CPU cores, same structure as the G1 setting.
DIMS = {"obs_dim": 24, "critic_obs_dim": 30, "action_dim": 6}
LEARNER_KWARGS: dict[str, Any] = {
    "gamma": 0.97,
    "tau": 0.01,
    "actor_hidden_dim": 32,
    "critic_hidden_dim": 64,
    "num_atoms": 101,
    # A short schedule so that the learning rate really changes during the run.
    "learning_rate_init": 1e-4,
    "learning_rate_peak": 3e-4,
    "learning_rate_end": 1.5e-4,
    "learning_rate_warmup_steps": 4,
    "learning_rate_decay_steps": 40,
}
# GPU tolerances, as a relative L2 norm per tensor (||a - b|| / ||a||) and a relative
# difference per metric (with an absolute floor for metrics near zero). Compiled code
# draws eager's random numbers here (Inductor ``fallback_random``), so configurations
# differ by float rounding only: compiled objectives fuse and reorder reductions, and
# bf16 autocast rounds at different points when Inductor fuses ops (eager rounds every
# op output to bf16).
# Tier A, after the first iteration (2 critic, 1 actor, 2 target updates from the same
# state): pure rounding, gated for every configuration and precision.
GPU_REL_TOL = {"fp32": 1e-3, "bf16": 2e-2}
GPU_METRIC_ABS_FLOOR = 1e-4
# Tier B, after all 12 iterations: this learner amplifies any last-bit difference (the
# argmin over the two critics and the BatchNorm batch statistics switch discretely), so
# the bound is relative to the measured amplification of a one-ulp change: patched vs
# unpatched eager differ only in the TD projection dividing by the bin width as a
# device tensor where 1.3.2 divided by a host float (which CUDA turns into a
# multiplication by its reciprocal). fp32 configurations must stay within
# TIER_B_FLOOR_FACTOR times that floor; bf16 is reported against it, not gated.
TIER_B_FLOOR_FACTOR = 5.0
TIER_A_SNAPSHOT = "2:critic"
GPU_LEARNER_KWARGS = {"actor_hidden_dim": 128, "critic_hidden_dim": 256}


def read_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    path = REPO_ROOT / "VERSIONS.env"
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            versions[key] = value
    return versions


# --------------------------------------------------------------------------- worker


def _import_uni_rl(root: str) -> Any:
    sys.path.insert(0, root)
    import uni_rl  # the root decides which uni_rl this is
    from uni_rl.algos.flash_sac import learner as learner_module

    origin = Path(uni_rl.__file__).resolve()
    if Path(root).resolve() not in origin.parents:
        raise RuntimeError(f"uni_rl imported from {origin}, not from {root}")
    return learner_module


def _state_of(learner: Any) -> dict[str, Any]:
    import torch

    def clone(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().to("cpu", copy=True)
        if isinstance(value, dict):
            return {k: clone(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clone(v) for v in value]
        return value

    state = learner.get_state_dict()
    for name in ("actor_optimizer", "critic_optimizer", "temperature_optimizer"):
        # param_groups hold the learning rate (a float, or a device tensor on the
        # manual CUDA graph path): compare its value, not its type.
        for group in state[name]["param_groups"]:
            group["lr"] = float(group["lr"])
    return clone(state)


def _run_schedule(
    learner: Any,
    batches: list[dict[str, Any]],
    reward_chunks: list[dict[str, Any]],
    updates_per_step: int,
    policy_frequency: int,
    device: str,
    on_update: Callable[[int, str], None] | None = None,
    overrides: dict[tuple[int, str], dict[str, Any]] | None = None,
) -> list[dict[str, float]]:
    """The runner's update order; returns the per-iteration mean metrics.

    ``overrides`` replaces the batch of one phase ("critic"/"actor") of one update.
    """
    overrides = overrides or {}
    import statistics
    from collections import defaultdict

    iterations = len(batches) // updates_per_step
    per_iteration: list[dict[str, float]] = []
    for iteration in range(iterations):
        chunk = reward_chunks[iteration]
        learner.update_reward_stats(chunk["rewards"].to(device), chunk["dones"].to(device))
        iter_metrics: defaultdict[str, list[float]] = defaultdict(list)
        for update_idx in range(updates_per_step):
            index = iteration * updates_per_step + update_idx
            batch = {k: v.to(device) for k, v in batches[index].items()}
            critic_batch = overrides.get((index, "critic"), batch)
            actor_batch = overrides.get((index, "actor"), batch)
            if on_update is not None:
                on_update(index, "critic")
            if getattr(learner, "use_cuda_graph_critic", False):
                metrics = learner.update_critic_cuda_graph(critic_batch, read_metrics=True)
            else:
                metrics = learner.update_critic(critic_batch)
            for key, value in metrics.items():
                iter_metrics[key].append(value)
            if update_idx % policy_frequency == 0:
                if on_update is not None:
                    on_update(index, "actor")
                if getattr(learner, "use_cuda_graph_actor", False):
                    metrics = learner.update_actor_cuda_graph(actor_batch, read_metrics=True)
                else:
                    metrics = learner.update_actor(actor_batch)
                for key, value in metrics.items():
                    iter_metrics[key].append(value)
            learner.soft_update_target()
        if getattr(learner, "deferred_metrics", False):
            for key, value in learner.read_deferred_metrics().items():
                iter_metrics[key].append(value)
        per_iteration.append({k: statistics.mean(v) for k, v in iter_metrics.items() if v})
    return per_iteration


def _one_cycle(learner: Any, batches: list[dict[str, Any]], policy_frequency: int) -> None:
    """One runner iteration's updates, without reading anything."""
    for update_idx, batch in enumerate(batches):
        if getattr(learner, "use_cuda_graph_critic", False):
            learner.update_critic_cuda_graph(batch, read_metrics=False)
        else:
            learner.update_critic(batch)
        if update_idx % policy_frequency == 0:
            if getattr(learner, "use_cuda_graph_actor", False):
                learner.update_actor_cuda_graph(batch, read_metrics=False)
            else:
                learner.update_actor(batch)
        learner.soft_update_target()


def audit_cycle(
    learner: Any, batches: list[dict[str, Any]], policy_frequency: int
) -> dict[str, Any]:
    """Host syncs and launches of one warm update cycle, counted.

    Syncs: ``torch.cuda.set_sync_debug_mode("warn")`` makes every synchronizing CUDA
    call (blocking copies, ``.item()``, stream syncs) raise a warning; they are counted
    inside the cycle and, separately, in the end-of-iteration metrics read (the
    baseline reads its metrics inside the cycle, so its read count is zero). Launches:
    CUDA runtime/driver calls recorded by ``torch.profiler`` on the host side, and the
    kernels the device executed.
    """
    import warnings

    import torch

    deferred = bool(getattr(learner, "deferred_metrics", False))
    torch.cuda.synchronize()

    def count_syncs(fn: Callable[[], Any]) -> int:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                fn()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        # Only the per-operation warning counts; the mode's one-time "prototype
        # feature" notice is not a synchronization.
        return sum("called a synchronizing CUDA operation" in str(item.message) for item in caught)

    syncs_in_cycle = count_syncs(lambda: _one_cycle(learner, batches, policy_frequency))
    syncs_in_read = count_syncs(learner.read_deferred_metrics) if deferred else 0
    torch.cuda.synchronize()

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _one_cycle(learner, batches, policy_frequency)
        if deferred:
            learner.read_deferred_metrics()
        torch.cuda.synchronize()
    host_calls: dict[str, int] = {}
    device_kernels = 0
    for event in prof.events():
        name = event.name
        if event.device_type == torch.autograd.DeviceType.CUDA:
            device_kernels += 1
        elif name.startswith(("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cudaMemcpy")):
            host_calls[name] = host_calls.get(name, 0) + 1
    launches = sum(v for k, v in host_calls.items() if "Launch" in k)
    return {
        "updates_in_cycle": len(batches),
        "host_syncs_in_cycle": syncs_in_cycle,
        "host_syncs_in_metrics_read": syncs_in_read,
        "host_launch_calls": launches,
        "host_cuda_calls_by_name": host_calls,
        "device_kernels_and_copies": device_kernels,
    }


def _build_learner(learner_module: Any, config: dict[str, Any]) -> Any:
    import torch

    torch.manual_seed(int(config["seed"]))
    if config["device"].startswith("cuda"):
        torch.cuda.manual_seed_all(int(config["seed"]))
    kwargs = dict(LEARNER_KWARGS)
    kwargs.update(DIMS)
    kwargs.update(config.get("learner", {}))
    return learner_module.FlashSACLearner(device=config["device"], **kwargs)


def _count_requires_grad_toggles(fn: Callable[[], Any]) -> int:
    import torch

    calls = [0]
    original = torch.Tensor.requires_grad_

    def counting(self: Any, requires_grad: bool = True) -> Any:
        calls[0] += 1
        return original(self, requires_grad)

    torch.Tensor.requires_grad_ = counting  # type: ignore[method-assign]
    try:
        fn()
    finally:
        torch.Tensor.requires_grad_ = original  # type: ignore[method-assign]
    return calls[0]


def worker_main(args: argparse.Namespace) -> None:
    learner_module = _import_uni_rl(args.root)
    import torch

    config = json.loads(Path(args.config).read_text())
    data = torch.load(args.data, weights_only=True)
    if config.get("fallback_random"):
        # Compiled code draws the same random numbers as eager, so the configurations
        # can be compared update by update.
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = True
    learner = _build_learner(learner_module, config)
    result: dict[str, Any] = {"uni_rl_file": learner_module.__file__}

    batches = data["batches"]
    overrides: dict[tuple[int, str], dict[str, Any]] = {}
    for item in config.get("inject", []):
        index, phase, field = int(item["update"]), item["phase"], item["field"]
        poisoned = dict(batches[index])
        values = poisoned[field].clone()
        values.view(-1)[::7] = float("nan")
        values.view(-1)[3] = float("inf")
        poisoned[field] = values.to(config["device"])
        overrides[(index, phase)] = {k: v.to(config["device"]) for k, v in poisoned.items()}
    snapshots: dict[str, Any] = {}
    snapshot_at = set(config.get("snapshot_at", []))

    def on_update(index: int, phase: str) -> None:
        if f"{index}:{phase}" in snapshot_at:
            snapshots[f"{index}:{phase}"] = _state_of(learner)

    if config.get("count_requires_grad_toggles"):
        batch = {k: v.to(config["device"]) for k, v in batches[0].items()}
        learner.update_critic(batch)
        for param in learner.critic.parameters():
            param.grad = None
        result["requires_grad_toggles_in_actor_update"] = _count_requires_grad_toggles(
            lambda: learner.update_actor(batch)
        )
        result["critic_grads_none_after_actor_update"] = all(
            p.grad is None for p in learner.critic.parameters()
        )
        if getattr(learner, "deferred_metrics", False):
            learner.read_deferred_metrics()
        learner = _build_learner(learner_module, config)

    if config.get("warm_up"):
        # The runner's warm-up: a dry (zero) batch of the real layout, then the state
        # must be exactly the state before, so training below equals the baseline's.
        dry = {k: torch.zeros_like(v).to(config["device"]) for k, v in batches[0].items()}
        warm_start = time.perf_counter()
        learner.warm_up(dry, inference_obs=dry["obs"])
        result["warm_up_seconds"] = time.perf_counter() - warm_start
    from torch._dynamo.utils import counters

    graphs_before = int(counters["stats"]["unique_graphs"])
    start = time.perf_counter()
    result["metrics"] = _run_schedule(
        learner,
        batches,
        data["reward_chunks"],
        int(config["updates_per_step"]),
        int(config["policy_frequency"]),
        config["device"],
        on_update=on_update if snapshot_at else None,
        overrides=overrides,
    )
    result["seconds"] = time.perf_counter() - start
    result["state"] = _state_of(learner)
    result["snapshots"] = snapshots
    # Graphs compiled during training proper: zero when the warm-up compiled them all.
    result["graphs_compiled_after_warm_up"] = int(counters["stats"]["unique_graphs"]) - (
        graphs_before
    )
    result["graph_breaks"] = sum(counters["graph_break"].values())
    if config.get("audit"):
        device_batches = [
            {k: v.to(config["device"]) for k, v in batch.items()}
            for batch in batches[: int(config["updates_per_step"])]
        ]
        result["audit"] = audit_cycle(learner, device_batches, int(config["policy_frequency"]))
    if config.get("explain"):
        result["explain"] = explain_objectives(learner, batches[0], config["device"])
    torch.save(result, args.out)


def explain_objectives(learner: Any, batch: dict[str, Any], device: str) -> dict[str, Any]:
    """Graph and graph-break counts of both whole objectives, by ``torch._dynamo.explain``."""
    import torch

    device_batch = {k: v.to(device) for k, v in batch.items()}
    critic = learner._critic_inputs(device_batch)
    actor = learner._actor_inputs(device_batch)
    report = {}
    for name, fn, inputs in (
        (
            "critic_objective",
            learner._critic_objective_eager,
            [critic[k] for k in ("actions", "rewards", "next_obs", "dones", "truncated")]
            + [critic["critic"], critic["next_critic"]],
        ),
        (
            "actor_objective",
            learner._actor_objective_eager,
            [actor[k] for k in ("obs", "next_obs", "actions", "critic")],
        ),
    ):
        explanation = torch._dynamo.explain(fn)(*inputs)
        report[name] = {
            "graph_count": explanation.graph_count,
            "graph_break_count": explanation.graph_break_count,
            "break_reasons": [str(r.reason) for r in explanation.break_reasons],
        }
    return report


# --------------------------------------------------------------------------- parent


def make_data(path: Path, iterations: int, updates_per_step: int, batch_size: int) -> None:
    import torch

    generator = torch.Generator().manual_seed(1234)
    obs, cobs, act = DIMS["obs_dim"], DIMS["critic_obs_dim"], DIMS["action_dim"]

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    batches = []
    for _ in range(iterations * updates_per_step):
        batches.append(
            {
                "obs": randn(batch_size, obs),
                "next_obs": randn(batch_size, obs),
                "actions": torch.tanh(randn(batch_size, act)),
                "rewards": randn(batch_size) * 0.5 + 0.2,
                "dones": (torch.rand(batch_size, generator=generator) < 0.05).float(),
                "truncated": (torch.rand(batch_size, generator=generator) < 0.02).float(),
                "critic": randn(batch_size, cobs),
                "next_critic": randn(batch_size, cobs),
            }
        )
    reward_chunks = [
        {
            "rewards": randn(2, 32) * 0.5 + 0.2,
            "dones": (torch.rand(2, 32, generator=generator) < 0.05).float(),
        }
        for _ in range(iterations)
    ]
    torch.save({"batches": batches, "reward_chunks": reward_chunks}, path)


def run_worker(root: Path, data: Path, config: dict[str, Any], workdir: Path, name: str) -> Any:
    import torch

    config_path = workdir / f"{name}.json"
    out_path = workdir / f"{name}.pt"
    config_path.write_text(json.dumps(config))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--root",
        str(root),
        "--data",
        str(data),
        "--config",
        str(config_path),
        "--out",
        str(out_path),
    ]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"worker {name} failed:\n{completed.stdout}\n{completed.stderr}")
    return torch.load(out_path, weights_only=False)


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from _flatten(value[key], f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _flatten(item, f"{prefix}[{index}]")
    else:
        yield prefix, value


def compare_states(
    reference: dict[str, Any],
    candidate: dict[str, Any],
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> dict[str, Any]:
    """Bitwise (rtol = atol = 0) or tolerance comparison of two saved states."""
    import torch

    ref = dict(_flatten(reference))
    cand = dict(_flatten(candidate))
    mismatches: list[str] = []
    max_abs = 0.0
    compared = 0
    for key in sorted(set(ref) | set(cand)):
        if key not in ref or key not in cand:
            mismatches.append(f"{key}: missing on one side")
            continue
        a, b = ref[key], cand[key]
        compared += 1
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                mismatches.append(f"{key}: shape/dtype {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}")
                continue
            if rtol == 0.0 and atol == 0.0:
                equal = torch.equal(a, b) or (
                    a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                    and torch.equal(a[~a.isnan()], b[~b.isnan()])
                )
            else:
                equal = bool(torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol))
            if a.is_floating_point() and a.numel():
                diff = (a.double() - b.double()).abs()
                finite = diff[torch.isfinite(diff)]
                if finite.numel():
                    max_abs = max(max_abs, float(finite.max()))
            if not equal:
                mismatches.append(key)
        elif isinstance(a, float) and isinstance(b, float):
            if rtol == 0.0 and atol == 0.0:
                equal = a == b or (math.isnan(a) and math.isnan(b))
            else:
                equal = math.isclose(a, b, rel_tol=rtol, abs_tol=atol)
            if math.isfinite(a) and math.isfinite(b):
                max_abs = max(max_abs, abs(a - b))
            if not equal:
                mismatches.append(f"{key}: {a!r} vs {b!r}")
        elif a != b:
            mismatches.append(f"{key}: {a!r} vs {b!r}")
    return {
        "equal": not mismatches,
        "compared_entries": compared,
        "max_abs_diff": max_abs,
        "mismatches": mismatches[:20],
        "mismatch_count": len(mismatches),
    }


def _metrics_only(metrics: list[dict[str, float]], keys: set[str]) -> list[dict[str, float]]:
    return [{k: v for k, v in item.items() if k in keys} for item in metrics]


def cpu_checks(baseline_root: Path, patched_root: Path, workdir: Path) -> dict[str, Any]:
    iterations, updates_per_step, policy_frequency = 12, 2, 2
    data = workdir / "data.pt"
    make_data(data, iterations, updates_per_step, batch_size=64)
    base_config = {
        "device": "cpu",
        "seed": 7,
        "updates_per_step": updates_per_step,
        "policy_frequency": policy_frequency,
    }
    checks: dict[str, Any] = {
        "critic_updates": iterations * updates_per_step,
        "actor_updates": iterations * updates_per_step // policy_frequency,
    }
    baseline = run_worker(
        baseline_root,
        data,
        dict(base_config, count_requires_grad_toggles=True),
        workdir,
        "baseline",
    )
    baseline_keys = set().union(*(m.keys() for m in baseline["metrics"]))

    # 1. every switch off: the patched learner is the baseline, bitwise.
    patched_off = run_worker(
        patched_root,
        data,
        dict(base_config, count_requires_grad_toggles=True),
        workdir,
        "patched_off",
    )
    state_cmp = compare_states(baseline["state"], patched_off["state"])
    metric_cmp = compare_states({"m": baseline["metrics"]}, {"m": patched_off["metrics"]})
    checks["eager_switches_off_vs_baseline"] = {
        "passed": state_cmp["equal"] and metric_cmp["equal"],
        "tolerance": "bitwise",
        "state": state_cmp,
        "metrics": metric_cmp,
    }

    # 2. guard + deferred metrics on, after a warm-up: finite steps, iteration means and
    #    the restored state are unchanged.
    switches = {"finite_guard": True, "deferred_metrics": True}
    patched_on = run_worker(
        patched_root,
        data,
        dict(base_config, learner=switches, count_requires_grad_toggles=True, warm_up=True),
        workdir,
        "patched_guard_deferred",
    )
    state_cmp = compare_states(baseline["state"], patched_on["state"])
    metric_cmp = compare_states(
        {"m": baseline["metrics"]},
        {"m": _metrics_only(patched_on["metrics"], baseline_keys)},
    )
    skip_rates = [
        m[key]
        for m in patched_on["metrics"]
        for key in ("critic_skip_rate", "actor_skip_rate", "temperature_skip_rate")
    ]
    checks["eager_warm_up_guard_deferred_vs_baseline"] = {
        "passed": state_cmp["equal"] and metric_cmp["equal"] and not any(skip_rates),
        "tolerance": "bitwise",
        "state": state_cmp,
        "metrics": metric_cmp,
        "skip_rates_all_zero": not any(skip_rates),
    }

    # 3. frozen critic: the actor update gives no critic gradient and toggles nothing.
    checks["frozen_critic_actor_update"] = {
        "passed": bool(
            patched_off["critic_grads_none_after_actor_update"]
            and patched_off["requires_grad_toggles_in_actor_update"] == 0
            and patched_on["requires_grad_toggles_in_actor_update"] == 0
        ),
        "patched_requires_grad_toggles": patched_off["requires_grad_toggles_in_actor_update"],
        "patched_critic_grads_none": patched_off["critic_grads_none_after_actor_update"],
        "baseline_requires_grad_toggles": baseline["requires_grad_toggles_in_actor_update"],
    }

    # 4. NaN/Inf injection: skipped steps, unchanged parameters, counted skips.
    inject = [
        {"update": 9, "phase": "critic", "field": "rewards"},
        {"update": 14, "phase": "actor", "field": "critic"},
    ]
    guarded = run_worker(
        patched_root,
        data,
        dict(
            base_config,
            learner=switches,
            inject=inject,
            snapshot_at=["9:critic", "10:critic", "14:actor", "15:critic"],
        ),
        workdir,
        "patched_injected",
    )
    unguarded = run_worker(
        baseline_root, data, dict(base_config, inject=inject), workdir, "baseline_injected"
    )
    checks["finite_guard_injection"] = injection_report(guarded, unguarded, updates_per_step)
    return checks


def injection_report(
    guarded: dict[str, Any], unguarded: dict[str, Any], updates_per_step: int
) -> dict[str, Any]:
    """Critic step 9 sees NaN/Inf rewards; actor step 14 sees NaN/Inf critic obs.

    Snapshots are taken before updates, so "before critic 10" is the state right after
    critic step 9 and its target update, and "before critic 15" the state after actor
    step 14. The poisoned actor step must leave the actor parameters and the actor
    optimizer bitwise unchanged; its forward pass still moves the actor's BatchNorm
    running statistics (finite: the poison is in the critic input), which are
    forward-time state and not guarded. The temperature step sees a finite loss and
    proceeds.
    """
    import torch

    snaps = guarded["snapshots"]

    def critic_side(state: dict[str, Any]) -> dict[str, Any]:
        # The poisoned forward still moves BatchNorm running statistics (forward-time
        # state, not guarded) and the scheduler still advances the learning rate.
        return {
            "critic": {k: v for k, v in state["critic"].items() if "running" not in k},
            "target_critic": {
                k: v for k, v in state["target_critic"].items() if "running" not in k
            },
            "critic_optimizer": state["critic_optimizer"]["state"],
        }

    critic_unchanged = compare_states(critic_side(snaps["9:critic"]), critic_side(snaps["10:critic"]))

    def actor_side(state: dict[str, Any]) -> dict[str, Any]:
        return {
            "actor": {k: v for k, v in state["actor"].items() if "running" not in k},
            "actor_optimizer": state["actor_optimizer"]["state"],
        }

    actor_unchanged = compare_states(actor_side(snaps["14:actor"]), actor_side(snaps["15:critic"]))
    temperature_moved = not compare_states(
        snaps["14:actor"]["temperature"], snaps["15:critic"]["temperature"]
    )["equal"]

    def all_finite(state: dict[str, Any]) -> bool:
        return all(
            bool(torch.isfinite(v).all())
            for _, v in _flatten({k: state[k] for k in ("actor", "critic", "target_critic")})
            if isinstance(v, torch.Tensor) and v.is_floating_point()
        )

    metrics = guarded["metrics"]
    critic_iteration, actor_iteration = 9 // updates_per_step, 14 // updates_per_step
    expected = {
        (critic_iteration, "critic_skip_rate"): 1.0 / updates_per_step,
        (actor_iteration, "actor_skip_rate"): 1.0,
    }
    skip_rates = {
        (i, key): m[key]
        for i, m in enumerate(metrics)
        for key in ("critic_skip_rate", "actor_skip_rate", "temperature_skip_rate")
    }
    skips_as_expected = all(value == expected.get(key, 0.0) for key, value in skip_rates.items())
    return {
        "passed": bool(
            critic_unchanged["equal"]
            and actor_unchanged["equal"]
            and temperature_moved
            and skips_as_expected
            and all_finite(guarded["state"])
        ),
        "critic_params_target_and_optimizer_unchanged_by_skipped_step": critic_unchanged,
        "actor_params_and_optimizer_unchanged_by_skipped_step": actor_unchanged,
        "temperature_step_still_applied": temperature_moved,
        "skip_rates_as_expected": skips_as_expected,
        "nonzero_skip_rates": {f"iter{i}:{k}": v for (i, k), v in skip_rates.items() if v},
        "guarded_final_parameters_finite": all_finite(guarded["state"]),
        "unguarded_baseline_final_parameters_finite": all_finite(unguarded["state"]),
    }


def compare_relative(
    reference: dict[str, Any], candidate: dict[str, Any], rel_tol: float
) -> dict[str, Any]:
    """Per tensor ||a - b|| / ||a|| <= rel_tol; per float |a - b| <= rel_tol * max(|a|, floor)."""
    import torch

    ref = dict(_flatten(reference))
    cand = dict(_flatten(candidate))
    worst: tuple[float, str] = (0.0, "")
    failures: list[str] = []
    for key in sorted(set(ref) | set(cand)):
        if key not in ref or key not in cand:
            failures.append(f"{key}: missing on one side")
            continue
        a, b = ref[key], cand[key]
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            a64, b64 = a.double(), b.double()
            scale = float(a64.norm())
            rel = float((a64 - b64).norm()) / scale if scale > 0 else float((b64).norm())
        elif isinstance(a, float):
            rel = abs(a - b) / max(abs(a), GPU_METRIC_ABS_FLOOR)
        else:
            rel = 0.0 if (a == b if not isinstance(a, torch.Tensor) else torch.equal(a, b)) else 1.0
        if not math.isfinite(rel) or rel > rel_tol:
            failures.append(f"{key}: {rel:.3g}")
        if math.isfinite(rel) and rel > worst[0]:
            worst = (rel, key)
    return {
        "passed": not failures,
        "rel_tol": rel_tol,
        "worst_relative_difference": worst[0],
        "worst_entry": worst[1],
        "failures": failures[:20],
        "failure_count": len(failures),
    }


GPU_CONFIGS: dict[str, dict[str, Any]] = {
    "eager": {"use_compile": False},
    "loss_only_compile": {"use_compile": True, "compile_full_objectives": False},
    "full_objective_compile": {"use_compile": True, "compile_full_objectives": True},
    "full_objective_compile_manual_graphs": {
        "use_compile": True,
        "compile_full_objectives": True,
        "use_cuda_graph_critic": True,
        "use_cuda_graph_actor": True,
    },
}


def gpu_checks(baseline_root: Path, patched_root: Path, workdir: Path) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    iterations, updates_per_step, policy_frequency = 12, 2, 2
    data = workdir / "data.pt"
    make_data(data, iterations, updates_per_step, batch_size=256)
    common = {
        "device": "cuda",
        "seed": 7,
        "updates_per_step": updates_per_step,
        "policy_frequency": policy_frequency,
        "fallback_random": True,
        "audit": True,
        "snapshot_at": [TIER_A_SNAPSHOT],
    }
    jobs: dict[str, tuple[Path, dict[str, Any]]] = {}
    for precision in ("fp32", "bf16"):
        for name, switches in GPU_CONFIGS.items():
            if precision == "bf16" and name == "loss_only_compile":
                continue
            learner = dict(GPU_LEARNER_KWARGS, **switches)
            learner.update(
                finite_guard=True,
                deferred_metrics=True,
                use_amp=precision == "bf16",
                amp_dtype="bf16",
            )
            jobs[f"patched/{precision}/{name}"] = (
                patched_root,
                dict(
                    common,
                    learner=learner,
                    warm_up=True,
                    explain=name == "full_objective_compile",
                ),
            )
    for name in ("eager", "loss_only_compile"):
        learner = dict(GPU_LEARNER_KWARGS, use_compile=name != "eager")
        jobs[f"baseline/fp32/{name}"] = (baseline_root, dict(common, learner=learner))

    def run(item: tuple[str, tuple[Path, dict[str, Any]]]) -> tuple[str, Any]:
        key, (root, config) = item
        return key, run_worker(root, data, config, workdir, key.replace("/", "_"))

    # Compilation is CPU-bound: four workers in parallel share the 16 cores.
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(pool.map(run, jobs.items()))

    checks: dict[str, Any] = {}
    base, patched = results["baseline/fp32/eager"], results["patched/fp32/eager"]
    baseline_keys = set().union(*(m.keys() for m in base["metrics"]))
    tier_a = compare_relative(
        base["snapshots"][TIER_A_SNAPSHOT], patched["snapshots"][TIER_A_SNAPSHOT], 1e-3
    )
    floor = compare_relative(
        {"state": base["state"], "m": base["metrics"]},
        {"state": patched["state"], "m": _metrics_only(patched["metrics"], baseline_keys)},
        float("inf"),
    )
    checks["fp32:patched_eager_vs_baseline_eager"] = {
        "passed": tier_a["passed"],
        "tier_a_after_first_iteration": tier_a,
        "tier_b_after_12_iterations_amplification_floor": floor,
    }
    floor_value = max(floor["worst_relative_difference"], GPU_REL_TOL["fp32"])
    for precision in ("fp32", "bf16"):
        reference = results[f"patched/{precision}/eager"]
        for name in GPU_CONFIGS:
            key = f"patched/{precision}/{name}"
            if key not in results or name == "eager":
                continue
            candidate = results[key]
            tier_a = compare_relative(
                reference["snapshots"][TIER_A_SNAPSHOT],
                candidate["snapshots"][TIER_A_SNAPSHOT],
                GPU_REL_TOL[precision],
            )
            tier_b_tol = TIER_B_FLOOR_FACTOR * floor_value
            tier_b = compare_relative(
                {"state": reference["state"], "m": reference["metrics"]},
                {"state": candidate["state"], "m": candidate["metrics"]},
                tier_b_tol if precision == "fp32" else float("inf"),
            )
            tier_b["gated"] = precision == "fp32"
            tier_b["tolerance_rule"] = (
                f"{TIER_B_FLOOR_FACTOR} x amplification floor {floor_value:.3g}"
                if precision == "fp32"
                else "reported only"
            )
            checks[f"{precision}:{name}_vs_eager"] = {
                "passed": tier_a["passed"] and tier_b["passed"],
                "tier_a_after_first_iteration": tier_a,
                "tier_b_after_12_iterations": tier_b,
            }
    explain = results["patched/fp32/full_objective_compile"]["explain"]
    checks["full_objective_graph_breaks"] = {
        "passed": all(
            item["graph_count"] == 1 and item["graph_break_count"] == 0
            for item in explain.values()
        ),
        "explain": explain,
    }
    per_config = {
        key: {
            "audit": result.get("audit"),
            "warm_up_seconds": result.get("warm_up_seconds"),
            "training_seconds_12_iterations": result.get("seconds"),
            "graphs_compiled_after_warm_up": result.get("graphs_compiled_after_warm_up"),
            "graph_breaks_counted_by_dynamo": result.get("graph_breaks"),
        }
        for key, result in results.items()
    }
    recommended = [k for k in per_config if k.startswith("patched/") and "compile" in k]
    checks["host_sync_audit"] = {
        "passed": all(
            per_config[k]["audit"]["host_syncs_in_cycle"] == 0
            and per_config[k]["audit"]["host_syncs_in_metrics_read"] == 1
            for k in per_config
            if k.startswith("patched/")
        ),
        "rule": "patched: zero host syncs inside one update cycle, one at the metrics read",
        "per_config": per_config,
    }
    checks["no_compilation_after_warm_up"] = {
        "passed": all(per_config[k]["graphs_compiled_after_warm_up"] == 0 for k in recommended),
        "configs": recommended,
    }
    return checks


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-root", type=Path)
    parser.add_argument("--patched-root", type=Path)
    parser.add_argument("--mode", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args)
        return 0
    if args.baseline_root is None or args.patched_root is None or args.output is None:
        parser.error("--baseline-root, --patched-root and --output are required")

    import torch

    versions = read_versions()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="validate_numerics_") as tmp:
        workdir = Path(tmp)
        if args.mode == "cpu":
            checks = cpu_checks(args.baseline_root, args.patched_root, workdir)
        else:
            checks = gpu_checks(args.baseline_root, args.patched_root, workdir)
    passed = all(item.get("passed", False) for item in checks.values() if isinstance(item, dict))
    device = (
        torch.cuda.get_device_name(0) if args.mode == "gpu" and torch.cuda.is_available() else "cpu"
    )
    report = {
        "passed": passed,
        "mode": args.mode,
        "device": device,
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "pinned": {k: versions.get(k) for k in ("TORCH_VERSION", "UNILAB_RL_BASE_VERSION")},
        "drift": {
            "torch": None
            if torch.__version__ == versions.get("TORCH_VERSION")
            else f"pinned {versions.get('TORCH_VERSION')}, ran {torch.__version__}",
            "device": None
            if device == versions.get("REFERENCE_GPU") or args.mode == "cpu"
            else f"reference {versions.get('REFERENCE_GPU')}, ran {device}",
        },
        "baseline_root": str(args.baseline_root),
        "patched_root": str(args.patched_root),
        "seconds": round(time.perf_counter() - started, 1),
        "checks": checks,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(json.dumps({"passed": passed, "output": str(args.output)}))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
