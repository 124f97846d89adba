"""A device env's own torch draws against its config: each randomized quantity, read back from the env's state, must
have the distribution the config gives it.

Training draws with ``TorchDraws`` (one torch generator on the device), not with UniLab's NumPy draws that the
sameness checks feed the env, so the sameness checks cannot see a wrong range, a wrong width or a wrong operation in
the torch path. These checks read what the env wrote (its root state, its model rows, its commands) and compare it
with the ranges of the tree's own task config, composed without the overrides the env was built with. One
implementation of each check serves every task's device env: ``device_env_check.py --mode distribution`` (G1 Walk
Flat) and ``go2_device_env_check.py --mode distribution`` (Go2 Joystick Flat). A range test (``range_check``) is
statistical and can fail: every sample inside the range, the range covered, the mean within 4 standard errors of the
middle, and the empirical distribution a uniform one (Kolmogorov-Smirnov at a significance of 0.001); a degenerate
range (low = high) is a point every sample must equal, to float32's rounding.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: sqrt(n) * D (Kolmogorov-Smirnov) above which a sample is not uniform at a significance of 0.001, from Kolmogorov's
#: limit distribution (P(K > 1.9495) = 0.001); for the sample sizes here (over 200) the limit is accurate.
KS_CRITICAL = 1.9495
#: The keys of a root pose or velocity range in UniLab's ``reset_root_state_uniform`` (a missing key: no offset).
SE3_KEYS = ("x", "y", "z", "roll", "pitch", "yaw")


def range_check(name: str, values: np.ndarray, low: float, high: float) -> dict[str, Any]:
    """Samples of U[low, high]: inside it (float32 slack), covering it, centred (4 standard errors), uniform
    (Kolmogorov-Smirnov); for low = high, every sample at that point (float32 slack). No sample fails."""
    values = np.sort(np.asarray(values, dtype=np.float64).ravel())
    low, high = float(low), float(high)
    if values.size == 0:  # nothing drawn: nothing shown
        return {"name": name, "range": [low, high], "samples": 0, "ok": False}
    span = high - low
    slack = 1e-6 * max(1.0, abs(low), abs(high))
    out: dict[str, Any] = {"name": name, "range": [low, high], "samples": int(values.size), "min": float(values[0]),
                           "max": float(values[-1]), "mean": float(values.mean())}
    inside = bool(values[0] >= low - slack and values[-1] <= high + slack)
    if span == 0.0:
        return {**out, "inside": inside, "ok": inside}
    n = values.size
    cdf = np.clip((values - low) / span, 0.0, 1.0)
    ks = float(max((np.arange(1, n + 1) / n - cdf).max(), (cdf - np.arange(n) / n).max()))
    checks = {
        "inside": inside,
        "covers": bool(values[0] <= low + 0.05 * span and values[-1] >= high - 0.05 * span),
        "centred": bool(abs(values.mean() - (low + high) / 2) <= 4.0 * span / math.sqrt(12.0 * n)),
        "uniform": bool(math.sqrt(n) * ks <= KS_CRITICAL),
    }
    return {**out, "ks_sqrt_n_d": math.sqrt(n) * ks, **checks, "ok": all(checks.values())}


def _pair(ranges: Any, key: str) -> tuple[float, float]:
    value = ranges.get(key) if ranges is not None else None
    return (0.0, 0.0) if value is None else (float(value[0]), float(value[1]))


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    aw, ax, ay, az = a.T
    bw, bx, by, bz = b.T
    return np.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], axis=1)


def _quat_apply(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate ``v`` by the unit quaternions ``q`` (w, x, y, z), row by row."""
    w, u = q[:, :1], q[:, 1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def _euler_xyz(q: np.ndarray) -> np.ndarray:
    """Roll, pitch, yaw of ``q`` (w, x, y, z), the inverse of ``quat_from_euler_xyz`` (rotations about x, then y,
    then z, in the world frame)."""
    w, x, y, z = q.T
    roll = np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0))
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return np.stack([roll, pitch, yaw], axis=1)


def root_state_checks(dev: Any, params: Any) -> list[dict[str, Any]]:
    """``reset_root_state_uniform`` right after a reset of every row: the root's offset from its default position
    (and the row's origin), its rotation from its default orientation as roll, pitch and yaw, its linear velocity and
    its angular velocity in the world frame (the env stores the latter in the root's frame, as MuJoCo's free joint
    does), each against the config's ``pose_range`` and ``velocity_range``."""
    root = dev._default_root_state.double().cpu().numpy()  # noqa: SLF001
    origins = dev._env_origins.double().cpu().numpy()  # noqa: SLF001
    qpos = dev.sim.qpos.double().cpu().numpy()[:, dev.state.root_qpos_cols.cpu().numpy()]
    qvel = dev.sim.qvel.double().cpu().numpy()[:, dev._root_qvel_cols.cpu().numpy()]  # noqa: SLF001
    quat = qpos[:, 3:7] / np.linalg.norm(qpos[:, 3:7], axis=1, keepdims=True)
    default_conj = root[:, 3:7] * np.array([1.0, -1.0, -1.0, -1.0])
    pose = np.concatenate([qpos[:, 0:3] - root[:, 0:3] - origins, _euler_xyz(_quat_mul(default_conj, quat))], axis=1)
    velocity = np.concatenate([qvel[:, 0:3], _quat_apply(quat, qvel[:, 3:6])], axis=1) - root[:, 7:13]
    names = ("x offset", "y offset", "z offset", "roll", "pitch", "yaw")
    velocities = ("linear velocity x", "linear velocity y", "linear velocity z", "angular velocity roll",
                  "angular velocity pitch", "angular velocity yaw")
    return ([range_check(f"root {name}", pose[:, i], *_pair(params.pose_range, key))
             for i, (name, key) in enumerate(zip(names, SE3_KEYS))]
            + [range_check(f"root {name}", velocity[:, i], *_pair(params.get("velocity_range"), key))
               for i, (name, key) in enumerate(zip(velocities, SE3_KEYS))])


