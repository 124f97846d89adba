"""What the learner studies share: the small learner, synthetic batches and the runner's update loop.

validate_numerics.py (the ``numerics`` package) and validate_replay_stability.py drive the
FlashSAC learner directly, without environments, exactly as ``DoubleBufferOffPolicyRunner``
drives it per iteration. Both must build the same learner shape, draw batches the same
way and call the learner through the same entry points in the same order, so those live
here once. ``uni_rl`` is imported lazily (from whichever root the calling process put
first), never at import time: the numerics parent process never imports it at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Learner input sizes: small enough for 2 CPU cores, the same structure as the G1 setting.
DIMS = {"obs_dim": 24, "critic_obs_dim": 30, "action_dim": 6}
#: The learner arguments every study shares (its model: return discount, target rate, atoms).
BASE_LEARNER_KWARGS: dict[str, Any] = {"gamma": 0.97, "tau": 0.01, "num_atoms": 101}
#: The hidden sizes the GPU studies use (the CPU numerics run uses smaller ones).
GPU_HIDDEN_DIMS: dict[str, int] = {"actor_hidden_dim": 128, "critic_hidden_dim": 256}

#: ``phase_hook(update_idx, phase)``: called around each critic/actor update of an iteration.
PhaseHook = Callable[[int, str], None]


def random_batch(torch: Any, generator: Any, batch_size: int, dims: dict[str, int] = DIMS) -> dict[str, Any]:
    """One replay batch of the runner's layout for a learner of ``dims``, drawn from ``generator`` in a fixed order."""

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, generator=generator)

    return {
        "obs": randn(batch_size, dims["obs_dim"]),
        "next_obs": randn(batch_size, dims["obs_dim"]),
        "actions": torch.tanh(randn(batch_size, dims["action_dim"])),
        "rewards": randn(batch_size) * 0.5 + 0.2,
        "dones": (torch.rand(batch_size, generator=generator) < 0.05).float(),
        "truncated": (torch.rand(batch_size, generator=generator) < 0.02).float(),
        "critic": randn(batch_size, dims["critic_obs_dim"]),
        "next_critic": randn(batch_size, dims["critic_obs_dim"]),
    }


def build_learner(learner_module: Any, device: str, seed: int, kwargs: dict[str, Any]) -> Any:
    """A ``FlashSACLearner`` of ``DIMS`` with ``kwargs``, its initialization seeded by ``seed``."""
    import torch

    torch.manual_seed(seed)
    if device.startswith("cuda"):
        torch.cuda.manual_seed_all(seed)
    return learner_module.FlashSACLearner(device=device, **{**kwargs, **DIMS})


def whole_cycle(learner: Any) -> bool:
    """Whether the learner runs each iteration as one CUDA graph replay (the whole-cycle patches)."""
    return bool(getattr(learner, "use_whole_cycle_cuda_graph", False))


def runner_schedule(updates_per_step: int, policy_frequency: int) -> Any:
    """The runner's update schedule of one iteration, from the ``uni_rl`` the process imported."""
    from flashsac_runtime.learner.update_schedule import iteration_update_schedule

    return iteration_update_schedule(updates_per_step, policy_frequency)


def iteration_batch(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """The runner's one sampled batch of an iteration: the update batches concatenated per field."""
    import torch

    return {key: torch.cat([batch[key] for batch in batches]) for key in batches[0]}


def update_iteration(learner: Any, batches: list[dict[str, Any]], schedule: Any) -> list[dict[str, float]]:
    """``batches`` as one ``update_iteration`` call with ``schedule``, as the runner hands them over."""
    return learner.update_iteration(
        iteration_batch(batches), batch_size=int(batches[0]["obs"].shape[0]), schedule=schedule
    )


def critic_update(learner: Any, batch: dict[str, Any], read_metrics: bool) -> Any:
    """One critic update through the entry point the runner uses for the learner's path."""
    if getattr(learner, "use_cuda_graph_critic", False):
        return learner.update_critic_cuda_graph(batch, read_metrics=read_metrics)
    return learner.update_critic(batch)


def actor_update(learner: Any, batch: dict[str, Any], read_metrics: bool) -> Any:
    """One actor update through the entry point the runner uses for the learner's path."""
    if getattr(learner, "use_cuda_graph_actor", False):
        return learner.update_actor_cuda_graph(batch, read_metrics=read_metrics)
    return learner.update_actor(batch)


def run_iteration(
    learner: Any,
    batches: list[dict[str, Any]],
    policy_frequency: int,
    *,
    read_metrics: bool = True,
    actor_batches: list[dict[str, Any]] | None = None,
    before: PhaseHook | None = None,
    after: PhaseHook | None = None,
) -> list[dict[str, float]]:
    """One runner iteration of ``len(batches)`` updates; the metrics each call returned, in order.

    Per update: a critic update, an actor update every ``policy_frequency`` updates, a
    target update. ``actor_batches`` gives the actor updates other batches (a poisoned
    one); ``before``/``after`` run around each update. The whole-cycle graph has no
    per-update calls: the iteration is one ``update_iteration`` (``before(0, "critic")``
    runs before it; per-update batches and ``after`` have nothing to attach to there).
    """
    if whole_cycle(learner):
        if actor_batches is not None or after is not None:
            raise ValueError("per-update batches and hooks need per-update calls, which the whole-cycle graph lacks")
        if before is not None:
            before(0, "critic")
        return list(update_iteration(learner, batches, runner_schedule(len(batches), policy_frequency)))
    metrics = []
    for update_idx, batch in enumerate(batches):
        if before is not None:
            before(update_idx, "critic")
        metrics.append(critic_update(learner, batch, read_metrics))
        if after is not None:
            after(update_idx, "critic")
        if update_idx % policy_frequency == 0:
            if before is not None:
                before(update_idx, "actor")
            actor_batch = batch if actor_batches is None else actor_batches[update_idx]
            metrics.append(actor_update(learner, actor_batch, read_metrics))
            if after is not None:
                after(update_idx, "actor")
        learner.soft_update_target()
    return metrics


def warm_up(learner: Any, dry: dict[str, Any], updates_per_step: int, policy_frequency: int) -> None:
    """The runner's warm-up on a dry batch of the real layout (the whole-cycle graph: whole iterations)."""
    import torch

    if whole_cycle(learner):
        # As the runner warms it: whole dry iterations, so the graph is captured here.
        learner.warm_up(
            dry,
            inference_obs=dry["obs"],
            iteration_batch={k: torch.cat([v] * updates_per_step) for k, v in dry.items()},
            schedule=runner_schedule(updates_per_step, policy_frequency),
        )
    else:
        learner.warm_up(dry, inference_obs=dry["obs"])
