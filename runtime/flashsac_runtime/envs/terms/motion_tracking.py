"""Twins of G1 motion tracking's terms (``unilab.tasks.motion_tracking.common.manager_terms``).

UniLab's terms read its ``MotionCommand``: the reference frame of each row (joints, the tracked bodies' world
states), the robot's tracked bodies as the backend reports them after the step, and the relative state the command
derives from the two (Numba's ``update_motion_relative_state_kernel``). Here that state is a ``MotionReference``
on ``DeviceEnvState.motion``: the env (or a check) fills the reference, ``read_robot_bodies`` reads the robot's
tracked-body sensors, ``refresh_relative_state`` derives the relative state, and each term reads them.

UniLab computes the relative state when the command has advanced (``post_compute``, before the observations), so
the rewards and terminations of the next step read it as it was then, beside the robot's bodies read after that
step's physics; the env calls the two functions at those two points.

The arithmetic keeps UniLab's dtypes: the clip is float32; Numba promotes a float32 operand meeting a float literal
to float64 (``2.0 * x``, ``atan2``, ``cos``), and those steps are float64 here too before the float32 store, so that
the relative state matches to float32 rounding of another libm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from flashsac_runtime.envs.rotation import quat_apply_inverse, quat_mul
from flashsac_runtime.envs.terms.state import DeviceEnvState

F32, F64 = torch.float32, torch.float64


@dataclass
class MotionReference:
    """The motion command's per-row state: the reference frame (set by the command), the robot's tracked bodies and
    the relative state (``refresh_relative_state``). Bodies are the command's ``body_names``, in its order."""

    body_names: tuple[str, ...]
    anchor: int                     # the anchor body's index in body_names
    joint_pos: torch.Tensor         # (N, J) float32, the reference frame's joints
    joint_vel: torch.Tensor         # (N, J)
    body_pos_local_w: torch.Tensor  # (N, B, 3) the clip's body positions
    body_pos_w: torch.Tensor        # (N, B, 3) the same plus the env origins
    body_quat_w: torch.Tensor       # (N, B, 4) w-first
    body_lin_vel_w: torch.Tensor    # (N, B, 3)
    body_ang_vel_w: torch.Tensor    # (N, B, 3)
    time_steps: torch.Tensor        # (N,) int32 the frame of each row
    clip_end_frames: torch.Tensor   # (N,) int32 the last frame of each row's clip
    joint_default_bias: torch.Tensor  # (N, J) float32, drawn at each reset
    robot: dict[str, torch.Tensor] = field(default_factory=dict)     # pos, quat, lin_vel, ang_vel (N, B, ·)
    relative: dict[str, torch.Tensor] = field(default_factory=dict)  # see ``refresh_relative_state``

    @classmethod
    def empty(cls, num_envs: int, num_joints: int, body_names: Sequence[str], anchor: str,
              device: torch.device) -> MotionReference:
        n, b = num_envs, len(body_names)

        def zeros(*shape: int, dtype: torch.dtype = F32) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        return cls(body_names=tuple(body_names), anchor=list(body_names).index(anchor),
                   joint_pos=zeros(n, num_joints), joint_vel=zeros(n, num_joints),
                   body_pos_local_w=zeros(n, b, 3), body_pos_w=zeros(n, b, 3), body_quat_w=zeros(n, b, 4),
                   body_lin_vel_w=zeros(n, b, 3), body_ang_vel_w=zeros(n, b, 3),
                   time_steps=zeros(n, dtype=torch.int32), clip_end_frames=zeros(n, dtype=torch.int32),
                   joint_default_bias=zeros(n, num_joints))


def _motion(s: DeviceEnvState) -> MotionReference:
    if s.motion is None:
        raise ValueError("the device env state has no motion reference; motion tracking terms need one")
    return s.motion


# --- the relative state (``MotionCommand.post_compute``) ---------------------------------------------------

