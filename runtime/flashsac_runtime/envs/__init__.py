"""Device-resident envs: the env step on the accelerator, for the one-process FlashSAC collector.

``make_g1_walk_device_env`` is the device env factory of G1 Walk Flat on ``mjwarp`` (UniLab's off-policy entry
point names it for ``training.collector=device``): it builds the task's UniLab env on the ``mjwarp`` backend
exactly as the host collector would, from the same env override, and wraps it in ``G1WalkDeviceEnv``.

``make_go2_joystick_device_env`` is Go2 Joystick Flat's (``task=go2_joystick_flat/mjwarp``, named by
``training.device_env_factory=flashsac_runtime.envs:make_go2_joystick_device_env``), and
``make_g1_motion_tracking_device_env`` G1 motion tracking's (``task=g1_motion_tracking/mjwarp``). Each wraps
``DeviceEnvBase`` (``base.py``) with the task's own parts (``g1_walk.py``, ``go2_joystick.py``,
``g1_motion_tracking.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from flashsac_runtime.envs.base import DeviceEnvBase
from flashsac_runtime.envs.draws import NumpyDraws, TorchDraws
from flashsac_runtime.envs.g1_motion_tracking import MotionTrackingDeviceEnv
from flashsac_runtime.envs.g1_walk import G1WalkDeviceEnv
from flashsac_runtime.envs.go2_joystick import Go2JoystickDeviceEnv


def make_g1_walk_device_env(num_envs: int, device: torch.device, seed: int, *,
                            env_cfg_override: dict[str, Any] | None = None,
                            numpy_draws: bool = False, graph: bool = True,
                            own_stream: bool = True, sensors_every_substep: bool = False,
                            acceleration_sensors: bool = False,
                            draws_ahead: bool = True, reset_only_when_done: bool = True,
                            step_split: bool = True) -> G1WalkDeviceEnv:
    """The G1 Walk Flat device env as training uses it: its own non-blocking stream, the position and velocity
    sensors in the last substep only, draws taken a step ahead, the task's terms as torch operations (``terms``:
    one device implementation of each UniLab term), the reset only on a step with a done row, and timestamps of the
    step's parts (``step_stamps``).

    The other forms are the references the sameness checks step beside it, not choices for training:
    ``numpy_draws`` feeds UniLab's own NumPy draws, which are taken in the step (``draws_ahead=False``) and so
    need the reset on every step (``reset_only_when_done=False``); ``sensors_every_substep`` and
    ``acceleration_sensors`` compute the sensors as MuJoCo Warp's own step does (the values the env reads are
    bitwise the same); ``own_stream=False`` keeps Warp's blocking stream; ``graph=False`` keeps the step eager on
    CUDA; ``step_split=False`` leaves the timestamps out. The env class's own keyword defaults stay the reset on
    every step, without timestamps."""
    return _make_device_env(G1WalkDeviceEnv, "G1WalkFlat", num_envs, device, seed,
                            env_cfg_override=env_cfg_override, numpy_draws=numpy_draws, graph=graph,
                            own_stream=own_stream, sensors_every_substep=sensors_every_substep,
                            acceleration_sensors=acceleration_sensors, draws_ahead=draws_ahead,
                            reset_only_when_done=reset_only_when_done, step_split=step_split)


def make_go2_joystick_device_env(num_envs: int, device: torch.device, seed: int, *,
                                 env_cfg_override: dict[str, Any] | None = None,
                                 numpy_draws: bool = False, graph: bool = True,
                                 own_stream: bool = True, sensors_every_substep: bool = False,
                                 draws_ahead: bool = True, reset_only_when_done: bool = True,
                                 step_split: bool = True) -> Go2JoystickDeviceEnv:
    """The Go2 Joystick Flat device env (``task=go2_joystick_flat/mjwarp``), in the forms of
    ``make_g1_walk_device_env``; its foot contact sensors are acceleration-stage, so the last substep computes that
    stage (``acceleration_sensors=True``)."""
    return _make_device_env(Go2JoystickDeviceEnv, "Go2JoystickFlat", num_envs, device, seed,
                            env_cfg_override=env_cfg_override, numpy_draws=numpy_draws, graph=graph,
                            own_stream=own_stream, sensors_every_substep=sensors_every_substep,
                            acceleration_sensors=True, draws_ahead=draws_ahead,
                            reset_only_when_done=reset_only_when_done, step_split=step_split)


def make_g1_motion_tracking_device_env(num_envs: int, device: torch.device, seed: int, *,
                                       env_cfg_override: dict[str, Any] | None = None,
                                       numpy_draws: bool = False, graph: bool = True,
                                       own_stream: bool = True, sensors_every_substep: bool = False,
                                       draws_ahead: bool = True, reset_only_when_done: bool = True,
                                       step_split: bool = True) -> MotionTrackingDeviceEnv:
    """The G1 motion tracking device env (``task=g1_motion_tracking/mjwarp``), in the forms of
    ``make_g1_walk_device_env``; its terms read position and velocity sensors only, so the last substep leaves the
    acceleration stage out."""
    return _make_device_env(MotionTrackingDeviceEnv, "G1MotionTrackingSAC", num_envs, device, seed,
                            env_cfg_override=env_cfg_override, numpy_draws=numpy_draws, graph=graph,
                            own_stream=own_stream, sensors_every_substep=sensors_every_substep,
                            acceleration_sensors=False, draws_ahead=draws_ahead,
                            reset_only_when_done=reset_only_when_done, step_split=step_split)


def _make_device_env(cls: type[DeviceEnvBase], task_name: str, num_envs: int, device: torch.device, seed: int, *,
                     env_cfg_override: dict[str, Any] | None, numpy_draws: bool, graph: bool, own_stream: bool,
                     sensors_every_substep: bool, acceleration_sensors: bool, draws_ahead: bool,
                     reset_only_when_done: bool, step_split: bool) -> Any:
    """UniLab's env of ``task_name`` on ``mjwarp`` from the run's env override, wrapped in the task's device env."""
    import numpy as np

    from unilab.base.env_factory import make_registry_env

    host_env = make_registry_env(task_name, "mjwarp", num_envs, {**(env_cfg_override or {}), "seed": int(seed)})
    env_device = torch.device(str(host_env._backend._device_data.qpos.device))  # noqa: SLF001
    if torch.device(device).type != env_device.type:
        raise ValueError(f"the device env runs where MuJoCo Warp runs ({env_device}), not on {device}")
    draws = (NumpyDraws(np.random.default_rng(int(seed)), env_device) if numpy_draws
             else TorchDraws(num_envs, env_device, int(seed)))
    return cls(host_env, draws, graph=graph, own_stream=own_stream,
                           sensors_every_substep=sensors_every_substep, acceleration_sensors=acceleration_sensors,
                           draws_ahead=draws_ahead,
                           reset_only_when_done=reset_only_when_done, step_split=step_split)


__all__ = ["DeviceEnvBase", "G1WalkDeviceEnv", "Go2JoystickDeviceEnv", "MotionTrackingDeviceEnv",
           "make_g1_motion_tracking_device_env", "make_g1_walk_device_env", "make_go2_joystick_device_env"]
