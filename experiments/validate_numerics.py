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
full-objective compile + manual CUDA graphs, whole-cycle CUDA graph) of the patched
learner against patched eager, fp32 and bf16 autocast: the first update's losses,
gradients and BatchNorm statistics, and the drift after 12 iterations relative to the
measured drift of a one-ulp change (tolerances and their grounds: see the constants
below); the patched eager learner's first critic update against the baseline's; graph breaks and
recompiles of the compiled objectives; a host-sync audit and a kernel-launch count of
one update cycle per configuration, at 2 critic / 1 actor and at 8 / 4 updates; the
launches of one collector inference request, eager and graphed.

The same configurations and gates run on CPU too (tests/test_learner_patches.py): a
worker config ``compile_on_cpu`` lifts the learner's CUDA-only compile gate so that
Inductor's C++ backend compiles the very objectives the CUDA path compiles, and
``compare_configurations`` applies GPU mode's rules to the results.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_configs  # noqa: E402  (the configuration table)
import bench_env  # noqa: E402  (VERSIONS.env, drift: one reader for the whole project)

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
# GPU mode. Compiled code draws eager's random numbers here (Inductor
# ``fallback_random``), so configurations differ by float rounding only: compiled
# objectives fuse and reorder reductions, and bf16 autocast rounds at different points
# when Inductor fuses ops (eager rounds every op output to bf16). What is gated:
#
# (a) The first update (``first_update_probe``): one critic and one actor update, each
#     from the same pre-training state, so nothing earlier can amplify a difference.
#     Losses: |a - b| / max(|a|, GPU_METRIC_ABS_FLOOR). Gradients (the ones the first
#     Adam step consumed): ||a - b|| / ||a|| per tensor. BatchNorm running statistics:
#     see (c). fp32 tolerances (FIRST_UPDATE_FP32_TOL) are measured rounding floors
#     times a margin: full-objective compile vs eager on CPU (Inductor C++, torch 2.8,
#     this learner at batch 64) gave losses <= 9e-8, gradients <= 3.6e-6, BatchNorm
#     batch statistics <= 1.2e-7 (loss-only compile: bitwise). A real defect (a lost,
#     doubled or misplaced BatchNorm update, a different input, a missed restore) moves
#     these by 1e-3..1 (a missed update of a running variance alone: momentum 0.01 times
#     an O(1) batch variance change, i.e. ~1e-2 in (c)'s units). bf16 has no fixed
#     floor: its rounding error depends on the device's kernels, so it is measured in
#     the same run as eager bf16 vs eager fp32 per quantity (the error of rounding to
#     bf16 at all), and a bf16 candidate may differ from eager bf16 by
#     BF16_FLOOR_FACTOR times that: 2 by the triangle inequality if the candidate is no
#     less accurate than eager (it rounds at fewer points), plus 1 for slack.
# (b) After all 12 iterations: this learner amplifies any last-bit difference (the
#     argmin over the two critics and Adam's first steps, g / |g| per component, switch
#     discretely), so the bound is relative to the measured amplification of a one-ulp
#     change: patched vs unpatched eager differ only in the TD projection dividing by
#     the bin width as a device tensor where 1.3.2 divided by a host float (which CUDA
#     turns into a multiplication by its reciprocal). fp32 configurations must stay
#     within TIER_B_FLOOR_FACTOR times that floor (at least TIER_B_MIN_FLOOR); bf16 is
#     reported against it, not gated.
# (c) BatchNorm running statistics are compared in the units of the batch statistics
#     that moved them, not relative to their own norm: the first update takes a running
#     mean from 0 to momentum * batch mean, and where the batch mean is zero by
#     construction (a bias-free linear layer after a zero-bias BatchNorm, e.g.
#     actor.encoder.0.norm1) that norm is rounding noise (~3e-9) and ||a - b|| / ||a||
#     is ~1 for a one-ulp difference. Per channel: |d running_mean| / (momentum *
#     sqrt(batch_var + eps)) and |d running_var| / (momentum * (batch_var + eps)), the
#     batch variance recovered from the running variance before and after the update.
#     A layer that the reference update did not move must stay bitwise unchanged.
#
# Reported, not gated: the whole state after the first iteration (2 critic, 1 actor, 2
# target updates). Adam's first step moves each parameter by about lr * sign(grad), so a
# gradient component at rounding level flips sign and the parameter by 2 * lr: that is
# amplification, not rounding, and (a) gates the gradients themselves.
FIRST_UPDATE_FP32_TOL = {"loss": 1e-5, "gradient": 1e-4, "batchnorm": 1e-5}
BF16_FLOOR_FACTOR = 3.0
# A loss is one number, so its measured bf16 floor is one sample of rounding error and
# can be small by chance (on the H200, eager bf16 and eager fp32 critic losses agreed to
# < 3.6e-6 while compiled bf16 differed from eager bf16 by 1.1e-5). Its bf16 tolerance is
# therefore at least the expected rounding of a batch mean of bf16 terms: unit roundoff
# 2**-9 over sqrt(batch 256) = 1.2e-4, still ten times below what a defect moves (1e-3..1).
BF16_MIN_TOL = {"loss": 2.0**-9 / math.sqrt(256)}
GPU_METRIC_ABS_FLOOR = 1e-4
TIER_A_REPORT_TOL = {"fp32": 1e-3, "bf16": 2e-2}
TIER_B_FLOOR_FACTOR = 5.0
TIER_B_MIN_FLOOR = 1e-3
TIER_A_SNAPSHOT = "2:critic"
# Before the first actor update: the state after exactly one critic update (and no
# target update), which the baseline, without the probe, offers for the critic.
FIRST_CRITIC_SNAPSHOT = "0:actor"
GPU_LEARNER_KWARGS = {"actor_hidden_dim": 128, "critic_hidden_dim": 256}
# One bad batch, then clean ones (patch 0016), in a run resumed from a CPU learner's
# checkpoint (patch 0017). ``poison``: NaN/Inf in one field of one update's batch, which
# every path reads (the whole-cycle graph takes the batch as the runner hands it): an
# observation at the first update of iteration 2 (skips that iteration's actor and
# temperature steps) and a critic input at the first update of iteration 4 (skips a
# critic step, and the actor step that reads it through the frozen critic). Snapshots
# around iteration 2 show its skipped actor step left the actor bitwise as it was.
ROBUSTNESS_CONFIG: dict[str, Any] = {
    "poison": [{"update": 4, "field": "obs"}, {"update": 8, "field": "critic"}],
    "snapshot_at": ["4:critic", "6:critic"],
    "resume_from_cpu_checkpoint": True,
}
# Which steps a poisoned field skips (see ROBUSTNESS_CONFIG).
POISON_SKIPS = {"obs": ("actor", "temperature"), "critic": ("critic", "actor")}
SKIP_RATE_KEYS = ("critic_skip_rate", "actor_skip_rate", "temperature_skip_rate")


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


def _whole_cycle(learner: Any) -> bool:
    """Whether the learner runs each iteration as one CUDA graph replay (patches 0011-0013)."""
    return bool(getattr(learner, "use_whole_cycle_cuda_graph", False))


