"""Twins of UniLab's general terms (``unilab.envs.mdp``): observations, the action rate, terminations."""

from __future__ import annotations

import torch

from flashsac_runtime.envs.rotation import quat_apply_inverse
from flashsac_runtime.envs.terms.state import DeviceEnvState

# --- observations -----------------------------------------------------------------------------------------


def builtin_sensor(s: DeviceEnvState, sensor_name: str) -> torch.Tensor:
    return s.sim.sensor(sensor_name)


def projected_gravity_from_sensor(s: DeviceEnvState, sensor_name: str) -> torch.Tensor:
    return -s.sim.sensor(sensor_name)


def joint_pos_rel(s: DeviceEnvState) -> torch.Tensor:
    return s.joint_pos() - s.default_joint_pos


def joint_vel_rel(s: DeviceEnvState) -> torch.Tensor:
    return s.joint_vel() - s.default_joint_vel


def last_action(s: DeviceEnvState, action_name: str | None = None) -> torch.Tensor:
    del action_name  # the tasks have one action term
    return s.action


def generated_commands(s: DeviceEnvState, command_name: str) -> torch.Tensor:
    del command_name  # the tasks have one command term
    return s.command


# --- rewards ----------------------------------------------------------------------------------------------

def action_rate_l2(s: DeviceEnvState) -> torch.Tensor:
    return torch.sum(torch.square(s.action - s.prev_action), dim=1)


# --- terminations -----------------------------------------------------------------------------------------

def time_out(s: DeviceEnvState) -> torch.Tensor:
    return s.episode_length >= s.max_episode_length


def root_height_below_minimum(s: DeviceEnvState, minimum_height: float) -> torch.Tensor:
    # UniLab reads the root body's tracked world position, refreshed for the step's final state; for a root
    # body on a free joint that is the joint's qpos position exactly (MuJoCo's kinematics copies it). The column
    # is indexed by a one-element tensor: a 0-d tensor index is read on the host (a sync, illegal in a capture).
    return s.sim.qpos[:, s.root_qpos_cols[2:3]][:, 0] < minimum_height


def bad_orientation(s: DeviceEnvState, limit_angle: float) -> torch.Tensor:
    """The root body's tilt from upright beyond ``limit_angle``: UniLab's ``projected_gravity_b`` (the unit gravity
    (0, 0, -1) rotated by the inverse of the root's world quaternion, ``np_quat_apply_inverse``), its angle."""
    quat = s.root_sensor("track_quat_w")
    gravity = torch.zeros_like(quat[:, :3])
    gravity[:, 2] = -1.0
    projected = quat_apply_inverse(quat, gravity)
    return torch.abs(torch.arccos(torch.clamp(-projected[:, 2], -1.0, 1.0))) > limit_angle
