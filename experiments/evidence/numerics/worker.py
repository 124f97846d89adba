"""One learner run in its own interpreter: ``validate_numerics.py --worker`` (started by ``modes.run_worker``).

The worker's root (a directory holding a ``uni_rl/`` package) is first on ``sys.path``,
so the baseline and the patched ``uni_rl`` never share an interpreter. It replays the
update schedule of ``DoubleBufferOffPolicyRunner`` on the parent's batches (per
iteration: reward statistics, then the runner's updates), runs the probes its
``WorkerConfig`` asks for, and saves one result dict with ``torch.save``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import learner_study

from .config import WorkerConfig
from .learner import (
    build_learner,
    enable_cpu_inductor,
    import_uni_rl,
    poisoned,
    rates,
    resume_from_cpu_checkpoint,
    scheduled_rates,
    state_of,
)
from .probes import (
    audit_cycle,
    count_requires_grad_toggles,
    explain_objectives,
    first_update_probe,
    inference_probe,
)


def run_schedule(
    learner: Any,
    batches: list[dict[str, Any]],
    reward_chunks: list[dict[str, Any]],
    config: WorkerConfig,
    on_update: Callable[[int, str], None] | None = None,
    overrides: dict[tuple[int, str], dict[str, Any]] | None = None,
) -> list[dict[str, float]]:
    """The runner's update order; returns the per-iteration mean metrics.

    ``overrides`` replaces the batch of one phase ("critic"/"actor") of one update.
    ``on_update(index, phase)`` runs before each update (the whole-cycle graph: before
    each iteration's first, the only boundary it has).
    """
    overrides = overrides or {}
    updates_per_step, device = int(config.updates_per_step), config.device
    if learner_study.whole_cycle(learner) and overrides:
        raise ValueError("batch overrides need per-update calls, which the whole-cycle graph lacks")
    per_iteration: list[dict[str, float]] = []
    for iteration in range(len(batches) // updates_per_step):
        chunk = reward_chunks[iteration]
        learner.update_reward_stats(chunk["rewards"].to(device), chunk["dones"].to(device))
        first = iteration * updates_per_step
        iteration_batches = [
            {k: v.to(device) for k, v in batch.items()} for batch in batches[first : first + updates_per_step]
        ]
        critic_batches = [overrides.get((first + i, "critic"), b) for i, b in enumerate(iteration_batches)]
        actor_batches = [overrides.get((first + i, "actor"), b) for i, b in enumerate(iteration_batches)]

        def before(update_idx: int, phase: str, first: int = first) -> None:
            if on_update is not None:
                on_update(first + update_idx, phase)

        iter_metrics: defaultdict[str, list[float]] = defaultdict(list)
        for metrics in learner_study.run_iteration(
            learner,
            critic_batches,
            int(config.policy_frequency),
            actor_batches=None if learner_study.whole_cycle(learner) else actor_batches,
            before=before,
        ):
            for key, value in metrics.items():
                iter_metrics[key].append(value)
        if getattr(learner, "deferred_metrics", False):
            for key, value in learner.read_deferred_metrics().items():
                iter_metrics[key].append(value)
        per_iteration.append({k: statistics.mean(v) for k, v in iter_metrics.items() if v})
    return per_iteration


def worker_main(root: str, data_path: str, config_path: str, out: str) -> None:
    """Run one worker: build, (probe,) train on the parent's batches, (probe,) save the result."""
    learner_module = import_uni_rl(root)
    import torch
    from torch._dynamo.utils import counters

    config = WorkerConfig.read(Path(config_path))
    if config.compile_on_cpu:
        enable_cpu_inductor(learner_module)
    data = torch.load(data_path, weights_only=True)
    if config.fallback_random:
        # Compiled code draws the same random numbers as eager, so the configurations
        # can be compared update by update.
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = True
    learner = build_learner(learner_module, config)
    result: dict[str, Any] = {"uni_rl_file": learner_module.__file__}
    batches = _input_batches(data["batches"], config)
    overrides = _injected(batches, config)
    if config.count_requires_grad_toggles:
        result.update(_frozen_critic_probe(learner, batches[0], config))
        learner = build_learner(learner_module, config)
    if config.warm_up:
        result["warm_up_seconds"] = _warm_up(learner, batches[0], config)
    if config.resume_from_cpu_checkpoint:
        # After the warm-up, as a resume of a warmed-up learner: its graphs are captured
        # (on the graph paths), so the load must keep the rate tensors and recapture.
        result["checkpoint"] = resume_from_cpu_checkpoint(learner_module, learner, config, batches[0])
    graphs_before = int(counters["stats"]["unique_graphs"])
    if config.first_update_probe:
        # After ``graphs_before``: a probe that compiled anything would count as a
        # compilation after the warm-up.
        first_batch = {k: v.to(config.device) for k, v in batches[0].items()}
        first_chunk = {k: v.to(config.device) for k, v in data["reward_chunks"][0].items()}
        result["first_update"] = first_update_probe(learner, first_batch, first_chunk)
    for item in config.poison:
        index, field = int(item["update"]), item["field"]
        batches[index] = dict(batches[index], **{field: poisoned(batches[index][field])})
    result.update(_train(learner, batches, data["reward_chunks"], config, overrides, result.get("checkpoint")))
    result["graphs_compiled_after_warm_up"] = int(counters["stats"]["unique_graphs"]) - graphs_before
    result["graph_breaks"] = sum(counters["graph_break"].values())
    result["graphs_compiled_total"] = int(counters["stats"]["unique_graphs"])
    # fp32 numbers depend on it: TF32 matmuls round inputs to 10 mantissa bits.
    result["tf32"] = {
        "matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn": bool(torch.backends.cudnn.allow_tf32),
    }
    result.update(_after_training_probes(learner, batches, config))
    torch.save(result, out)


def _input_batches(batches: list[dict[str, Any]], config: WorkerConfig) -> list[dict[str, Any]]:
    """The parent's batches; with ``one_ulp_rewards``, the first batch's rewards one ulp up.

    That is the amplification floor's perturbation: the smallest change an fp32 input can take.
    """
    if not config.one_ulp_rewards:
        return batches
    import torch

    first = dict(batches[0])
    rewards = first["rewards"]
    first["rewards"] = torch.nextafter(rewards, torch.full_like(rewards, math.inf))
    return [first, *batches[1:]]


def _injected(batches: list[dict[str, Any]], config: WorkerConfig) -> dict[tuple[int, str], dict[str, Any]]:
    """``config.inject`` as per-(update, phase) replacement batches on the device."""
    overrides: dict[tuple[int, str], dict[str, Any]] = {}
    for item in config.inject:
        index, phase, field = int(item["update"]), item["phase"], item["field"]
        bad = dict(batches[index], **{field: poisoned(batches[index][field])})
        overrides[(index, phase)] = {k: v.to(config.device) for k, v in bad.items()}
    return overrides


def _frozen_critic_probe(learner: Any, first: dict[str, Any], config: WorkerConfig) -> dict[str, Any]:
    """``requires_grad`` toggles in one actor update, and whether it left the critic's gradients None.

    It trains the learner: the caller builds a fresh one afterwards.
    """
    batch = {k: v.to(config.device) for k, v in first.items()}
    learner.update_critic(batch)
    for param in learner.critic.parameters():
        param.grad = None
    result = {
        "requires_grad_toggles_in_actor_update": count_requires_grad_toggles(lambda: learner.update_actor(batch)),
        "critic_grads_none_after_actor_update": all(p.grad is None for p in learner.critic.parameters()),
    }
    if getattr(learner, "deferred_metrics", False):
        learner.read_deferred_metrics()
    return result


def _warm_up(learner: Any, first: dict[str, Any], config: WorkerConfig) -> float:
    """The runner's warm-up; its seconds.

    A dry (zero) batch of the real layout, after which the state must be exactly the
    state before, so training below equals the baseline's.
    """
    import torch

    dry = {k: torch.zeros_like(v).to(config.device) for k, v in first.items()}
    start = time.perf_counter()
    learner_study.warm_up(learner, dry, int(config.updates_per_step), int(config.policy_frequency))
    return time.perf_counter() - start


def _train(
    learner: Any,
    batches: list[dict[str, Any]],
    reward_chunks: list[dict[str, Any]],
    config: WorkerConfig,
    overrides: dict[tuple[int, str], dict[str, Any]],
    checkpoint: dict[str, Any] | None,
) -> dict[str, Any]:
    """The schedule over all batches: metrics, seconds, what it ran and the state it left.

    ``checkpoint`` (a resumed run's report) gets the rates the training ended with.
    """
    import torch

    snapshots: dict[str, Any] = {}
    snapshot_at = set(config.snapshot_at)

    def on_update(index: int, phase: str) -> None:
        if f"{index}:{phase}" in snapshot_at:
            snapshots[f"{index}:{phase}"] = state_of(learner)

    result: dict[str, Any] = {}
    start = time.perf_counter()
    result["metrics"] = run_schedule(
        learner, batches, reward_chunks, config, on_update=on_update if snapshot_at else None, overrides=overrides
    )
    result["seconds"] = time.perf_counter() - start
    # False after a fallback (capture failure etc.): the run then measured the
    # per-update path, not the graph.
    result["whole_cycle_graph_active"] = learner_study.whole_cycle(learner)
    result["whole_cycle_graph_requested"] = bool(config.learner.get("use_whole_cycle_cuda_graph"))
    if checkpoint is not None:
        checkpoint["final_rates"] = rates(learner)
        checkpoint["scheduled_rates"] = scheduled_rates(learner)
    if config.poison:
        # What the collector would get now, through the learner's inference policy.
        obs = batches[0]["obs"].to(config.device)
        dones = torch.zeros(obs.shape[0], device=obs.device)
        actions = learner.inference_policy.explore(obs, dones=dones)
        result["explore_finite"] = bool(torch.isfinite(actions).all())
    result["state"] = state_of(learner)
    result["snapshots"] = snapshots
    return result


def _after_training_probes(learner: Any, batches: list[dict[str, Any]], config: WorkerConfig) -> dict[str, Any]:
    """The audits, the objectives' graph explanation and the inference probe, as configured."""
    result: dict[str, Any] = {}
    device, policy_frequency = config.device, int(config.policy_frequency)
    if config.audit:
        device_batches = [{k: v.to(device) for k, v in b.items()} for b in batches[: int(config.updates_per_step)]]
        result["audit"] = audit_cycle(learner, device_batches, policy_frequency)
        if config.audit_updates:
            # The large schedule too (e.g. 8 critic / 4 actor updates): after the gated
            # checks above, since a whole-cycle graph captures again for it.
            large = [{k: v.to(device) for k, v in b.items()} for b in batches[: int(config.audit_updates)]]
            result["audit_large"] = audit_cycle(learner, large, policy_frequency)
    if config.explain:
        result["explain"] = explain_objectives(learner, batches[0], device)
    if config.inference_probe:
        result["inference"] = inference_probe(learner, batches[0]["obs"].to(device))
    return result