def _apply_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``_quat_apply_inverse_components`` of Numba: float32 cross products, the rest float64 (``2.0 * ...``)."""
    w, x, y, z = q[..., 0], -q[..., 1], -q[..., 2], -q[..., 3]
    vx, vy, vz = v.unbind(-1)
    tx, ty, tz = 2.0 * (y * vz - z * vy).double(), 2.0 * (z * vx - x * vz).double(), 2.0 * (x * vy - y * vx).double()
    w, x, y, z = w.double(), x.double(), y.double(), z.double()
    return torch.stack([vx.double() + w * tx + y * tz - z * ty, vy.double() + w * ty + z * tx - x * tz,
                        vz.double() + w * tz + x * ty - y * tx], dim=-1).to(F32)


def _rot6d(q: torch.Tensor) -> torch.Tensor:
    """``_quat_to_rot6d_components``: the first two columns of the rotation matrix, float32 products, float64 sums."""
    w, x, y, z = q.unbind(-1)
    xx, yy, zz, xy, xz, yz, wx, wy, wz = x * x, y * y, z * z, x * y, x * z, y * z, w * x, w * y, w * z
    return torch.stack([1.0 - 2.0 * (yy + zz).double(), 2.0 * (xy - wz).double(), 2.0 * (xy + wz).double(),
                        1.0 - 2.0 * (xx + zz).double(), 2.0 * (xz - wy).double(), 2.0 * (yz + wx).double()],
                       dim=-1).to(F32)


def _conjugate(q: torch.Tensor) -> torch.Tensor:
    return torch.cat([q[..., :1], -q[..., 1:]], dim=-1)


def read_robot_bodies(s: DeviceEnvState) -> None:
    """The robot's tracked bodies from their world-frame sensors (``track_*_w_<body>``, as the backend's body-state
    copy reads them), float32 as the command's buffers hold them."""
    m = _motion(s)
    for key, prefix in (("pos", "track_pos_w"), ("quat", "track_quat_w"), ("lin_vel", "track_linvel_w"),
                        ("ang_vel", "track_angvel_w")):
        _store(m.robot, key, torch.stack([s.sim.sensor(f"{prefix}_{body}") for body in m.body_names], dim=1).to(F32))


def _store(held: dict[str, torch.Tensor], key: str, value: torch.Tensor) -> None:
    """``held[key]`` set to ``value``, into the tensor already there (its storage stays the same).

    The next step's rewards and terminations read what this step stored: in the step's CUDA graph they read the
    address they read at its capture, so every store after the first must write there, never bind a new tensor
    (a new one would leave the graph reading the first one's storage, stale and returned to the allocator)."""
    if key in held:
        held[key].copy_(value)
    else:
        held[key] = value


def refresh_relative_state(s: DeviceEnvState) -> None:
    """The robot's bodies read again (``read_robot_bodies``) and the relative state of
    ``update_motion_relative_state_kernel``: the reference bodies moved to the robot's anchor, yawed by the heading
    between the two anchors (``body_pos_relative_w``, ``body_quat_relative_w``), the reference anchor in the robot
    anchor's frame (``anchor_pos_b``, ``anchor_ori_b``), and the robot's bodies in its anchor's frame
    (``robot_body_pos_b``, ``robot_body_ori_b``)."""
    read_robot_bodies(s)
    m = _motion(s)
    robot_pos, robot_quat = m.robot["pos"], m.robot["quat"]
    a = m.anchor
    anchor_pos, anchor_quat = robot_pos[:, a], robot_quat[:, a]
    motion_anchor_local, motion_anchor_quat = m.body_pos_local_w[:, a], m.body_quat_w[:, a]

    yaw = quat_mul(anchor_quat, _conjugate(motion_anchor_quat))  # float32, as Numba's float32 components
    yw, yx, yy, yz = yaw.unbind(-1)
    half = 0.5 * torch.atan2(2.0 * (yw * yz + yx * yy).double(), 1.0 - 2.0 * (yy * yy + yz * yz).double())
    delta_w, delta_z = torch.cos(half), torch.sin(half)
    yaw_cross, yaw_z2 = 2.0 * delta_w * delta_z, 2.0 * delta_z * delta_z

    anchor_quat_b = anchor_quat[:, None].expand_as(robot_quat)
    relative = m.relative
    _store(relative, "anchor_pos_b", _apply_inverse(anchor_quat, m.body_pos_w[:, a] - anchor_pos))
    _store(relative, "anchor_ori_b", _rot6d(quat_mul(_conjugate(anchor_quat), motion_anchor_quat)))
    zero = torch.zeros_like(delta_w)
    delta = torch.stack([delta_w, zero, zero, delta_z], dim=-1)[:, None].expand(-1, len(m.body_names), -1)
    _store(relative, "body_quat_relative_w", quat_mul(delta, m.body_quat_w.double()).to(F32))
    v = m.body_pos_local_w - motion_anchor_local[:, None]
    vx, vy = v[..., 0].double(), v[..., 1].double()
    yc, yz2 = yaw_cross[:, None], yaw_z2[:, None]
    _store(relative, "body_pos_relative_w", torch.stack([
        ((vx - yc * vy) - yz2 * vx + anchor_pos[:, None, 0].double()).to(F32),
        ((vy + yc * vx) - yz2 * vy + anchor_pos[:, None, 1].double()).to(F32),
        v[..., 2] + motion_anchor_local[:, None, 2]], dim=-1))
    _store(relative, "robot_body_pos_b", _apply_inverse(anchor_quat_b, robot_pos - anchor_pos[:, None]))
    _store(relative, "robot_body_ori_b", _rot6d(quat_mul(_conjugate(anchor_quat_b), robot_quat)))


