"""The G1 Walk Flat terms in torch, one small function each, twins of UniLab 1.3.2's NumPy terms.

Each function reads the device env's state (``DeviceEnvState``: torch views of the MJWarp arrays and the env's
own buffers) and returns one value per env, as its NumPy twin does, with the twin's arithmetic in the twin's
dtypes (float32 where UniLab computes in float32), so that on identical inputs the two agree to float32
rounding. ``twin_of`` maps the task config's term ``func`` (by its
object) to the twin; a term without a twin is refused when the env is built.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from flashsac_runtime.envs.mjwarp_state import MjwarpState


@dataclass
class DeviceEnvState:
    """What the terms read: the physics views and the env's per-row buffers (all on one device)."""

    sim: MjwarpState
    joint_qpos_cols: torch.Tensor   # (J,) qpos columns of the entity's joints
    joint_qvel_cols: torch.Tensor   # (J,) qvel columns
    root_qpos_cols: torch.Tensor    # (7,) the root free joint's qpos columns (position, quaternion)
    default_joint_pos: torch.Tensor  # (N, J) float32
    default_joint_vel: torch.Tensor  # (N, J) float32
    action: torch.Tensor            # (N, A) raw policy action of this step
    prev_action: torch.Tensor       # (N, A)
    command: torch.Tensor           # (N, 3) float32 velocity command (body frame)
    gait_phase: torch.Tensor        # (N, 2) float32 radians
    episode_length: torch.Tensor    # (N,) int64 steps of the current episode, this step included
    max_episode_length: int

    def joint_pos(self) -> torch.Tensor:
        return self.sim.qpos[:, self.joint_qpos_cols]

    def joint_vel(self) -> torch.Tensor:
        return self.sim.qvel[:, self.joint_qvel_cols]


Term = Callable[..., torch.Tensor]


# --- observations -----------------------------------------------------------------------------------------

def builtin_sensor(s: DeviceEnvState, sensor_name: str) -> torch.Tensor:
    return s.sim.sensor(sensor_name)


def projected_gravity_from_sensor(s: DeviceEnvState, sensor_name: str) -> torch.Tensor:
    return -s.sim.sensor(sensor_name)


def joint_pos_rel(s: DeviceEnvState) -> torch.Tensor:
    return s.joint_pos() - s.default_joint_pos


def joint_vel_rel(s: DeviceEnvState) -> torch.Tensor:
    return s.joint_vel() - s.default_joint_vel


def last_action(s: DeviceEnvState, action_name: str) -> torch.Tensor:
    del action_name  # the task has one action term
    return s.action


def generated_commands(s: DeviceEnvState, command_name: str) -> torch.Tensor:
    del command_name  # the task has one command term
    return s.command


def gait_phase(s: DeviceEnvState, frequency: float, init_mode: str) -> torch.Tensor:
    del frequency, init_mode  # the env advances and resamples the phase (G1GaitPhase's shared context)
    return s.gait_phase


# --- rewards ----------------------------------------------------------------------------------------------

def track_lin_vel(s: DeviceEnvState, tracking_sigma: float, command_name: str, sensor_name: str) -> torch.Tensor:
    del command_name
    linvel = s.sim.sensor(sensor_name)
    error = torch.square(s.command[:, 0] - linvel[:, 0]) + torch.square(s.command[:, 1] - linvel[:, 1])
    return torch.exp(-error / tracking_sigma)


def track_ang_vel(s: DeviceEnvState, tracking_sigma: float, command_name: str, sensor_name: str) -> torch.Tensor:
    del command_name
    error = torch.square(s.command[:, 2] - s.sim.sensor(sensor_name)[:, 2])
    return torch.exp(-error / tracking_sigma)


def ang_vel_xy(s: DeviceEnvState, sensor_name: str) -> torch.Tensor:
    gyro = s.sim.sensor(sensor_name)
    return torch.square(gyro[:, 0]) + torch.square(gyro[:, 1])


def orientation(s: DeviceEnvState, sensor_name: str) -> torch.Tensor:
    up = s.sim.sensor(sensor_name)
    return torch.square(up[:, 0]) + torch.square(up[:, 1])


def action_rate_l2(s: DeviceEnvState) -> torch.Tensor:
    return torch.sum(torch.square(s.action - s.prev_action), dim=1)


def weighted_pose(s: DeviceEnvState, pose_weights: torch.Tensor) -> torch.Tensor:
    diff = s.joint_pos() - s.default_joint_pos
    return torch.sum(pose_weights * torch.square(diff), dim=1).to(torch.float32)


def penalty_feet_ori(s: DeviceEnvState) -> torch.Tensor:
    left, right = s.sim.sensor("left_foot_quat"), s.sim.sensor("right_foot_quat")
    return torch.square(left[:, 1]) + torch.square(left[:, 2]) + torch.square(right[:, 1]) + torch.square(right[:, 2])


