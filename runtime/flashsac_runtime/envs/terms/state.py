"""What the torch twins read: ``DeviceEnvState``, the physics views and the env's per-row buffers.

The physics is a ``PhysicsView``: on the device the MuJoCo Warp arrays (``MjwarpState``); in the twins' check on
a task without a MuJoCo Warp owner (Go2 Joystick Flat), torch views of the CPU MuJoCo backend's host arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

if TYPE_CHECKING:
    from flashsac_runtime.envs.terms.motion_tracking import MotionReference


class PhysicsView(Protocol):
    """qpos, qvel and sensordata as (worlds, columns) tensors, and a named sensor's columns."""

    qpos: torch.Tensor
    qvel: torch.Tensor
    sensordata: torch.Tensor

    def sensor(self, name: str) -> torch.Tensor: ...


@dataclass
class DeviceEnvState:
    """What the terms read: the physics views and the env's per-row buffers (all on one device)."""

    sim: PhysicsView
    joint_qpos_cols: torch.Tensor   # (J,) qpos columns of the entity's joints
    joint_qvel_cols: torch.Tensor   # (J,) qvel columns
    root_qpos_cols: torch.Tensor    # (7,) the root free joint's qpos columns (position, quaternion)
    default_joint_pos: torch.Tensor  # (N, J) float32
    default_joint_vel: torch.Tensor  # (N, J) float32
    action: torch.Tensor            # (N, A) raw policy action of this step
    prev_action: torch.Tensor       # (N, A)
    command: torch.Tensor           # (N, C) float32: a velocity command (body frame, C = 3) or motion's reference
    gait_phase: torch.Tensor        # (N, 2) float32 radians: G1's shared gait phase
    episode_length: torch.Tensor    # (N,) int64 steps of the current episode, this step included
    max_episode_length: int
    # The root body whose world-frame state the root-state terms read (Go2: ``base``), through the tracked-body
    # sensors UniLab's MuJoCo and MuJoCo Warp backends add for each tracked body (``track_pos_w_<body>``,
    # ``track_quat_w_<body>``, ``track_linvel_w_<body>``, ``track_angvel_w_<body>``). The backends refresh those
    # sensors from the step's final qpos/qvel before a term reads them (the physics step leaves them a substep
    # behind); a device env reading them must do the same after its last substep.
    root_body: str | None = None
    # The quadruped gait phase in cycles, [0, 1), float32 (N,): UniLab's ``_GaitTerm`` phase, advanced by the env
    # each step by ``step_dt * frequency`` (where the term's command moves) modulo 1. Every gait term of a task reads
    # this one phase, so their frequencies and command gates must agree.
    quadruped_phase: torch.Tensor | None = None
    # Motion tracking's command state (the reference frame, the robot's tracked bodies, the relative state).
    motion: MotionReference | None = None
    # (J, 2) float32: the entity's soft joint position limits, lower and upper (``soft_joint_pos_limits``).
    soft_joint_pos_limits: torch.Tensor | None = None

    def joint_pos(self) -> torch.Tensor:
        return self.sim.qpos[:, self.joint_qpos_cols]

    def joint_vel(self) -> torch.Tensor:
        return self.sim.qvel[:, self.joint_qvel_cols]

    def root_sensor(self, prefix: str) -> torch.Tensor:
        """The root body's tracked-body sensor ``<prefix>_<root_body>`` (``track_pos_w`` and so on)."""
        if self.root_body is None:
            raise ValueError("the device env state names no root body; root-state terms need one")
        return self.sim.sensor(f"{prefix}_{self.root_body}")


Term = Callable[..., torch.Tensor]


def device_params(params: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """A term's parameters for its twin: number lists (e.g. ``pose_weights``, ``phase_offsets``) as float64 tensors
    on ``device``, made once at binding (a twin never makes a tensor from host data); names and numbers as given."""
    def numbers(value: Any) -> bool:
        return isinstance(value, (list, tuple)) and all(
            isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in value)

    return {key: torch.as_tensor(np.asarray(value, dtype=np.float64), device=device) if numbers(value) else value
            for key, value in params.items()}
