"""Twins of UniLab's locomotion terms shared by its robots (``unilab.tasks.locomotion.common``): the named-sensor
rewards G1 Walk Flat reads (``sensor_reward_terms``) and the joystick terms of Go2 Joystick Flat
(``manager_terms``: root-state rewards, the quadruped gait phase and the foot-phase rewards)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from flashsac_runtime.envs.rotation import quat_apply_inverse_batched
from flashsac_runtime.envs.terms.state import DeviceEnvState

#: UniLab's default phase offsets of the four feet (``manager_terms._OFFSETS``: a diagonal trot).
_OFFSETS = (0.0, 0.5, 0.5, 0.0)


# --- named-sensor rewards (``sensor_reward_terms``) -------------------------------------------------------

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


def alive(s: DeviceEnvState) -> torch.Tensor:
    return torch.ones_like(s.command[:, 0])


# --- root-state rewards (``manager_terms``; the root body's tracked-body sensors) -------------------------

def _root_lin_vel_b(s: DeviceEnvState) -> torch.Tensor:
    """UniLab's ``root_link_lin_vel_b``: the root's world linear velocity in its own frame."""
    return quat_apply_inverse_batched(s.root_sensor("track_quat_w"), s.root_sensor("track_linvel_w"))


def _root_ang_vel_b(s: DeviceEnvState) -> torch.Tensor:
    """UniLab's ``root_link_ang_vel_b``: the root's world angular velocity in its own frame."""
    return quat_apply_inverse_batched(s.root_sensor("track_quat_w"), s.root_sensor("track_angvel_w"))


def track_lin_vel_xy_exp(s: DeviceEnvState, std: float, command_name: str) -> torch.Tensor:
    del command_name
    actual = _root_lin_vel_b(s)
    error = torch.square(s.command[:, 0] - actual[:, 0]) + torch.square(s.command[:, 1] - actual[:, 1])
    return torch.exp(-error / std**2)


def track_ang_vel_z_exp(s: DeviceEnvState, std: float, command_name: str) -> torch.Tensor:
    del command_name
    error = torch.square(s.command[:, 2] - _root_ang_vel_b(s)[:, 2])
    return torch.exp(-error / std**2)


def lin_vel_z_l2(s: DeviceEnvState) -> torch.Tensor:
    return torch.square(_root_lin_vel_b(s)[:, 2])


def ang_vel_xy_l2(s: DeviceEnvState) -> torch.Tensor:
    velocity = _root_ang_vel_b(s)
    return torch.square(velocity[:, 0]) + torch.square(velocity[:, 1])


def base_height_l2(s: DeviceEnvState, target_height: float) -> torch.Tensor:
    return torch.square(s.root_sensor("track_pos_w")[:, 2] - target_height)


def joint_deviation_l1(s: DeviceEnvState) -> torch.Tensor:
    return torch.sum(torch.abs(s.joint_pos() - s.default_joint_pos), dim=1)


# --- the quadruped gait phase and the foot-phase rewards (``_GaitTerm`` classes) --------------------------

def _moving(s: DeviceEnvState, command_threshold: float) -> torch.Tensor:
    """The rows whose command's norm exceeds ``command_threshold`` (``_GaitTerm._moving`` with a command)."""
    c = s.command
    return torch.sqrt(c[:, 0] * c[:, 0] + c[:, 1] * c[:, 1] + c[:, 2] * c[:, 2]) > command_threshold


def _foot_phases(s: DeviceEnvState, phase_offsets: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """(N, 4) float32: each foot's phase, the shared phase plus the foot's offset, modulo 1 (``_GaitTerm._phase``)."""
    phase = s.quadruped_phase
    if phase is None:
        raise ValueError("the device env state has no quadruped gait phase")
    if isinstance(phase_offsets, torch.Tensor):  # given in the config: float64 on the device (``device_params``)
        shifted = phase[:, None] + phase_offsets.to(torch.float32)
    else:  # UniLab's defaults: each a float32 constant, as UniLab's float32 offsets array holds them
        shifted = torch.stack([phase + offset for offset in phase_offsets], dim=1)
    return torch.remainder(shifted, 1.0)


def _mean_of_feet(values: torch.Tensor) -> torch.Tensor:
    """NumPy's float32 mean over the four feet: summed left to right, then divided by 4."""
    return (((values[:, 0] + values[:, 1]) + values[:, 2]) + values[:, 3]) / 4


def quadruped_gait_phase(s: DeviceEnvState, frequency: float = 2.0,
                         phase_offsets: Sequence[float] | torch.Tensor = _OFFSETS, command_name: str | None = None,
                         command_threshold: float = 0.0) -> torch.Tensor:
    del frequency, command_name, command_threshold  # the env advances the phase (``DeviceEnvState.quadruped_phase``)
    return _foot_phases(s, phase_offsets)


def feet_phase_contact(s: DeviceEnvState, sensor_names: Sequence[str], frequency: float = 2.0,
                       phase_offsets: Sequence[float] | torch.Tensor = _OFFSETS, command_name: str | None = None,
                       command_threshold: float = 0.0, contact_threshold: float = 0.1,
                       stance_threshold: float = 0.6) -> torch.Tensor:
    """The share of feet whose contact matches the stance part of their phase. Each contact sensor's first column
    gates (the normal force of a ``force`` sensor, or ``found``)."""
    contact = torch.stack([s.sim.sensor(name)[:, 0] for name in sensor_names], dim=1) > contact_threshold
    expected = _foot_phases(s, phase_offsets) < stance_threshold
    if frequency < 1.0e-8:
        expected = torch.ones_like(expected)
    elif command_name is not None:
        expected = expected | ~_moving(s, command_threshold)[:, None]
    return _mean_of_feet((contact == expected).to(torch.float32))


def feet_phase_swing_height(s: DeviceEnvState, sensor_names: Sequence[str], frequency: float = 2.0,
                            phase_offsets: Sequence[float] | torch.Tensor = _OFFSETS, command_name: str | None = None,
                            command_threshold: float = 0.0, target_height: float = 0.1, kernel: float = 0.01,
                            swing_start: float = 0.6) -> torch.Tensor:
    """The feet's height near ``target_height`` during the swing part of their phase (position sensors' z)."""
    del frequency
    heights = torch.stack([s.sim.sensor(name)[:, 2] for name in sensor_names], dim=1)
    swing = _foot_phases(s, phase_offsets) >= swing_start
    if command_name is not None:
        swing = swing & _moving(s, command_threshold)[:, None]
    reward = torch.exp(-torch.square(heights - target_height) / kernel) * swing
    return _mean_of_feet(reward)
