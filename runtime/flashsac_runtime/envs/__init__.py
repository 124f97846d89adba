"""Device-resident envs: the env step on the accelerator, for the one-process FlashSAC collector.

``make_g1_walk_device_env`` is the device env factory of G1 Walk Flat on ``mjwarp`` (UniLab's off-policy entry
point names it for ``training.collector=device``): it builds the task's UniLab env on the ``mjwarp`` backend
exactly as the host collector would, from the same env override, and wraps it in ``G1WalkDeviceEnv``.
"""

from __future__ import annotations

from typing import Any

import torch

from flashsac_runtime.envs.draws import NumpyDraws, TorchDraws
from flashsac_runtime.envs.g1_walk import G1WalkDeviceEnv


def make_g1_walk_device_env(num_envs: int, device: torch.device, seed: int, *,
                            env_cfg_override: dict[str, Any] | None = None,
                            numpy_draws: bool = False, graph: bool = True,
                            own_stream: bool = True, sensors_every_substep: bool = False,
                            acceleration_sensors: bool = False,
                            draws_ahead: bool = True, reset_only_when_done: bool = True,
                            fused_terms: bool = True, step_split: bool = True) -> G1WalkDeviceEnv:
    """The G1 Walk Flat device env; ``numpy_draws`` feeds it UniLab's own NumPy draws (sameness tests only),
    ``graph=False`` keeps its step eager on CUDA (the step is otherwise one CUDA graph from the second on),
    ``own_stream=False`` runs it on Warp's blocking stream (``training.device_env_stream=warp``),
    ``sensors_every_substep=True`` computes the sensors in every physics substep, not only the last
    (``training.device_env_sensors=every_substep``; the same values, for comparison), ``acceleration_sensors=True``
    computes the acceleration stage's sensors too (accelerometers, contact sensors: the task reads none of them;
    ``training.device_env_sensors=last_substep``; the same values of every sensor it reads, for comparison),
    ``draws_ahead=False`` takes
    each step's random draws, and what follows from them alone, inside the step, where UniLab's env does, not beside
    the step before it (``training.device_env_draws_ahead=false``; the same values, for comparison; UniLab's NumPy
    draws need it, and the torch step with the reset on every step, below), ``reset_only_when_done=False`` runs the
    reset of the done rows on every step, not only on a step with a done row as a conditional node of the step's
    CUDA graph (``training.device_env_reset=every_step``; the same outputs, for comparison), ``fused_terms=False``
    does the step's work around the physics (terminations, rewards, command, observations, the reset of the done
    rows) as about 240 torch operations, not as six Warp kernels of its own (``training.device_env_terms=torch``;
    the same values within float32 rounding, for comparison), ``step_split=False`` leaves out the step's timestamps
    of its parts (``step_stamps``: the physics, the terms, the reset; ``training.device_env_step_split=false``).
    The env's own keyword defaults stay the torch step with the reset on every step, without timestamps."""
    import numpy as np

    from unilab.base.env_factory import make_registry_env

    host_env = make_registry_env("G1WalkFlat", "mjwarp", num_envs, {**(env_cfg_override or {}), "seed": int(seed)})
    env_device = torch.device(str(host_env._backend._device_data.qpos.device))  # noqa: SLF001
    if torch.device(device).type != env_device.type:
        raise ValueError(f"the device env runs where MuJoCo Warp runs ({env_device}), not on {device}")
    draws = (NumpyDraws(np.random.default_rng(int(seed)), env_device) if numpy_draws
             else TorchDraws(num_envs, env_device, int(seed)))
    return G1WalkDeviceEnv(host_env, draws, graph=graph, own_stream=own_stream,
                           sensors_every_substep=sensors_every_substep, acceleration_sensors=acceleration_sensors,
                           draws_ahead=draws_ahead,
                           reset_only_when_done=reset_only_when_done, fused_terms=fused_terms,
                           step_split=step_split)


__all__ = ["G1WalkDeviceEnv", "make_g1_walk_device_env"]
