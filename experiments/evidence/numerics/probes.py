"""What a worker measures besides training: first updates, inference, host syncs, launches, graphs.

Each probe runs inside a worker (its ``uni_rl`` imported from its root) on a built
learner and leaves the learner as it found it where the training that follows must not
notice (``first_update_probe``), or runs after training (the rest).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import learner_study


def audit_cycle(
    learner: Any, batches: list[dict[str, Any]], policy_frequency: int
) -> dict[str, Any]:
    """Host syncs and launches of one warm update cycle, counted.

    One uncounted cycle runs first, so that what a first call of a schedule does once
    (the whole-cycle graph's capture for a new schedule, a CUDA-graph recording) is
    not counted. Syncs (``_count_syncs``): every synchronizing CUDA call and every event wait,
    counted inside the cycle and, separately, in the end-of-iteration metrics read (the
    baseline reads its metrics inside the cycle, so its read count is zero). Launches:
    CUDA runtime/driver calls recorded by ``torch.profiler`` on the host side, and the
    kernels the device executed.
    """
    import torch

    deferred = bool(getattr(learner, "deferred_metrics", False))
    torch.cuda.synchronize()
    if learner_study.whole_cycle(learner):
        # The runner hands the sampled batch over as one tensor per field: concatenated
        # here, outside the counted cycle, which is then one ``update_iteration`` call.
        large = learner_study.iteration_batch(batches)
        schedule = learner_study.runner_schedule(len(batches), policy_frequency)
        batch_size = int(batches[0]["obs"].shape[0])

        def cycle() -> None:
            learner.update_iteration(large, batch_size=batch_size, schedule=schedule)

    else:

        def cycle() -> None:
            learner_study.run_iteration(learner, batches, policy_frequency, read_metrics=False)

    def cycle_and_read() -> None:
        cycle()
        if deferred:
            learner.read_deferred_metrics()

    cycle_and_read()  # uncounted
    torch.cuda.synchronize()
    syncs_in_cycle = _count_syncs(cycle)
    syncs_in_read = _count_syncs(learner.read_deferred_metrics) if deferred else 0
    torch.cuda.synchronize()
    return {
        "updates_in_cycle": len(batches),
        "host_syncs_in_cycle": syncs_in_cycle,
        "host_syncs_in_metrics_read": syncs_in_read,
        **count_cuda_calls(cycle_and_read),
    }


def _count_syncs(fn: Callable[[], Any]) -> int:
    """The host's waits for the device in ``fn``.

    ``set_sync_debug_mode("warn")`` warns at each synchronizing operation (blocking copies, ``.item()``,
    stream and device syncs) but not at ``torch.cuda.Event.synchronize``, the wait of a staged read (the
    metrics copied to pinned memory where the stream stood, read later: ``flashsac_runtime.staged_read``);
    those waits are counted by wrapping the method for the call.
    """
    import warnings

    import torch

    event_waits = [0]
    original = torch.cuda.Event.synchronize

    def counting(self: Any) -> Any:
        event_waits[0] += 1
        return original(self)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.Event.synchronize = counting  # type: ignore[method-assign]
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
            torch.cuda.Event.synchronize = original  # type: ignore[method-assign]
    # Only the per-operation warning counts; the mode's one-time "prototype
    # feature" notice is not a synchronization.
    warned = sum("called a synchronizing CUDA operation" in str(item.message) for item in caught)
    return warned + event_waits[0]


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


def count_requires_grad_toggles(fn: Callable[[], Any]) -> int:
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


def _update_phase(learner: Any, phase: str, batch: dict[str, Any]) -> dict[str, float]:
    """One critic or actor update through the entry point the runner uses for it.

    The whole-cycle graph has no per-update entry point: the update runs as a
    captured one-update iteration (a schedule of just that update), so the probe
    measures the graph's own first update.
    """
    if learner_study.whole_cycle(learner):
        from flashsac_runtime.learner.update_schedule import ScheduledUpdate

        metrics = {}
        schedule = (ScheduledUpdate(phase, 0, True),)
        for update_metrics in learner_study.update_iteration(learner, [batch], schedule):
            metrics.update(update_metrics)
    elif phase == "critic":
        metrics = learner_study.critic_update(learner, batch, read_metrics=True)
    else:
        metrics = learner_study.actor_update(learner, batch, read_metrics=True)
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
