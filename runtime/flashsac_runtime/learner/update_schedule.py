"""The per-iteration update schedule of the off-policy runner, as data.

The runner's train phase performs, for each of ``updates_per_step`` batches, a critic
update, an actor (and temperature) update every ``policy_frequency`` batches, and a
target update. The per-update loop of ``DoubleBufferOffPolicyRunner`` and the FlashSAC
whole-iteration CUDA graph both execute this one schedule, so a captured iteration
cannot drift from the order the runner would use update by update.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal

import torch

UpdateKind = Literal["critic", "actor", "target"]


@dataclass(frozen=True)
class ScheduledUpdate:
    """One update of an iteration.

    ``update_idx`` selects the batch slice (see ``batch_slice``); ``read_metrics`` marks
    the last update of its kind, the one whose metrics the per-update CUDA graph paths
    read as floats when metrics are not deferred.
    """

    kind: UpdateKind
    update_idx: int
    read_metrics: bool


@functools.lru_cache(maxsize=32)
def iteration_update_schedule(
    updates_per_step: int, policy_frequency: int
) -> tuple[ScheduledUpdate, ...]:
    """The updates of one runner iteration, in the order the runner performs them."""
    if updates_per_step < 0 or policy_frequency < 1:
        raise ValueError(
            "updates_per_step must be >= 0 and policy_frequency positive, got "
            f"{updates_per_step} and {policy_frequency}"
        )
    schedule: list[ScheduledUpdate] = []
    for update_idx in range(updates_per_step):
        schedule.append(
            ScheduledUpdate("critic", update_idx, update_idx == updates_per_step - 1)
        )
        if update_idx % policy_frequency == 0:
            last_actor = update_idx + policy_frequency >= updates_per_step
            schedule.append(ScheduledUpdate("actor", update_idx, last_actor))
        schedule.append(ScheduledUpdate("target", update_idx, False))
    return tuple(schedule)


def batch_slice(update_idx: int, batch_size: int) -> slice:
    """Rows of the iteration's sampled batch that update ``update_idx`` trains on."""
    start = update_idx * batch_size
    return slice(start, start + batch_size)


def slice_batch(
    large_batch: dict[str, torch.Tensor], update_idx: int, batch_size: int
) -> dict[str, torch.Tensor]:
    """The views of ``large_batch`` for update ``update_idx`` (no copy)."""
    rows = batch_slice(update_idx, batch_size)
    return {key: value[rows] for key, value in large_batch.items()}


def run_scheduled_update(
    learner: Any, update: ScheduledUpdate, batch: dict[str, torch.Tensor]
) -> dict[str, float]:
    """Perform one scheduled update through the learner's per-update entry points.

    Critic and actor updates go through the learner's per-update CUDA graph when it
    has one switched on, exactly as the runner dispatched them before.
    """
    if update.kind == "critic":
        if getattr(learner, "use_cuda_graph_critic", False) and hasattr(
            learner, "update_critic_cuda_graph"
        ):
            return learner.update_critic_cuda_graph(batch, read_metrics=update.read_metrics)
        return learner.update_critic(batch)
    if update.kind == "actor":
        if getattr(learner, "use_cuda_graph_actor", False) and hasattr(
            learner, "update_actor_cuda_graph"
        ):
            return learner.update_actor_cuda_graph(batch, read_metrics=update.read_metrics)
        return learner.update_actor(batch)
    learner.soft_update_target()
    return {}
