"""UniLab's real NumPy env of each FlashSAC task other than G1 Walk Flat behind uni_rl's DeviceVecEnv contract.

The host collector of UniLab 1.3.2 needs a CUDA or MPS learner; on a CPU the patched trainer can still train a
task with the device-resident collector when `training.device_env_factory` names a factory. These factories build
the task's own env exactly as `device_env_adapter.make_g1_walk_flat_cpu_env` builds G1 Walk Flat's (the tree's
Hydra config, the run's env override, UniLab's registry env factory: no fake env), on the physics the owner names
(CPU MuJoCo, or MuJoCo Warp on Warp's CPU device with `UNISIM_MJWARP_ALLOW_CPU=1`), and wrap it in the same
`NumpyEnvAsDeviceEnv`. The G1 motion tracking env loads its clip through UniLab's own loader.

Imported in subprocesses whose `PYTHONPATH` has the overlay, the applied tree's `src` and `tests/`; run from the
applied tree's root (its scene and asset paths are root-relative).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from device_env_adapter import NumpyEnvAsDeviceEnv, _compose_flashsac_cfg


def make_task_cpu_env(task: str, num_envs: int, device: torch.device, seed: int, *,
                      env_cfg_override: dict[str, Any] | None = None) -> NumpyEnvAsDeviceEnv:
    """The env of ``task`` (``<task>/<owner>``) as the host collector builds it, behind the device contract."""
    from unilab.base.env_factory import make_registry_env
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    cfg = _compose_flashsac_cfg([f"task={task}", f"algo.num_envs={num_envs}", f"algo.seed={seed}"])
    override = env_cfg_override if env_cfg_override is not None else build_offpolicy_env_cfg_override("flashsac", cfg)
    np.random.seed(seed)  # the collector's apply_training_seed
    env = make_registry_env(str(cfg.training.task_name), str(cfg.training.sim_backend), num_envs,
                            {**(override or {}), "seed": seed})
    return NumpyEnvAsDeviceEnv(env, device)


def make_g1_motion_tracking_mujoco_cpu_env(num_envs: int, device: torch.device, seed: int, *,
                                           env_cfg_override: dict[str, Any] | None = None) -> NumpyEnvAsDeviceEnv:
    return make_task_cpu_env("g1_motion_tracking/mujoco", num_envs, device, seed, env_cfg_override=env_cfg_override)


def make_g1_motion_tracking_mjwarp_cpu_env(num_envs: int, device: torch.device, seed: int, *,
                                           env_cfg_override: dict[str, Any] | None = None) -> NumpyEnvAsDeviceEnv:
    return make_task_cpu_env("g1_motion_tracking/mjwarp", num_envs, device, seed, env_cfg_override=env_cfg_override)


def make_go2_joystick_flat_mujoco_cpu_env(num_envs: int, device: torch.device, seed: int, *,
                                          env_cfg_override: dict[str, Any] | None = None) -> NumpyEnvAsDeviceEnv:
    return make_task_cpu_env("go2_joystick_flat/mujoco", num_envs, device, seed, env_cfg_override=env_cfg_override)



def make_go2_joystick_flat_mjwarp_cpu_env(num_envs: int, device: torch.device, seed: int, *,
                                          env_cfg_override: dict[str, Any] | None = None) -> NumpyEnvAsDeviceEnv:
    return make_task_cpu_env("go2_joystick_flat/mjwarp", num_envs, device, seed, env_cfg_override=env_cfg_override)
