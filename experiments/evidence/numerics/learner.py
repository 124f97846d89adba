"""The worker's learner: its ``uni_rl``, how it is built, its saved state and its checkpoint round trip.

Runs inside a worker only (``uni_rl`` comes from the worker's root).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import learner_study

from .config import LEARNER_KWARGS, WorkerConfig


def import_uni_rl(root: str) -> Any:
    """The learner module of the ``uni_rl`` under ``root`` (checked: not another one on the path)."""
    sys.path.insert(0, root)
    import uni_rl  # the root decides which uni_rl this is
    from uni_rl.algos.flash_sac import learner as learner_module

    origin = Path(uni_rl.__file__).resolve()
    if Path(root).resolve() not in origin.parents:
        raise RuntimeError(f"uni_rl imported from {origin}, not from {root}")
    return learner_module


def build_learner(learner_module: Any, config: WorkerConfig) -> Any:
    """The study's learner with ``config.learner`` on top, seeded by ``config.seed``."""
    kwargs = {**LEARNER_KWARGS, **config.learner}
    return learner_study.build_learner(learner_module, config.device, int(config.seed), kwargs)


def state_of(learner: Any) -> dict[str, Any]:
    """The learner's full state dict, copied to the CPU, learning rates as floats."""
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


def enable_cpu_inductor(learner_module: Any) -> None:
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


def poisoned(values: Any) -> Any:
    """A copy of ``values`` with every 7th entry NaN and entry 3 Inf."""
    values = values.clone()
    values.view(-1)[::7] = float("nan")
    values.view(-1)[3] = float("inf")
    return values


def _optimizers(learner: Any) -> tuple[Any, ...]:
    return (learner.actor_optimizer, learner.critic_optimizer, learner.temperature_optimizer)


def rates(learner: Any) -> list[float]:
    """Every param group's learning rate, as floats."""
    return [float(group["lr"]) for opt in _optimizers(learner) for group in opt.param_groups]


def scheduled_rates(learner: Any) -> list[float]:
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
    learner_module: Any, learner: Any, config: WorkerConfig, batch: dict[str, Any]
) -> dict[str, Any]:
    """Load into ``learner`` the checkpoint of a CPU learner after one update cycle.

    Such a checkpoint holds its learning rates as floats and a CPU learner's optimizer
    flags, as every unilab-rl 1.3.2 checkpoint does. The device switches (compile,
    graphs, AMP) are left out of the CPU learner: its numbers are the same model's.
    """
    import torch

    cpu_switches = {k: v for k, v in config.learner.items() if not k.startswith(("use_", "compile_"))}
    source = build_learner(learner_module, config.replace(device="cpu", learner=cpu_switches))
    cpu_batch = {k: v.to("cpu") for k, v in batch.items()}
    source.update_critic(cpu_batch)
    source.update_actor(cpu_batch)
    source.soft_update_target()
    if getattr(source, "deferred_metrics", False):
        source.read_deferred_metrics()
    before = [group["lr"] for opt in _optimizers(learner) for group in opt.param_groups]
    learner.load_state_dict(source.get_state_dict())
    after = [group["lr"] for opt in _optimizers(learner) for group in opt.param_groups]
    switches = config.learner
    return {
        "saved_rates": rates(source),
        "loaded_rates": rates(learner),
        # Device rates stay the very tensors the graphs read; float rates stay floats.
        "rate_objects_kept": all(
            a is b if isinstance(b, torch.Tensor) else not isinstance(a, torch.Tensor)
            for a, b in zip(after, before, strict=True)
        ),
        "device_rates": all(isinstance(rate, torch.Tensor) for rate in after),
        "device_rates_expected": str(config.device).startswith("cuda")
        and any(
            switches.get(key)
            for key in ("use_cuda_graph_critic", "use_cuda_graph_actor", "use_whole_cycle_cuda_graph")
        ),
    }