def _iteration_call(
    learner: Any,
    batches: list[dict[str, Any]],
    schedule: Any,
) -> list[dict[str, float]]:
    """``batches`` as one iteration through ``update_iteration``, as the runner hands it.

    The batches are concatenated into the runner's one sampled batch; ``schedule`` is a
    tuple of ``ScheduledUpdate`` (the runner's, or a one-update schedule for a probe).
    """
    import torch

    large = {key: torch.cat([batch[key] for batch in batches]) for key in batches[0]}
    return learner.update_iteration(
        large, batch_size=int(batches[0]["obs"].shape[0]), schedule=schedule
    )


def _runner_schedule(updates_per_step: int, policy_frequency: int) -> Any:
    from uni_rl.algos.common.update_schedule import iteration_update_schedule

    return iteration_update_schedule(updates_per_step, policy_frequency)


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
    whole_cycle = _whole_cycle(learner)
    if whole_cycle and overrides:
        raise ValueError("batch overrides need per-update calls, which the whole-cycle graph lacks")
    for iteration in range(iterations):
        chunk = reward_chunks[iteration]
        learner.update_reward_stats(chunk["rewards"].to(device), chunk["dones"].to(device))
        iter_metrics: defaultdict[str, list[float]] = defaultdict(list)
        if whole_cycle:
            # One replay per iteration: only the iteration's first update has a state
            # to snapshot before it (TIER_A_SNAPSHOT is such a boundary).
            first = iteration * updates_per_step
            if on_update is not None:
                on_update(first, "critic")
            iteration_batches = [
                {k: v.to(device) for k, v in batch.items()}
                for batch in batches[first : first + updates_per_step]
            ]
            for metrics in _iteration_call(
                learner, iteration_batches, _runner_schedule(updates_per_step, policy_frequency)
            ):
                for key, value in metrics.items():
                    iter_metrics[key].append(value)
        for update_idx in range(0 if whole_cycle else updates_per_step):
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

    One uncounted cycle runs first, so that what a first call of a schedule does once
    (the whole-cycle graph's capture for a new schedule, a CUDA-graph recording) is
    not counted. Syncs: ``torch.cuda.set_sync_debug_mode("warn")`` makes every synchronizing CUDA
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

    if _whole_cycle(learner):
        # The runner hands the sampled batch over as one tensor per field: concatenated
        # here, outside the counted cycle, which is then one ``update_iteration`` call.
        large = {key: torch.cat([batch[key] for batch in batches]) for key in batches[0]}
        schedule = _runner_schedule(len(batches), policy_frequency)
        batch_size = int(batches[0]["obs"].shape[0])

        def cycle() -> None:
            learner.update_iteration(large, batch_size=batch_size, schedule=schedule)

    else:

        def cycle() -> None:
            _one_cycle(learner, batches, policy_frequency)

    def cycle_and_read() -> None:
        cycle()
        if deferred:
            learner.read_deferred_metrics()

    cycle_and_read()  # uncounted
    torch.cuda.synchronize()
    syncs_in_cycle = count_syncs(cycle)
    syncs_in_read = count_syncs(learner.read_deferred_metrics) if deferred else 0
    torch.cuda.synchronize()
    return {
        "updates_in_cycle": len(batches),
        "host_syncs_in_cycle": syncs_in_cycle,
        "host_syncs_in_metrics_read": syncs_in_read,
        **count_cuda_calls(cycle_and_read),
    }


def count_cuda_calls(fn: Callable[[], Any]) -> dict[str, Any]:
    """The CUDA runtime/driver launch and copy calls the host made in ``fn``, and the
    kernels and copies the device executed, recorded by ``torch.profiler``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    host_calls: dict[str, int] = {}
    device_kernels = 0
    for event in prof.events():
        name = event.name
        if event.device_type == torch.autograd.DeviceType.CUDA:
            device_kernels += 1
        elif name.startswith(("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "cudaMemcpy")):
            host_calls[name] = host_calls.get(name, 0) + 1
    return {
        "host_launch_calls": sum(v for k, v in host_calls.items() if "Launch" in k),
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


def _enable_cpu_inductor(learner_module: Any) -> None:
    """Let ``use_compile`` compile on CPU (Inductor's C++ backend) for this worker.

    The learner asks ``get_torch_compile_for_cuda`` for a compile function, and that gate
    answers None for any non-CUDA device, so on CPU the compiled objectives would silently
    stay eager. The worker swaps the gate (the name the learner module imported) for the
    real ``torch.compile``: the objectives, options and call sites are the learner's own,
    only the device check is lifted, so CPU runs exercise the same compiled graphs (minus
    CUDA graphs, which do not exist on CPU and whose options Inductor ignores there).
    """
    import torch

    def cpu_or_cuda_compile(device: Any, *, warn: bool = False) -> Callable[..., Any]:
        return torch.compile

    learner_module.get_torch_compile_for_cuda = cpu_or_cuda_compile


def _update_phase(learner: Any, phase: str, batch: dict[str, Any]) -> dict[str, float]:
    """One critic or actor update through the entry point the runner uses for it.

    The whole-cycle graph has no per-update entry point: the update runs as a
    captured one-update iteration (a schedule of just that update), so the probe
    measures the graph's own first update.
    """
    if _whole_cycle(learner):
        from uni_rl.algos.common.update_schedule import ScheduledUpdate

        metrics = {}
        for update_metrics in _iteration_call(learner, [batch], (ScheduledUpdate(phase, 0, True),)):
            metrics.update(update_metrics)
    elif phase == "critic":
        if getattr(learner, "use_cuda_graph_critic", False):
            metrics = learner.update_critic_cuda_graph(batch, read_metrics=True)
        else:
            metrics = learner.update_critic(batch)
    elif getattr(learner, "use_cuda_graph_actor", False):
        metrics = learner.update_actor_cuda_graph(batch, read_metrics=True)
    else:
        metrics = learner.update_actor(batch)
    if getattr(learner, "deferred_metrics", False):
        metrics = dict(metrics)
        metrics.update(learner.read_deferred_metrics())
    return dict(metrics)


def _first_step_gradients(learner: Any, phase: str) -> dict[str, Any]:
    """The gradients the first optimizer step consumed, read back from Adam's state.

    After exactly one Adam step from a zero state, ``exp_avg = (1 - beta1) * grad``
    (``lerp`` from zero), on every update path alike: eager, compiled, and the manual
    CUDA graph path, whose ``.grad`` tensors live in the graph's pool and are not
    reachable from the parameters. Dividing by ``1 - beta1`` recovers the gradient to
    within one rounding, the same rounding for every configuration.
    """
    owners = {
        "critic": (("critic", learner.critic_optimizer, learner.critic),),
        "actor": (
            ("actor", learner.actor_optimizer, learner.actor),
            ("temperature", learner.temperature_optimizer, learner.temperature),
        ),
    }[phase]
    gradients: dict[str, Any] = {}
    for prefix, optimizer, module in owners:
        beta1 = float(optimizer.param_groups[0]["betas"][0])
        for name, param in module.named_parameters():
            state = optimizer.state[param]
            steps = float(state["step"])
            if steps != 1.0:
                raise RuntimeError(f"{prefix}.{name}: {steps} optimizer steps, expected 1")
            gradients[f"{prefix}.{name}"] = (
                state["exp_avg"].detach().to("cpu", copy=True) / (1.0 - beta1)
            )
    return gradients


def _batchnorm_stats(learner: Any) -> dict[str, Any]:
    """Every BatchNorm running statistic of the actor, critic and target critic."""
    stats: dict[str, Any] = {}
    for prefix in ("actor", "critic", "target_critic"):
        for name, buffer in getattr(learner, prefix).named_buffers():
            if name.endswith(("running_mean", "running_var")):
                stats[f"{prefix}.{name}"] = buffer.detach().to("cpu", copy=True)
    return stats


def first_update_probe(
    learner: Any, batch: dict[str, Any], reward_chunk: dict[str, Any]
) -> dict[str, Any]:
    """Losses, gradients and BatchNorm statistics of a first critic and a first actor update.

    Both updates start from the same state, the learner's state before training (after
    the warm-up) with the first iteration's reward statistics folded in, as the schedule
    does before its first update (so the probe's critic update is bitwise the schedule's
    first one): the critic update runs, its numbers are read, then the learner's own
    warm-up restore (``_restore_training_state``, bitwise in CPU mode) puts every piece
    of state back, RNG included, and the actor update runs from there; a last restore
    leaves the learner exactly as before the probe, so the schedule that follows is
    unaffected. Every configuration thus computes its first update of each kind from
    bitwise equal parameters, statistics, inputs and random numbers, and the differences
    are that of one objective evaluation, backward and optimizer step: rounding, with no
    earlier step to amplify it.
    """
    import copy

    import torch

    snapshot = learner._training_state_snapshot()
    # The restore writes tensors back in place; the reward normalizer's per-env return
    # ``g_r`` is rebound (not written) when the first reward chunk gives it its shape, so
    # it escapes that restore and is put back through the normalizer's own state dict.
    normalizer = learner.reward_normalizer
    normalizer_state = copy.deepcopy(normalizer.state_dict()) if normalizer is not None else None

    def restore() -> None:
        learner._restore_training_state(snapshot)
        if normalizer is not None:
            normalizer.load_state_dict(normalizer_state)

    probe: dict[str, Any] = {}
    try:
        for phase in ("critic", "actor"):
            learner.update_reward_stats(reward_chunk["rewards"], reward_chunk["dones"])
            metrics = _update_phase(learner, phase, batch)
            probe[phase] = {
                "metrics": metrics,
                "gradients": _first_step_gradients(learner, phase),
                "batchnorm": _batchnorm_stats(learner),
            }
            restore()
    finally:
        restore()
    probe["batchnorm_before"] = _batchnorm_stats(learner)
    probe["batchnorm_momentum"] = {
        f"{prefix}.{name}": float(module.momentum)
        for prefix in ("actor", "critic", "target_critic")
        for name, module in getattr(learner, prefix).named_modules()
        if isinstance(getattr(module, "running_mean", None), torch.Tensor)
    }
    return probe


#: Graphed vs eager inference forward (same kernels, replayed): relative L2 of mean, std, actions.
INFERENCE_GRAPH_REL_TOL = 1e-6


def inference_probe(learner: Any, obs: Any) -> dict[str, Any]:
    """The learner's graphed inference policy against the actor's eager ``explore``.

    After training (parameters and BatchNorm statistics changed in place since the
    capture), both answer three consecutive requests from the same exploration state and
    random stream: a graph that read stale memory would answer with the old policy.
    On a device without the graph both sides are the eager actor (the harness's own test).
    """
    import torch

    actor, policy = learner.actor, learner.inference_policy
    dones = torch.zeros(obs.shape[0], device=obs.device)

    def answers(explore: Any) -> list[Any]:
        state = {name: getattr(actor, name).clone() for name in ("_noise", "_repeat_count", "_repeat_target")}
        cuda = obs.device.type == "cuda"
        rng = torch.cuda.get_rng_state(obs.device) if cuda else torch.random.get_rng_state()
        out = [explore(obs, dones=dones) for _ in range(3)]
        if cuda:
            torch.cuda.set_rng_state(rng, obs.device)
        else:
            torch.random.set_rng_state(rng)
        for name, value in state.items():
            setattr(actor, name, value)
        return out

    eager, graphed = answers(actor.explore), answers(policy.explore)
    with torch.no_grad():
        reference = actor.get_mean_and_std(obs, training=False)
        replayed = policy.mean_and_std(obs) if hasattr(policy, "mean_and_std") else None
    pairs = list(zip(eager, graphed)) + (list(zip(reference, replayed)) if replayed is not None else [])
    worst = max(
        float(torch.linalg.vector_norm(a.float() - b.float()) / torch.linalg.vector_norm(a.float()).clamp_min(1e-30))
        for a, b in pairs
    )
    counted = {}
    if obs.device.type == "cuda":
        # One request each, after the comparison: it moves the exploration state on.
        for name, explore in (("eager", actor.explore), ("graphed", policy.explore)):
            counted[name] = count_cuda_calls(lambda explore=explore: explore(obs, dones=dones))
    return {
        "captured": bool(getattr(policy, "captured", False)),
        "bitwise_equal": all(torch.equal(a, b) for a, b in pairs),
        "worst_relative_difference": worst,
        "cuda_calls_per_request": counted,
    }


def _poisoned(values: Any) -> Any:
    """A copy of ``values`` with every 7th entry NaN and entry 3 Inf."""
    values = values.clone()
    values.view(-1)[::7] = float("nan")
    values.view(-1)[3] = float("inf")
    return values


def _optimizers(learner: Any) -> tuple[Any, ...]:
    return (learner.actor_optimizer, learner.critic_optimizer, learner.temperature_optimizer)


def _rates(learner: Any) -> list[float]:
    return [float(group["lr"]) for opt in _optimizers(learner) for group in opt.param_groups]


def _scheduled_rates(learner: Any) -> list[float]:
    """The rates the schedulers stand at: ``base_lr * lambda(last_epoch)`` per param group."""
    return [
        scheduler.base_lrs[index] * scheduler.lr_lambdas[index](scheduler.last_epoch)
        for scheduler in (
            learner.actor_scheduler,
            learner.critic_scheduler,
            learner.temperature_scheduler,
        )
        for index in range(len(scheduler.base_lrs))
    ]


def resume_from_cpu_checkpoint(
    learner_module: Any, learner: Any, config: dict[str, Any], batch: dict[str, Any]
) -> dict[str, Any]:
    """Load into ``learner`` the checkpoint of a CPU learner after one update cycle.

    Such a checkpoint holds its learning rates as floats and a CPU learner's optimizer
    flags, as every unilab-rl 1.3.2 checkpoint does. The device switches (compile,
    graphs, AMP) are left out of the CPU learner: its numbers are the same model's.
    """
    import torch

    cpu_switches = {
        k: v for k, v in config.get("learner", {}).items() if not k.startswith(("use_", "compile_"))
    }
    source = _build_learner(learner_module, dict(config, device="cpu", learner=cpu_switches))
    cpu_batch = {k: v.to("cpu") for k, v in batch.items()}
    source.update_critic(cpu_batch)
    source.update_actor(cpu_batch)
    source.soft_update_target()
    if getattr(source, "deferred_metrics", False):
        source.read_deferred_metrics()
    before = [group["lr"] for opt in _optimizers(learner) for group in opt.param_groups]
    learner.load_state_dict(source.get_state_dict())
    after = [group["lr"] for opt in _optimizers(learner) for group in opt.param_groups]
    switches = config.get("learner", {})
    return {
        "saved_rates": _rates(source),
        "loaded_rates": _rates(learner),
        # Device rates stay the very tensors the graphs read; float rates stay floats.
        "rate_objects_kept": all(
            a is b if isinstance(b, torch.Tensor) else not isinstance(a, torch.Tensor)
            for a, b in zip(after, before, strict=True)
        ),
        "device_rates": all(isinstance(rate, torch.Tensor) for rate in after),
        "device_rates_expected": str(config["device"]).startswith("cuda")
        and any(
            switches.get(key)
            for key in ("use_cuda_graph_critic", "use_cuda_graph_actor", "use_whole_cycle_cuda_graph")
        ),
    }


def worker_main(args: argparse.Namespace) -> None:
    learner_module = _import_uni_rl(args.root)
    import torch

    config = json.loads(Path(args.config).read_text())
    if config.get("compile_on_cpu"):
        _enable_cpu_inductor(learner_module)
    data = torch.load(args.data, weights_only=True)
    if config.get("fallback_random"):
        # Compiled code draws the same random numbers as eager, so the configurations
        # can be compared update by update.
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = True
    learner = _build_learner(learner_module, config)
    result: dict[str, Any] = {"uni_rl_file": learner_module.__file__}

    batches = data["batches"]
    if config.get("one_ulp_rewards"):
        # The amplification floor's perturbation: every reward of the first batch one
        # ulp up, the smallest change an fp32 input can take.
        first = dict(batches[0])
        rewards = first["rewards"]
        first["rewards"] = torch.nextafter(rewards, torch.full_like(rewards, math.inf))
        batches = [first, *batches[1:]]
    overrides: dict[tuple[int, str], dict[str, Any]] = {}
    for item in config.get("inject", []):
        index, phase, field = int(item["update"]), item["phase"], item["field"]
        poisoned = dict(batches[index], **{field: _poisoned(batches[index][field])})
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
        if _whole_cycle(learner):
            # As the runner warms it: whole dry iterations, so the graph is captured here.
            ups = int(config["updates_per_step"])
            learner.warm_up(
                dry,
                inference_obs=dry["obs"],
                iteration_batch={k: torch.cat([v] * ups) for k, v in dry.items()},
                schedule=_runner_schedule(ups, int(config["policy_frequency"])),
            )
        else:
            learner.warm_up(dry, inference_obs=dry["obs"])
        result["warm_up_seconds"] = time.perf_counter() - warm_start
    if config.get("resume_from_cpu_checkpoint"):
        # After the warm-up, as a resume of a warmed-up learner: its graphs are captured
        # (on the graph paths), so the load must keep the rate tensors and recapture.
        result["checkpoint"] = resume_from_cpu_checkpoint(
            learner_module, learner, config, batches[0]
        )
    from torch._dynamo.utils import counters

    graphs_before = int(counters["stats"]["unique_graphs"])
    if config.get("first_update_probe"):
        # After ``graphs_before``: a probe that compiled anything would count as a
        # compilation after the warm-up.
        first_batch = {k: v.to(config["device"]) for k, v in batches[0].items()}
        first_chunk = {k: v.to(config["device"]) for k, v in data["reward_chunks"][0].items()}
        result["first_update"] = first_update_probe(learner, first_batch, first_chunk)
    for item in config.get("poison", []):
        index, field = int(item["update"]), item["field"]
        batches[index] = dict(batches[index], **{field: _poisoned(batches[index][field])})
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
    # False after a fallback (capture failure etc.): the run then measured the
    # per-update path, not the graph.
    result["whole_cycle_graph_active"] = _whole_cycle(learner)
    result["whole_cycle_graph_requested"] = bool(
        config.get("learner", {}).get("use_whole_cycle_cuda_graph")
    )
    if "checkpoint" in result:
        result["checkpoint"]["final_rates"] = _rates(learner)
        result["checkpoint"]["scheduled_rates"] = _scheduled_rates(learner)
    if config.get("poison"):
        # What the collector would get now, through the learner's inference policy.
        obs = batches[0]["obs"].to(config["device"])
        dones = torch.zeros(obs.shape[0], device=obs.device)
        actions = learner.inference_policy.explore(obs, dones=dones)
        result["explore_finite"] = bool(torch.isfinite(actions).all())
    result["state"] = _state_of(learner)
    result["snapshots"] = snapshots
    # Graphs compiled during training proper: zero when the warm-up compiled them all.
    result["graphs_compiled_after_warm_up"] = int(counters["stats"]["unique_graphs"]) - (
        graphs_before
    )
    result["graph_breaks"] = sum(counters["graph_break"].values())
    result["graphs_compiled_total"] = int(counters["stats"]["unique_graphs"])
    # fp32 numbers depend on it: TF32 matmuls round inputs to 10 mantissa bits.
    result["tf32"] = {
        "matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn": bool(torch.backends.cudnn.allow_tf32),
    }
    if config.get("audit"):
        device_batches = [
            {k: v.to(config["device"]) for k, v in batch.items()}
            for batch in batches[: int(config["updates_per_step"])]
        ]
        result["audit"] = audit_cycle(learner, device_batches, int(config["policy_frequency"]))
        if config.get("audit_updates"):
            # The large schedule too (e.g. 8 critic / 4 actor updates): after the gated
            # checks above, since a whole-cycle graph captures again for it.
            large = [
                {k: v.to(config["device"]) for k, v in batch.items()}
                for batch in batches[: int(config["audit_updates"])]
            ]
            result["audit_large"] = audit_cycle(learner, large, int(config["policy_frequency"]))
    if config.get("explain"):
        result["explain"] = explain_objectives(learner, batches[0], config["device"])
    if config.get("inference_probe"):
        result["inference"] = inference_probe(learner, batches[0]["obs"].to(config["device"]))
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


def bitwise_vs_baseline(
    baseline: dict[str, Any], candidate: dict[str, Any], *, require_no_skips: bool = False
) -> dict[str, Any]:
    """Gate: ``candidate``'s final state and iteration metrics bitwise ``baseline``'s.

    Metrics the baseline lacks (the guard's skip rates) are left out of the comparison;
    with ``require_no_skips`` every one of them must be zero.
    """
    baseline_keys = set().union(*(m.keys() for m in baseline["metrics"]))
    state_cmp = compare_states(baseline["state"], candidate["state"])
    metric_cmp = compare_states(
        {"m": baseline["metrics"]}, {"m": _metrics_only(candidate["metrics"], baseline_keys)}
    )
    report: dict[str, Any] = {
        "passed": state_cmp["equal"] and metric_cmp["equal"],
        "tolerance": "bitwise",
        "state": state_cmp,
        "metrics": metric_cmp,
    }
    if require_no_skips:
        skip_rates = [m[key] for m in candidate["metrics"] for key in SKIP_RATE_KEYS]
        report["skip_rates_all_zero"] = bool(skip_rates) and not any(skip_rates)
        report["passed"] = report["passed"] and report["skip_rates_all_zero"]
    return report


def frozen_critic_report(
    baseline: dict[str, Any], patched_off: dict[str, Any], patched_on: dict[str, Any]
) -> dict[str, Any]:
    """Gate: the actor update gives no critic gradient and toggles no ``requires_grad``."""
    return {
        "passed": bool(
            patched_off["critic_grads_none_after_actor_update"]
            and patched_off["requires_grad_toggles_in_actor_update"] == 0
            and patched_on["requires_grad_toggles_in_actor_update"] == 0
        ),
        "patched_requires_grad_toggles": patched_off["requires_grad_toggles_in_actor_update"],
        "patched_critic_grads_none": patched_off["critic_grads_none_after_actor_update"],
        "baseline_requires_grad_toggles": baseline["requires_grad_toggles_in_actor_update"],
    }


def cpu_checks(
    baseline_root: Path, patched_root: Path, workdir: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(gated checks, measurements) of CPU mode."""
    iterations, updates_per_step, policy_frequency = 12, 2, 2
    data = workdir / "data.pt"
    make_data(data, iterations, updates_per_step, batch_size=64)
    base_config = {
        "device": "cpu",
        "seed": 7,
        "updates_per_step": updates_per_step,
        "policy_frequency": policy_frequency,
    }
    measurements: dict[str, Any] = {
        "critic_updates": iterations * updates_per_step,
        "actor_updates": iterations * updates_per_step // policy_frequency,
    }
    checks: dict[str, Any] = {}
    baseline = run_worker(
        baseline_root,
        data,
        dict(base_config, count_requires_grad_toggles=True),
        workdir,
        "baseline",
    )

    # 1. every switch off: the patched learner is the baseline, bitwise.
    patched_off = run_worker(
        patched_root,
        data,
        dict(base_config, count_requires_grad_toggles=True),
        workdir,
        "patched_off",
    )
    checks["eager_switches_off_vs_baseline"] = bitwise_vs_baseline(baseline, patched_off)

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
    checks["eager_warm_up_guard_deferred_vs_baseline"] = bitwise_vs_baseline(
        baseline, patched_on, require_no_skips=True
    )

    # 3. frozen critic: the actor update gives no critic gradient and toggles nothing.
    checks["frozen_critic_actor_update"] = frozen_critic_report(baseline, patched_off, patched_on)

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

    # 5. One bad batch, then clean ones; started from another learner's checkpoint.
    robust = run_worker(
        patched_root,
        data,
        dict(base_config, learner=switches, warm_up=True, **ROBUSTNESS_CONFIG),
        workdir,
        "patched_robustness",
    )
    checks["finite_guard_recovery"] = recovery_report({"cpu/eager": robust}, updates_per_step)
    checks["checkpoint_resume_keeps_graphs"] = checkpoint_report({"cpu/eager": robust})
    return checks, measurements


def _modules_finite(state: dict[str, Any]) -> bool:
    """Every float parameter and buffer (running statistics included) of the modules finite."""
    import torch

    return all(
        bool(torch.isfinite(v).all())
        for _, v in _flatten({k: state[k] for k in ("actor", "critic", "target_critic")})
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    )


def injection_report(
    guarded: dict[str, Any], unguarded: dict[str, Any], updates_per_step: int
) -> dict[str, Any]:
    """Critic step 9 sees NaN/Inf rewards; actor step 14 sees NaN/Inf critic obs.

    Snapshots are taken before updates, so "before critic 10" is the state right after
    critic step 9 and its target update, and "before critic 15" the state after actor
    step 14. Each poisoned step must leave its side bitwise unchanged: parameters,
    optimizer state and the BatchNorm running statistics its forward moved (patch 0016;
    the scheduler still advances the learning rate). The temperature step sees a finite
    loss and proceeds.
    """
    snaps = guarded["snapshots"]

    def critic_side(state: dict[str, Any]) -> dict[str, Any]:
        return {
            "critic": state["critic"],
            "target_critic": state["target_critic"],
            "critic_optimizer": state["critic_optimizer"]["state"],
        }

    critic_unchanged = compare_states(critic_side(snaps["9:critic"]), critic_side(snaps["10:critic"]))

    actor_unchanged = compare_states(
        _actor_side(snaps["14:actor"]), _actor_side(snaps["15:critic"])
    )
    temperature_moved = not compare_states(
        snaps["14:actor"]["temperature"], snaps["15:critic"]["temperature"]
    )["equal"]

    metrics = guarded["metrics"]
    critic_iteration, actor_iteration = 9 // updates_per_step, 14 // updates_per_step
    expected = {
        (critic_iteration, "critic_skip_rate"): 1.0 / updates_per_step,
        (actor_iteration, "actor_skip_rate"): 1.0,
    }
    skip_rates = {(i, key): m[key] for i, m in enumerate(metrics) for key in SKIP_RATE_KEYS}
    skips_as_expected = all(value == expected.get(key, 0.0) for key, value in skip_rates.items())
    return {
        "passed": bool(
            critic_unchanged["equal"]
            and actor_unchanged["equal"]
            and temperature_moved
            and skips_as_expected
            and _modules_finite(guarded["state"])
        ),
        "critic_params_target_and_optimizer_unchanged_by_skipped_step": critic_unchanged,
        "actor_params_and_optimizer_unchanged_by_skipped_step": actor_unchanged,
        "temperature_step_still_applied": temperature_moved,
        "skip_rates_as_expected": skips_as_expected,
        "nonzero_skip_rates": {f"iter{i}:{k}": v for (i, k), v in skip_rates.items() if v},
        "guarded_final_parameters_finite": _modules_finite(guarded["state"]),
        "unguarded_baseline_final_parameters_finite": _modules_finite(unguarded["state"]),
    }


def _actor_side(state: dict[str, Any]) -> dict[str, Any]:
    """The actor's parameters, running statistics and optimizer state of a saved state."""
    return {"actor": state["actor"], "actor_optimizer": state["actor_optimizer"]["state"]}


def expected_recovery_skips(
    updates_per_step: int, policy_frequency: int
) -> dict[tuple[int, str], float]:
    """Per (iteration, metric): the skip rate ``ROBUSTNESS_CONFIG``'s poison must cause."""
    steps = {
        "critic": updates_per_step,
        "actor": (updates_per_step - 1) // policy_frequency + 1,
        "temperature": (updates_per_step - 1) // policy_frequency + 1,
    }
    expected: dict[tuple[int, str], float] = {}
    for item in ROBUSTNESS_CONFIG["poison"]:
        for kind in POISON_SKIPS[item["field"]]:
            key = (int(item["update"]) // updates_per_step, f"{kind}_skip_rate")
            expected[key] = expected.get(key, 0.0) + 1.0 / steps[kind]
    return expected


def recovery_report(
    results: dict[str, Any], updates_per_step: int, policy_frequency: int = 2
) -> dict[str, Any]:
    """Gate: one bad batch costs only its own steps, on every path run (patch 0016).

    Per run of ``ROBUSTNESS_CONFIG``: the poisoned iterations skip exactly the steps the
    poison reaches and every other iteration skips none (a learner left with NaN running
    statistics skips every later step); the skipped actor step left the actor's
    parameters, running statistics and optimizer state bitwise as they were; the final
    modules (running statistics included) are finite; the collector's inference policy
    answers with finite actions.
    """
    expected = expected_recovery_skips(updates_per_step, policy_frequency)
    before, after = ROBUSTNESS_CONFIG["snapshot_at"]
    configs: dict[str, Any] = {}
    for key, result in results.items():
        skip_rates = {
            (i, name): m.get(name, math.nan)
            for i, m in enumerate(result["metrics"])
            for name in SKIP_RATE_KEYS
        }
        skips_ok = all(v == expected.get(k, 0.0) for k, v in skip_rates.items())
        actor = compare_states(
            _actor_side(result["snapshots"][before]), _actor_side(result["snapshots"][after])
        )
        finite = _modules_finite(result["state"])
        configs[key] = {
            "passed": bool(skips_ok and actor["equal"] and finite and result["explore_finite"]),
            "skip_rates_as_expected": skips_ok,
            "nonzero_skip_rates": {f"iter{i}:{k}": v for (i, k), v in skip_rates.items() if v},
            "skipped_actor_step_left_actor_bitwise": actor,
            "final_modules_finite": finite,
            "explore_finite": result["explore_finite"],
        }
    return {
        "passed": bool(configs) and all(item["passed"] for item in configs.values()),
        "rule": "poisoned batches skip only their own steps; skipped steps leave all state "
        "(running statistics included); training and inference stay finite",
        "expected_skip_rates": {f"iter{i}:{k}": v for (i, k), v in expected.items()},
        "configs": configs,
    }


#: Learning rates are float32 tensors on the graph paths: equal to float64 within this.
RATE_REL_TOL = 1e-6


def _rates_close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=RATE_REL_TOL, abs_tol=0.0) for x, y in zip(a, b)
    )


def checkpoint_report(results: dict[str, Any]) -> dict[str, Any]:
    """Gate: a CPU learner's checkpoint (float rates) keeps the graph paths working (patch 0017).

    Per run of ``ROBUSTNESS_CONFIG``: the loaded rates are the checkpoint's; on the graph
    paths they are still the device tensors the graphs read (the same objects), elsewhere
    floats; after training the rates are the schedulers' current ones (the schedule
    reached whatever the updates read); a whole-cycle graph that was asked for still
    ran (no fallback from a failed capture).
    """
    configs: dict[str, Any] = {}
    for key, result in results.items():
        item = result["checkpoint"]
        graph_kept = result["whole_cycle_graph_active"] or not result["whole_cycle_graph_requested"]
        loaded = _rates_close(item["loaded_rates"], item["saved_rates"])
        scheduled = _rates_close(item["final_rates"], item["scheduled_rates"])
        moved = not _rates_close(item["final_rates"], item["loaded_rates"])
        rate_kind = item["device_rates"] == item["device_rates_expected"]
        configs[key] = {
            "passed": bool(
                loaded and item["rate_objects_kept"] and rate_kind and scheduled and moved
                and graph_kept
            ),
            "loaded_rates_are_the_checkpoints": loaded,
            "rate_objects_kept": item["rate_objects_kept"],
            "device_rates": item["device_rates"],
            "device_rates_expected": item["device_rates_expected"],
            "final_rates_are_the_schedulers": scheduled,
            "schedule_moved_the_rates": moved,
            "whole_cycle_graph_kept": graph_kept,
            "rates": {k: item[k] for k in ("saved_rates", "loaded_rates", "final_rates", "scheduled_rates")},
        }
    return {
        "passed": bool(configs) and all(item["passed"] for item in configs.values()),
        "rule": "a float-rate checkpoint loads into the learner's own rates (device tensors on "
        "the graph paths), the schedule reaches them, and the whole-cycle graph stays on",
        "configs": configs,
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


def _relative_l2(reference: Any, candidate: Any) -> float:
    """||a - b|| / ||a|| in float64 (||b|| when a is all zero)."""
    a64, b64 = reference.double(), candidate.double()
    scale = float(a64.norm())
    return float((a64 - b64).norm()) / scale if scale > 0 else float(b64.norm())


def batchnorm_errors(
    before: dict[str, Any],
    reference: dict[str, Any],
    candidate: dict[str, Any],
    momentum: dict[str, float],
    eps: float = 1e-5,
) -> dict[str, float]:
    """Running-statistic differences in units of the batch statistics of the update.

    ``before`` holds the statistics before the update (the same for both sides),
    ``reference``/``candidate`` after it. The update is ``r <- r + m * (b - r)`` with
    batch mean/variance ``b``, so ``reference``'s batch variance per channel is
    ``(var_after - (1 - m) * var_before) / m``. The errors are the candidate's batch
    mean error in batch standard deviations and its batch variance error relative to
    the batch variance (``eps``: the layers' own, keeps dead channels finite), max over
    channels. A layer the reference update left bitwise unchanged must be bitwise
    unchanged in the candidate too (inf otherwise): an update where none belongs.
    """
    errors: dict[str, float] = {}
    for layer, m in momentum.items():
        mean_key, var_key = f"{layer}.running_mean", f"{layer}.running_var"
        ref_mean, ref_var = reference[mean_key].double(), reference[var_key].double()
        cand_mean, cand_var = candidate[mean_key].double(), candidate[var_key].double()
        old_mean, old_var = before[mean_key].double(), before[var_key].double()
        if bool((ref_mean == old_mean).all()) and bool((ref_var == old_var).all()):
            unchanged = bool((cand_mean == ref_mean).all()) and bool((cand_var == ref_var).all())
            errors[mean_key] = 0.0 if unchanged else math.inf
            errors[var_key] = errors[mean_key]
            continue
        batch_var = ((ref_var - (1.0 - m) * old_var) / m).clamp_min(0.0) + eps
        mean_excess = _beyond_storage_ulps(reference[mean_key], candidate[mean_key])
        var_excess = _beyond_storage_ulps(reference[var_key], candidate[var_key])
        errors[mean_key] = float((mean_excess / (m * batch_var.sqrt())).max())
        errors[var_key] = float((var_excess / (m * batch_var)).max())
    return errors


def _beyond_storage_ulps(reference: Any, candidate: Any, ulps: float = 2.0) -> Any:
    """|a - b| less ``ulps`` units in the last place of a's storage dtype, at least 0.

    A running statistic is stored after every update, so two runs whose batch
    statistics differ by any amount can round to neighbouring values: one ulp of the
    running value (~6e-8 of a running variance near 1 in fp32), which divided by the
    momentum is ~1e-5 in batch units, far above the batch statistics' own rounding.
    Two ulps (one rounding on each side) are that storage floor, not a difference.
    """
    import torch

    magnitude = reference.abs()
    ulp = torch.nextafter(magnitude, torch.full_like(magnitude, math.inf)) - magnitude
    excess = (candidate.double() - reference.double()).abs() - ulps * ulp.double()
    return excess.clamp_min(0.0)


def first_update_errors(
    reference: dict[str, Any],
    candidate: dict[str, Any],
    phases: tuple[str, ...] = ("critic", "actor"),
) -> dict[str, float]:
    """Every first-update quantity's difference, keyed ``phase/kind/name``.

    Both probes must come from the same data and the same pre-training state (the
    same seed); ``reference["batchnorm_before"]`` is that state's statistics.
    """
    errors: dict[str, float] = {}
    for phase in phases:
        ref, cand = reference[phase], candidate[phase]
        for key in sorted(set(ref["metrics"]) | set(cand["metrics"])):
            if key not in ref["metrics"] or key not in cand["metrics"]:
                errors[f"{phase}/loss/{key}"] = math.inf
                continue
            a, b = float(ref["metrics"][key]), float(cand["metrics"][key])
            errors[f"{phase}/loss/{key}"] = abs(a - b) / max(abs(a), GPU_METRIC_ABS_FLOOR)
        for key in sorted(set(ref["gradients"]) | set(cand["gradients"])):
            if key not in ref["gradients"] or key not in cand["gradients"]:
                errors[f"{phase}/gradient/{key}"] = math.inf
                continue
            errors[f"{phase}/gradient/{key}"] = _relative_l2(
                ref["gradients"][key], cand["gradients"][key]
            )
        bn = batchnorm_errors(
            reference["batchnorm_before"],
            ref["batchnorm"],
            cand["batchnorm"],
            reference["batchnorm_momentum"],
        )
        errors.update({f"{phase}/batchnorm/{key}": value for key, value in bn.items()})
    return errors


def compare_first_update(
    reference: dict[str, Any],
    candidate: dict[str, Any],
    *,
    precision_floor: dict[str, float] | None = None,
    phases: tuple[str, ...] = ("critic", "actor"),
) -> dict[str, Any]:
    """Gate the first update of ``candidate`` against ``reference`` (see constants).

    fp32: ``FIRST_UPDATE_FP32_TOL`` per kind. With ``precision_floor`` (bf16: the
    per-quantity errors of eager bf16 against eager fp32), each quantity may differ by
    ``BF16_FLOOR_FACTOR`` times its floor, never less than the fp32 tolerance (losses:
    never less than ``BF16_MIN_TOL``).
    """
    errors = first_update_errors(reference, candidate, phases)
    failures: list[str] = []
    worst: dict[str, tuple[float, str, float]] = {}
    for key, value in errors.items():
        kind = key.split("/")[1]
        tol = FIRST_UPDATE_FP32_TOL[kind]
        if precision_floor is not None:
            floor = precision_floor.get(key, math.inf)
            tol = max(tol, BF16_FLOOR_FACTOR * floor) if math.isfinite(floor) else tol
            tol = max(tol, BF16_MIN_TOL.get(kind, 0.0))
        if not value <= tol:
            failures.append(f"{key}: {value:.3g} > {tol:.3g}")
        ratio = value / tol if tol > 0 else math.inf
        if kind not in worst or ratio > worst[kind][0] or (math.isnan(ratio)):
            worst[kind] = (ratio, key, value)
    return {
        "passed": not failures,
        "tolerance_rule": (
            f"{BF16_FLOOR_FACTOR} x (eager bf16 vs eager fp32), at least {FIRST_UPDATE_FP32_TOL} "
            f"and {BF16_MIN_TOL}"
            if precision_floor is not None
            else f"fp32 rounding floor x margin: {FIRST_UPDATE_FP32_TOL}"
        ),
        "worst_by_kind": {
            kind: {"entry": key, "difference": value, "fraction_of_tolerance": ratio}
            for kind, (ratio, key, value) in worst.items()
        },
        "failures": failures[:20],
        "failure_count": len(failures),
        "compared": len(errors),
    }


def first_critic_update_of_schedule(
    result: dict[str, Any], names: list[str], probe: dict[str, Any]
) -> dict[str, Any]:
    """A worker's first critic update read from its ``FIRST_CRITIC_SNAPSHOT``.

    For learners without the probe (the baseline): the state after exactly one critic
    update from the initial state; ``names`` are the critic's parameter names in the
    optimizer's order, ``probe`` supplies the statistics before the update and the
    momenta (the same initial state: same seed and code for BatchNorm).
    """
    state = result["snapshots"][FIRST_CRITIC_SNAPSHOT]
    beta1 = float(state["critic_optimizer"]["param_groups"][0]["betas"][0])
    moments = state["critic_optimizer"]["state"]
    gradients = {
        name: moments[index]["exp_avg"] / (1.0 - beta1) for index, name in enumerate(names)
    }
    batchnorm = {
        f"{prefix}.{key}": value
        for prefix in ("actor", "critic", "target_critic")
        for key, value in state[prefix].items()
        if key.endswith(("running_mean", "running_var"))
    }
    return {
        "critic": {"metrics": {}, "gradients": gradients, "batchnorm": batchnorm},
        "batchnorm_before": probe["batchnorm_before"],
        "batchnorm_momentum": probe["batchnorm_momentum"],
    }


#: The patched configurations of GPU mode, their switches from the one configuration table.
GPU_CONFIGS: dict[str, dict[str, bool]] = bench_configs.study_switches(bench_configs.NUMERICS_STUDY)


def compare_configurations(
    results: dict[str, Any], iterations: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(gated checks, measurements) of GPU mode over the workers' results (see constants).

    ``results`` maps ``patched/<precision>/<config>`` and ``baseline/fp32/eager`` to
    worker results; patched workers ran ``first_update_probe``. Separate from the
    workers so that CPU runs (tests) apply exactly these rules. The measured floors that
    set tolerances (tier-B amplification, bf16 rounding) are measurements, not checks.
    """
    checks: dict[str, Any] = {}
    measurements: dict[str, Any] = {}
    base, patched = results["baseline/fp32/eager"], results["patched/fp32/eager"]
    baseline_keys = set().union(*(m.keys() for m in base["metrics"]))
    critic_names = [
        key.split(".", 1)[1]
        for key in patched["first_update"]["critic"]["gradients"]
        if key.startswith("critic.")
    ]
    first_critic = compare_first_update(
        first_critic_update_of_schedule(patched, critic_names, patched["first_update"]),
        first_critic_update_of_schedule(base, critic_names, patched["first_update"]),
        phases=("critic",),
    )
    floor = compare_relative(
        {"state": base["state"], "m": base["metrics"]},
        {"state": patched["state"], "m": _metrics_only(patched["metrics"], baseline_keys)},
        float("inf"),
    )
    checks["fp32:patched_eager_vs_baseline_eager"] = {
        "passed": first_critic["passed"],
        "first_critic_update": first_critic,
        "tier_a_after_first_iteration_reported": compare_relative(
            base["snapshots"][TIER_A_SNAPSHOT],
            patched["snapshots"][TIER_A_SNAPSHOT],
            TIER_A_REPORT_TOL["fp32"],
        ),
        f"tier_b_after_{iterations}_iterations_amplification_floor": floor,
    }
    # The amplification floor: the drift of the smallest possible difference. On CUDA
    # patched vs baseline eager is one (the TD division); on CPU they are bitwise equal,
    # so a one-ulp nudge of the first batch's rewards (``eager_one_ulp``) measures the
    # same amplification on any device. The larger measured drift is the floor.
    floors = {"patched_eager_vs_baseline_eager": floor["worst_relative_difference"]}
    one_ulp = results.get("patched/fp32/eager_one_ulp")
    if one_ulp is not None:
        floors["eager_vs_eager_with_one_ulp_rewards"] = compare_relative(
            {"state": patched["state"], "m": patched["metrics"]},
            {"state": one_ulp["state"], "m": one_ulp["metrics"]},
            float("inf"),
        )["worst_relative_difference"]
    floor_value = max(*floors.values(), TIER_B_MIN_FLOOR)
    measurements["tier_b_amplification_floor"] = {
        "measured": floors,
        "minimum": TIER_B_MIN_FLOOR,
        "floor": floor_value,
    }
    bf16_floor = None
    if "patched/bf16/eager" in results:
        bf16_floor = first_update_errors(
            patched["first_update"], results["patched/bf16/eager"]["first_update"]
        )
        worst_floor = max(bf16_floor.items(), key=lambda item: item[1])
        measurements["bf16:eager_vs_fp32_eager_first_update_floor"] = {
            "note": "measured bf16 rounding floor per quantity (sets the bf16 tolerances)",
            "worst_entry": worst_floor[0],
            "worst_difference": worst_floor[1],
        }
    for precision in ("fp32", "bf16"):
        reference = results.get(f"patched/{precision}/eager")
        if reference is None:
            continue
        for name in GPU_CONFIGS:
            key = f"patched/{precision}/{name}"
            if key not in results or name == "eager":
                continue
            candidate = results[key]
            first = compare_first_update(
                reference["first_update"],
                candidate["first_update"],
                precision_floor=bf16_floor if precision == "bf16" else None,
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
                "passed": first["passed"] and tier_b["passed"],
                "first_update": first,
                f"tier_b_after_{iterations}_iterations": tier_b,
                "tier_a_after_first_iteration_reported": compare_relative(
                    reference["snapshots"][TIER_A_SNAPSHOT],
                    candidate["snapshots"][TIER_A_SNAPSHOT],
                    TIER_A_REPORT_TOL[precision],
                ),
            }
    return checks, measurements


def graph_breaks_report(explain: dict[str, Any]) -> dict[str, Any]:
    """Gate: each whole objective traces to one graph with no break."""
    return {
        "passed": bool(explain)
        and all(
            item["graph_count"] == 1 and item["graph_break_count"] == 0
            for item in explain.values()
        ),
        "explain": explain,
    }


def host_sync_report(per_config: dict[str, Any]) -> dict[str, Any]:
    """Gate: patched configurations sync the host nowhere in a cycle, once at the metrics read."""
    patched = [k for k in per_config if k.startswith("patched/")]
    return {
        "passed": bool(patched)
        and all(
            per_config[k]["audit"]["host_syncs_in_cycle"] == 0
            and per_config[k]["audit"]["host_syncs_in_metrics_read"] == 1
            for k in patched
        ),
        "rule": "patched: zero host syncs inside one update cycle, one at the metrics read",
        "per_config": per_config,
    }


def whole_cycle_kept_report(results: dict[str, Any], requested: list[str]) -> dict[str, Any]:
    """Gate: the configurations that asked for the whole-cycle graph still ran it."""
    return {
        "passed": bool(requested) and all(results[key]["whole_cycle_graph_active"] for key in requested),
        "rule": "the whole-cycle configurations still ran their graph (no fallback)",
        "configs": requested,
    }


def inference_graph_report(probed: dict[str, Any]) -> dict[str, Any]:
    """Gate: the graphed inference forward was captured and answers as the eager one."""
    return {
        "passed": bool(probed)
        and all(
            item["captured"] and item["worst_relative_difference"] <= INFERENCE_GRAPH_REL_TOL
            for item in probed.values()
        ),
        "rule": f"graphed inference forward captured, and within {INFERENCE_GRAPH_REL_TOL:g} of eager "
        "(mean, std, three consecutive exploration actions) after training moved the weights",
        "configs": probed,
    }


def no_compilation_report(per_config: dict[str, Any], recommended: list[str]) -> dict[str, Any]:
    """Gate: the compiled configurations compiled nothing after their warm-up."""
    return {
        "passed": bool(recommended)
        and all(per_config[k]["graphs_compiled_after_warm_up"] == 0 for k in recommended),
        "configs": recommended,
    }


def gpu_checks(
    baseline_root: Path, patched_root: Path, workdir: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(gated checks, measurements) of GPU mode."""
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
        "audit_updates": 8,
        "snapshot_at": [FIRST_CRITIC_SNAPSHOT, TIER_A_SNAPSHOT],
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
                    first_update_probe=True,
                    explain=name == "full_objective_compile",
                    inference_probe=bool(switches.get("use_cuda_graph_inference")),
                ),
            )
    jobs["patched/fp32/eager_one_ulp"] = (
        patched_root,
        dict(
            common,
            learner=dict(GPU_LEARNER_KWARGS, finite_guard=True, deferred_metrics=True),
            warm_up=True,
            one_ulp_rewards=True,
        ),
    )
    for name in ("eager", "loss_only_compile"):
        learner = dict(GPU_LEARNER_KWARGS, use_compile=name != "eager")
        jobs[f"baseline/fp32/{name}"] = (baseline_root, dict(common, learner=learner))
    # One bad batch and a resumed checkpoint on every update path (not compared numerically).
    for name in ("eager", "full_objective_compile", "full_objective_compile_manual_graphs",
                 "whole_cycle_graph"):
        learner = dict(GPU_LEARNER_KWARGS, **GPU_CONFIGS[name], finite_guard=True, deferred_metrics=True)
        jobs[f"robustness/fp32/{name}"] = (
            patched_root,
            {
                **{k: common[k] for k in ("device", "seed", "updates_per_step", "policy_frequency")},
                "fallback_random": True,
                "learner": learner,
                "warm_up": True,
                **ROBUSTNESS_CONFIG,
            },
        )

    def run(item: tuple[str, tuple[Path, dict[str, Any]]]) -> tuple[str, Any]:
        key, (root, config) = item
        return key, run_worker(root, data, config, workdir, key.replace("/", "_"))

    # Compilation is CPU-bound: four workers in parallel share the 16 cores.
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(pool.map(run, jobs.items()))
    robustness = {key: results.pop(key) for key in list(results) if key.startswith("robustness/")}
    checks, measurements = compare_configurations(results, iterations)
    checks["finite_guard_recovery"] = recovery_report(robustness, updates_per_step, policy_frequency)
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
    recommended = [
        k for k in per_config if k.startswith("patched/") and ("compile" in k or "graph" in k)
    ]
    checks["host_sync_audit"] = host_sync_report(per_config)
    requested = [
        key
        for key, (_, config) in jobs.items()
        if key in results and config["learner"].get("use_whole_cycle_cuda_graph")
    ]
    checks["whole_cycle_graph_kept"] = whole_cycle_kept_report(results, requested)
    probed = {key: results[key]["inference"] for key in results if "inference" in results[key]}
    checks["inference_graph_matches_eager"] = inference_graph_report(probed)
    checks["no_compilation_after_warm_up"] = no_compilation_report(per_config, recommended)
    return checks, measurements


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

    versions = bench_env.PINS
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="validate_numerics_") as tmp:
        workdir = Path(tmp)
        if args.mode == "cpu":
            checks, measurements = cpu_checks(args.baseline_root, args.patched_root, workdir)
        else:
            checks, measurements = gpu_checks(args.baseline_root, args.patched_root, workdir)
    # Every entry under checks is a gate that can fail; what was measured is reported apart.
    passed = bool(checks) and all(item["passed"] is True for item in checks.values())
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
        "drift": bench_env.runtime_drift(versions, torch.__version__, None if args.mode == "cpu" else device),
        "baseline_root": str(args.baseline_root),
        "patched_root": str(args.patched_root),
        "seconds": round(time.perf_counter() - started, 1),
        "checks": checks,
        "measurements": measurements,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(json.dumps({"passed": passed, "output": str(args.output)}))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
