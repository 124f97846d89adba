"""Twins of G1 Walk Flat's own terms (``unilab.tasks.locomotion.g1.manager_terms``)."""

from __future__ import annotations

import math

import torch

from flashsac_runtime.envs.terms.state import DeviceEnvState


def gait_phase(s: DeviceEnvState, frequency: float, init_mode: str) -> torch.Tensor:
    del frequency, init_mode  # the env advances and resamples the phase (G1GaitPhase's shared context)
    return s.gait_phase


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


def g1_tilt_exceeded(s: DeviceEnvState, max_tilt_deg: float) -> torch.Tensor:
    up_z = s.sim.sensor("torso_upvector")[:, 2]
    return torch.arccos(torch.clamp(up_z, -1.0, 1.0)) > math.radians(max_tilt_deg)