def pd_gains_checks(dev: Any, params: Any) -> list[dict[str, Any]]:
    """``pd_gains`` right after a reset of every row: kp (the actuators' gain) and kd (minus their velocity bias),
    divided by the defaults where the operation is ``scale``, against ``kp_range`` and ``kd_range``."""
    kp = dev.sim.gainprm[:, dev._gain_cols, 0].double()  # noqa: SLF001
    kd = -dev.sim.biasprm[:, dev._gain_cols, 2].double()  # noqa: SLF001
    scale = params.get("operation", "scale") == "scale"
    if scale:
        kp, kd = kp / dev._default_kp.double(), kd / dev._default_kd.double()  # noqa: SLF001
    suffix = " scale" if scale else ""
    return [range_check(f"kp{suffix}", kp.cpu().numpy(), *params.kp_range),
            range_check(f"kd{suffix}", kd.cpu().numpy(), *params.kd_range)]


def command_checks(dev: Any, cfg: Any, planar: np.ndarray | None = None, label: str = "") -> list[dict[str, Any]]:
    """The uniform velocity command right after a reset of every row: its resampling time against
    ``resampling_time_range``; the standing rows (zeroed) left out, ``lin_vel_x`` and ``lin_vel_y`` on the rows
    ``planar`` selects (all: None; a task with a planar dead zone keeps the moving rows, ``label`` says so) and
    ``ang_vel_z`` on all, against the command config's ``ranges``."""
    command = dev.state.command.double().cpu().numpy()
    moving = ~dev.is_standing.cpu().numpy()
    rows = moving if planar is None else moving & planar
    ranges = cfg.ranges
    return [range_check("command resampling time", dev.time_left.cpu().numpy(), *cfg.resampling_time_range),
            range_check(f"command lin_vel_x{label}", command[rows, 0], *ranges.lin_vel_x),
            range_check(f"command lin_vel_y{label}", command[rows, 1], *ranges.lin_vel_y),
            range_check("command ang_vel_z", command[moving, 2], *ranges.ang_vel_z)]


def _undo(value: np.ndarray, default: np.ndarray, operation: str) -> np.ndarray:
    """The drawn sample behind a randomized value: UniLab's ``add``, ``scale`` and ``abs`` operations undone."""
    return value - default if operation == "add" else value / default if operation == "scale" else value


def _body_ids(cpu_model: Any, params: Any) -> list[tuple[int, str]]:
    """The bodies an event's ``asset_cfg`` names, by their ids in UniLab's compiled MuJoCo model."""
    import mujoco

    names = params.asset_cfg.body_names
    names = [names] if isinstance(names, str) else list(names)
    return [(mujoco.mj_name2id(cpu_model, mujoco.mjtObj.mjOBJ_BODY, name), name) for name in names]


def mass_checks(dev: Any, params: Any) -> list[dict[str, Any]]:
    """``randomize_rigid_body_mass`` right after a reset of every row: each named body's mass in the env's model
    rows, the operation undone against UniLab's compiled model, against ``mass_distribution_params``."""
    cpu = dev.host_env._backend._cpu_model  # noqa: SLF001
    mass = dev.body_mass.double().cpu().numpy()
    operation = params.get("operation", "add")
    return [range_check(f"mass {operation} ({name})", _undo(mass[:, i], cpu.body_mass[i], operation),
                        *params.mass_distribution_params) for i, name in _body_ids(cpu, params)]


def com_checks(dev: Any, params: Any) -> list[dict[str, Any]]:
    """``randomize_rigid_body_com`` right after a reset of every row: each named body's centre of mass in the env's
    model rows less UniLab's compiled one, per axis against ``com_range`` (an axis it leaves out: no offset)."""
    cpu = dev.host_env._backend._cpu_model  # noqa: SLF001
    ipos = dev.body_ipos.double().cpu().numpy()
    return [range_check(f"CoM offset {axis} ({name})", ipos[:, i, k] - cpu.body_ipos[i, k],
                        *_pair(params.com_range, axis))
            for i, name in _body_ids(cpu, params) for k, axis in enumerate(("x", "y", "z"))]


def gravity_checks(dev: Any, params: Any) -> list[dict[str, Any]]:
    """``randomize_physics_scene_gravity`` right after a reset of every row: each world's gravity, the operation
    undone against UniLab's compiled model, per axis against ``gravity_distribution_params`` (low, high)."""
    cpu = dev.host_env._backend._cpu_model  # noqa: SLF001
    gravity = dev.gravity.double().cpu().numpy()
    low, high = (np.asarray(bound, dtype=np.float64) for bound in params.gravity_distribution_params)
    operation = params.get("operation", "abs")
    return [range_check(f"gravity {axis}", _undo(gravity[:, k], cpu.opt.gravity[k], operation), low[k], high[k])
            for k, axis in enumerate(("x", "y", "z"))]


def push_checks(kicks: np.ndarray, params: Any) -> list[dict[str, Any]]:
    """``push_by_setting_velocity``: the root's linear velocity kicks, (pushes × rows, 3) in the world frame, per
    axis against ``velocity_range``."""
    return [range_check(f"push linear velocity {axis}", kicks[:, k], *_pair(params.velocity_range, axis))
            for k, axis in enumerate(("x", "y", "z"))]
