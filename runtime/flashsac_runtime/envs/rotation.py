"""Quaternion helpers of the device env (w-first), written as UniLab's NumPy ones (``unilab.utils.rotation``):
the same products in the same order, so float64 inputs give the NumPy results."""

from __future__ import annotations

import torch


def quat_mul(q1: torch.Tensor, q2: torch.Tensor) -> torch.Tensor:
    w1, x1, y1, z1 = q1.unbind(-1)
    w2, x2, y2, z2 = q2.unbind(-1)
    return torch.stack([
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ], dim=-1)


def quat_from_euler_xyz(roll: torch.Tensor, pitch: torch.Tensor, yaw: torch.Tensor) -> torch.Tensor:
    cr, sr = torch.cos(roll * 0.5), torch.sin(roll * 0.5)
    cp, sp = torch.cos(pitch * 0.5), torch.sin(pitch * 0.5)
    cy, sy = torch.cos(yaw * 0.5), torch.sin(yaw * 0.5)
    return torch.stack([
        cr * cp * cy + sr * sp * sy,
        sr * cp * cy - cr * sp * sy,
        cr * sp * cy + sr * cp * sy,
        cr * cp * sy - sr * sp * cy,
    ], dim=-1)


def quat_apply_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate ``v`` by the conjugate of ``q`` (``np_quat_apply(np_quat_inv(q), v)``)."""
    w, x, y, z = q[..., 0], -q[..., 1], -q[..., 2], -q[..., 3]
    vx, vy, vz = v.unbind(-1)
    t = 2 * torch.stack([y * vz - z * vy, z * vx - x * vz, x * vy - y * vx], dim=-1)
    t = t + 2 * w[..., None] * v
    return v + torch.stack([
        y * t[..., 2] - z * t[..., 1],
        z * t[..., 0] - x * t[..., 2],
        x * t[..., 1] - y * t[..., 0],
    ], dim=-1)


def quat_apply_inverse_batched(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate ``v`` by the conjugate of ``q`` (``np_quat_apply_inverse_batched``: ``np_quat_apply_batched``'s
    products and order, which differ from ``np_quat_apply``'s)."""
    w, x, y, z = q[..., 0], -q[..., 1], -q[..., 2], -q[..., 3]
    vx, vy, vz = v.unbind(-1)
    tx = 2 * (y * vz - z * vy)
    ty = 2 * (z * vx - x * vz)
    tz = 2 * (x * vy - y * vx)
    return v + torch.stack([
        w * tx + y * tz - z * ty,
        w * ty + z * tx - x * tz,
        w * tz + x * ty - y * tx,
    ], dim=-1)