# --- observations -----------------------------------------------------------------------------------------

def motion_anchor_pos_b(s: DeviceEnvState, command_name: str) -> torch.Tensor:
    del command_name  # the task has one command term
    return _motion(s).relative["anchor_pos_b"]


def motion_anchor_ori_b(s: DeviceEnvState, command_name: str) -> torch.Tensor:
    del command_name
    return _motion(s).relative["anchor_ori_b"]


def robot_body_pos_b(s: DeviceEnvState, command_name: str) -> torch.Tensor:
    del command_name
    return _motion(s).relative["robot_body_pos_b"].flatten(1)


def robot_body_ori_b(s: DeviceEnvState, command_name: str) -> torch.Tensor:
    del command_name
    return _motion(s).relative["robot_body_ori_b"].flatten(1)


def motion_joint_pos_rel(s: DeviceEnvState, command_name: str) -> torch.Tensor:
    del command_name
    return s.joint_pos() - s.default_joint_pos - _motion(s).joint_default_bias


# --- rewards ----------------------------------------------------------------------------------------------

def _sum3(d: torch.Tensor) -> torch.Tensor:
    """NumPy's sum of three columns, left to right."""
    return (d[..., 0] + d[..., 1]) + d[..., 2]


def _exp_neg(error: torch.Tensor, std: float) -> torch.Tensor:
    """``exp(error / -(std**2))`` in the error's dtype (NumPy's float32 with a Python scalar)."""
    return torch.exp(error / -(std**2))


def motion_global_anchor_position_error_exp(s: DeviceEnvState, command_name: str, std: float) -> torch.Tensor:
    del command_name
    m = _motion(s)
    return _exp_neg(_sum3(torch.square(m.body_pos_w[:, m.anchor] - m.robot["pos"][:, m.anchor])), std)


def quat_error_squared(q1: torch.Tensor, q2: torch.Tensor, angle_dtype: torch.dtype = F32) -> torch.Tensor:
    """The squared angle of ``q2 * conj(q1)``: the products and the norm in the inputs' dtype, the angle in
    ``angle_dtype`` (float32: ``np_quat_error_magnitude_squared_batched``; float64: Numba's ``_quat_error_squared``,
    where clamping against float literals promotes)."""
    w1, x1, y1, z1 = q1.unbind(-1)
    w2, x2, y2, z2 = q2.unbind(-1)
    rel_w = torch.abs(w2 * w1 + x2 * x1 + y2 * y1 + z2 * z1)
    rel_x = -w2 * x1 + x2 * w1 - y2 * z1 + z2 * y1
    rel_y = -w2 * y1 + x2 * z1 + y2 * w1 - z2 * x1
    rel_z = -w2 * z1 - x2 * y1 + y2 * x1 + z2 * w1
    norm = torch.sqrt(rel_x * rel_x + rel_y * rel_y + rel_z * rel_z)
    angle = 2.0 * torch.atan2(norm.to(angle_dtype), torch.clamp(rel_w.to(angle_dtype), -1.0, 1.0))
    return angle * angle


def motion_global_anchor_orientation_error_exp(s: DeviceEnvState, command_name: str, std: float) -> torch.Tensor:
    del command_name
    m = _motion(s)
    return _exp_neg(quat_error_squared(m.body_quat_w[:, m.anchor], m.robot["quat"][:, m.anchor]), std)


def _bodies(m: MotionReference, values: torch.Tensor, body_names: Sequence[str] | None) -> torch.Tensor:
    """The named bodies' columns of (N, B, ·) ``values`` (all without names), by integer views: no index tensor is
    made from host data in a step."""
    if body_names is None:
        return values
    return torch.stack([values[:, m.body_names.index(name)] for name in body_names], dim=1)


def _body_exp(error: torch.Tensor, std: float) -> torch.Tensor:
    """The body rewards' Numba kernels: the bodies' errors summed in float64, over ``-(bodies * std * std)`` with
    the float32 std, ``exp`` in float64, stored as float32."""
    std32 = float(np.float32(std))
    total = error[:, 0].double()
    for body in range(1, error.shape[1]):
        total = total + error[:, body].double()
    return torch.exp(total / -(error.shape[1] * std32 * std32)).to(F32)


def _body_sq_error(reference: torch.Tensor, actual: torch.Tensor) -> torch.Tensor:
    d = reference - actual
    return (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) + d[..., 2] * d[..., 2]


def motion_relative_body_position_error_exp(s: DeviceEnvState, command_name: str, std: float,
                                            body_names: Sequence[str] | None = None) -> torch.Tensor:
    del command_name
    m = _motion(s)
    error = _body_sq_error(_bodies(m, m.relative["body_pos_relative_w"], body_names),
                           _bodies(m, m.robot["pos"], body_names))
    return _body_exp(error, std)