def feet_phase_height_targets(phase: torch.Tensor, swing_height: float) -> torch.Tensor:
    """The cubic-Bézier swing-height target of each foot (``compute_feet_phase_height_targets``), float32."""
    phi = torch.fmod(phase + math.pi, 2 * math.pi) - math.pi
    x = (phi + math.pi) / (2 * math.pi)

    def bezier(y_start: float, y_end: float, t: torch.Tensor) -> torch.Tensor:
        return y_start + (y_end - y_start) * (t**3 + 3 * (t**2 * (1 - t)))

    return torch.where(x <= 0.5, bezier(0.0, swing_height, 2 * x), bezier(swing_height, 0.0, 2 * x - 1))


def feet_phase(s: DeviceEnvState, frequency: float, swing_height: float, tracking_sigma: float,
               min_forward_speed: float, command_name: str) -> torch.Tensor:
    del frequency, command_name
    target = feet_phase_height_targets(s.gait_phase, swing_height)
    left_z, right_z = s.sim.sensor("left_foot_pos")[:, 2], s.sim.sensor("right_foot_pos")[:, 2]
    error = torch.square(left_z - target[:, 0]) + torch.square(right_z - target[:, 1])
    forward = torch.clamp_min(s.sim.sensor("pelvis_local_linvel")[:, 0], 0.0)
    gate = (forward >= min_forward_speed).to(torch.float32)
    return torch.exp(-error / tracking_sigma) * gate


def alive(s: DeviceEnvState) -> torch.Tensor:
    return torch.ones_like(s.command[:, 0])


# --- terminations -----------------------------------------------------------------------------------------

def time_out(s: DeviceEnvState) -> torch.Tensor:
    return s.episode_length >= s.max_episode_length


def g1_tilt_exceeded(s: DeviceEnvState, max_tilt_deg: float) -> torch.Tensor:
    up_z = s.sim.sensor("torso_upvector")[:, 2]
    return torch.arccos(torch.clamp(up_z, -1.0, 1.0)) > math.radians(max_tilt_deg)


def root_height_below_minimum(s: DeviceEnvState, minimum_height: float) -> torch.Tensor:
    # UniLab reads the root body's tracked world position, refreshed for the step's final state; for a root
    # body on a free joint that is the joint's qpos position exactly (MuJoCo's kinematics copies it). The column
    # is indexed by a one-element tensor: a 0-d tensor index is read on the host (a sync, illegal in a capture).
    return s.sim.qpos[:, s.root_qpos_cols[2:3]][:, 0] < minimum_height



def _unilab_terms() -> tuple[dict[Any, Term], dict[Any, Term], dict[Any, Term]]:
    """UniLab's term objects (functions, or the classes of class terms) -> torch twins."""
    from unilab.envs import mdp
    from unilab.tasks.locomotion.common import manager_terms as common
    from unilab.tasks.locomotion.common import sensor_reward_terms as sensor
    from unilab.tasks.locomotion.g1 import manager_terms as g1

    observations = {mdp.builtin_sensor: builtin_sensor, mdp.projected_gravity_from_sensor: projected_gravity_from_sensor,
                    mdp.joint_pos_rel: joint_pos_rel, mdp.joint_vel_rel: joint_vel_rel, mdp.last_action: last_action,
                    mdp.generated_commands: generated_commands, g1.G1GaitPhase: gait_phase}
    rewards = {sensor.track_lin_vel: track_lin_vel, sensor.track_ang_vel: track_ang_vel, sensor.ang_vel_xy: ang_vel_xy,
               sensor.orientation: orientation, mdp.action_rate_l2: action_rate_l2, g1.weighted_pose: weighted_pose,
               g1.penalty_feet_ori: penalty_feet_ori, g1.feet_phase: feet_phase, common.alive: alive}
    terminations = {mdp.time_out: time_out, g1.g1_tilt_exceeded: g1_tilt_exceeded,
                    mdp.root_height_below_minimum: root_height_below_minimum}
    return observations, rewards, terminations


def twin_of(kind: str, name: str, func: Any) -> Term:
    """The torch twin of a materialized UniLab term (a function, or an instance of a class term)."""
    tables = dict(zip(("observation", "reward", "termination"), _unilab_terms(), strict=True))
    key = func if inspect.isfunction(func) else type(func)
    twin = tables[kind].get(key)
    if twin is None:
        raise ValueError(f"the device env has no torch twin of {kind} term {name!r} "
                         f"({getattr(key, '__module__', '?')}.{getattr(key, '__qualname__', key)}); "
                         "use training.collector=host for this task")
    return twin