def motion_relative_body_orientation_error_exp(s: DeviceEnvState, command_name: str, std: float,
                                               body_names: Sequence[str] | None = None) -> torch.Tensor:
    del command_name
    m = _motion(s)
    error = quat_error_squared(_bodies(m, m.relative["body_quat_relative_w"], body_names),
                               _bodies(m, m.robot["quat"], body_names), angle_dtype=F64)
    return _body_exp(error, std)


def motion_global_body_linear_velocity_error_exp(s: DeviceEnvState, command_name: str, std: float,
                                                 body_names: Sequence[str] | None = None) -> torch.Tensor:
    del command_name
    m = _motion(s)
    return _body_exp(_body_sq_error(_bodies(m, m.body_lin_vel_w, body_names),
                                    _bodies(m, m.robot["lin_vel"], body_names)), std)


def motion_global_body_angular_velocity_error_exp(s: DeviceEnvState, command_name: str, std: float,
                                                  body_names: Sequence[str] | None = None) -> torch.Tensor:
    del command_name
    m = _motion(s)
    return _body_exp(_body_sq_error(_bodies(m, m.body_ang_vel_w, body_names),
                                    _bodies(m, m.robot["ang_vel"], body_names)), std)


def motion_joint_position_error_exp(s: DeviceEnvState, command_name: str, std: float) -> torch.Tensor:
    del command_name
    return _exp_neg(torch.mean(torch.square(_motion(s).joint_pos - s.joint_pos()), dim=-1), std)


def motion_joint_velocity_error_exp(s: DeviceEnvState, command_name: str, std: float) -> torch.Tensor:
    del command_name
    return _exp_neg(torch.mean(torch.square(_motion(s).joint_vel - s.joint_vel()), dim=-1), std)


def joint_pos_limits(s: DeviceEnvState, asset_cfg: object = None) -> torch.Tensor:
    """Squared violations of the soft joint limits, summed over the entity's joints (``asset_cfg`` must select them
    all, as the task's does: a subset is refused)."""
    if asset_cfg is not None and getattr(asset_cfg, "joint_ids", slice(None)) != slice(None):
        raise ValueError("the device env's joint_pos_limits reads every joint; a joint subset has no device form")
    if s.soft_joint_pos_limits is None:
        raise ValueError("the device env state has no soft joint limits; joint_pos_limits needs them")
    joint_pos, limits = s.joint_pos(), s.soft_joint_pos_limits
    error = torch.clamp_min(limits[:, 0] - joint_pos, 0.0) + torch.clamp_min(joint_pos - limits[:, 1], 0.0)
    return torch.sum(torch.square(error), dim=-1)


def undesired_body_contacts(s: DeviceEnvState, command_name: str, threshold: float,
                            body_names: Sequence[str] | None = None) -> torch.Tensor:
    del command_name
    m = _motion(s)
    return torch.sum(_bodies(m, m.robot["pos"], body_names)[..., 2] < threshold, dim=-1)


# --- terminations -----------------------------------------------------------------------------------------

def motion_clip_end(s: DeviceEnvState, command_name: str) -> torch.Tensor:
    del command_name
    m = _motion(s)
    return m.time_steps >= m.clip_end_frames


def bad_anchor_pos_z_only(s: DeviceEnvState, command_name: str, threshold: float) -> torch.Tensor:
    del command_name
    m = _motion(s)
    return torch.abs(m.body_pos_w[:, m.anchor, 2] - m.robot["pos"][:, m.anchor, 2]) > threshold


def bad_anchor_ori(s: DeviceEnvState, command_name: str, threshold: float, asset_cfg: object = None) -> torch.Tensor:
    """The anchors' gravity directions in their own frames, z apart by more than ``threshold``
    (``np_quat_apply_inverse`` of the world gravity direction (0, 0, -1), float32)."""
    del command_name, asset_cfg
    m = _motion(s)
    motion_quat, robot_quat = m.body_quat_w[:, m.anchor], m.robot["quat"][:, m.anchor]
    gravity = torch.zeros_like(motion_quat[:, :3])
    gravity[:, 2] = -1.0
    motion_z = quat_apply_inverse(motion_quat, gravity)[:, 2]
    robot_z = quat_apply_inverse(robot_quat, gravity)[:, 2]
    return torch.abs(motion_z - robot_z) > threshold


def bad_motion_body_pos_z_only(s: DeviceEnvState, command_name: str, threshold: float,
                               body_names: Sequence[str] | None = None) -> torch.Tensor:
    del command_name
    m = _motion(s)
    error = torch.abs(_bodies(m, m.relative["body_pos_relative_w"], body_names)[..., 2]
                      - _bodies(m, m.robot["pos"], body_names)[..., 2])
    return torch.any(error > threshold, dim=-1)
