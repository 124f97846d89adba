"""The G1 Walk Flat terms as Warp functions of one env row: the fused form of the torch twins in ``terms.py``.

The torch twins are one torch operation per arithmetic step, so a step of G1 Walk Flat's terms is about 160 small
kernels; at a few hundred envs each costs a launch slot more than its work. These functions compute the same
values for one row, so that ``fused_step.FusedTerms`` can do every term of a step in one kernel. Each is made by a
factory from the term's parameters (Warp captures them as constants) and does the torch twin's arithmetic in the
twin's dtypes and order. Where the two may differ: a compiler that contracts a product and a sum into one
fused multiply-add (CUDA's default), a reduction summed in another order (``action_rate_l2``, ``weighted_pose``),
and Warp's ``exp`` and ``acos`` against torch's. ``warp_twin_of`` maps a torch twin to its factory; a term
without one keeps the torch step (``fused_step.unsupported``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import warp as wp

from flashsac_runtime.envs import terms as T


@wp.struct
class StepArrays:
    """What the fused step reads and writes, as Warp views of the device env's tensors (addresses fixed)."""

    qpos: wp.array2d(dtype=wp.float32)
    qvel: wp.array2d(dtype=wp.float32)
    sensordata: wp.array2d(dtype=wp.float32)
    joint_qpos_cols: wp.array(dtype=wp.int32)
    joint_qvel_cols: wp.array(dtype=wp.int32)
    default_joint_pos: wp.array2d(dtype=wp.float32)
    default_joint_vel: wp.array2d(dtype=wp.float32)
    action: wp.array2d(dtype=wp.float32)
    prev_action: wp.array2d(dtype=wp.float32)
    command: wp.array2d(dtype=wp.float32)
    gait_phase: wp.array2d(dtype=wp.float32)
    steps: wp.array(dtype=wp.int64)
    episode_length: wp.array(dtype=wp.int64)
    time_left: wp.array(dtype=wp.float32)
    is_standing: wp.array(dtype=wp.bool)
    penalty_scale: wp.array(dtype=wp.float64)        # the curriculum's scale, one element
    average_length: wp.array(dtype=wp.float64)       # the curriculum's episode length average, one element
    done_count: wp.array(dtype=wp.int64)             # the step's done rows and the sum of their lengths (scratch)
    reset_mask: wp.array(dtype=wp.bool)              # MuJoCo Warp's reset mask (``MjwarpState.reset_masked``)
    gainprm: wp.array3d(dtype=wp.float32)            # the per-world actuator gains (world, actuator, parameter)
    biasprm: wp.array3d(dtype=wp.float32)
    gain_cols: wp.array(dtype=wp.int32)              # the actuators ``pd_gains`` scales
    vectors: wp.array2d(dtype=wp.float64)            # the terms' number lists, one row each (``TermContext``)
    drawn_f32: wp.array(dtype=wp.float32)            # the step's draws (taken ahead), as float32 ...
    drawn_bool: wp.array(dtype=wp.bool)              # ... and as bool, at the offsets ``FusedTerms`` found
    reward: wp.array(dtype=wp.float32)
    terminated: wp.array(dtype=wp.bool)
    truncated: wp.array(dtype=wp.bool)
    done: wp.array(dtype=wp.bool)
    policy_obs: wp.array2d(dtype=wp.float32)
    critic_obs: wp.array2d(dtype=wp.float32)
    final_policy_obs: wp.array2d(dtype=wp.float32)
    final_critic_obs: wp.array2d(dtype=wp.float32)


@dataclass
class TermContext:
    """What a factory reads besides the term's parameters: sensor slots, columns, and a row of ``vectors`` for each
    number list (``vector_row`` appends it; ``FusedTerms`` uploads them)."""

    sensor_slots: dict[str, tuple[int, int]]
    root_height_col: int
    max_episode_length: int
    vectors: list[list[float]]

    def sensor(self, name: str) -> int:
        return int(self.sensor_slots[name][0])

    def vector_row(self, values: Any) -> int:
        self.vectors.append([float(v) for v in values])
        return len(self.vectors) - 1


# --- observations: (s, row, column of the term) -> float32 ------------------------------------------------

def _builtin_sensor(ctx: TermContext, sensor_name: str) -> Any:
    start = ctx.sensor(sensor_name)

    @wp.func
    def term(s: StepArrays, row: int, j: int) -> wp.float32:
        return s.sensordata[row, start + j]

    return term


def _projected_gravity_from_sensor(ctx: TermContext, sensor_name: str) -> Any:
    start = ctx.sensor(sensor_name)

    @wp.func
    def term(s: StepArrays, row: int, j: int) -> wp.float32:
        return -s.sensordata[row, start + j]

    return term


def _joint_pos_rel(ctx: TermContext) -> Any:
    @wp.func
    def term(s: StepArrays, row: int, j: int) -> wp.float32:
        return s.qpos[row, s.joint_qpos_cols[j]] - s.default_joint_pos[row, j]

    return term


def _joint_vel_rel(ctx: TermContext) -> Any:
    @wp.func
    def term(s: StepArrays, row: int, j: int) -> wp.float32:
        return s.qvel[row, s.joint_qvel_cols[j]] - s.default_joint_vel[row, j]

    return term


def _last_action(ctx: TermContext, action_name: str) -> Any:
    @wp.func
    def term(s: StepArrays, row: int, j: int) -> wp.float32:
        return s.action[row, j]

    return term


def _generated_commands(ctx: TermContext, command_name: str) -> Any:
    @wp.func
    def term(s: StepArrays, row: int, j: int) -> wp.float32:
        return s.command[row, j]

    return term


def _gait_phase(ctx: TermContext, frequency: float, init_mode: str) -> Any:
    @wp.func
    def term(s: StepArrays, row: int, j: int) -> wp.float32:
        return s.gait_phase[row, j]

    return term


# --- rewards: (s, row) -> float32 -------------------------------------------------------------------------

def _track_lin_vel(ctx: TermContext, tracking_sigma: float, command_name: str, sensor_name: str) -> Any:
    start, sigma = ctx.sensor(sensor_name), float(tracking_sigma)

    @wp.func
    def term(s: StepArrays, row: int) -> wp.float32:
        dx = s.command[row, 0] - s.sensordata[row, start]
        dy = s.command[row, 1] - s.sensordata[row, start + 1]
        error = dx * dx + dy * dy
        return wp.exp(-error / wp.float32(sigma))

    return term


def _track_ang_vel(ctx: TermContext, tracking_sigma: float, command_name: str, sensor_name: str) -> Any:
    start, sigma = ctx.sensor(sensor_name), float(tracking_sigma)

    @wp.func
    def term(s: StepArrays, row: int) -> wp.float32:
        dz = s.command[row, 2] - s.sensordata[row, start + 2]
        return wp.exp(-(dz * dz) / wp.float32(sigma))

    return term


def _xy_square(ctx: TermContext, sensor_name: str) -> Any:
    """``ang_vel_xy`` and ``orientation``: the sum of the squares of the sensor's first two components."""
    start = ctx.sensor(sensor_name)

    @wp.func
    def term(s: StepArrays, row: int) -> wp.float32:
        x = s.sensordata[row, start]
        y = s.sensordata[row, start + 1]
        return x * x + y * y

    return term


def _action_rate_l2(ctx: TermContext) -> Any:
    @wp.func
    def term(s: StepArrays, row: int) -> wp.float32:
        total = wp.float32(0.0)
        for j in range(s.action.shape[1]):
            d = s.action[row, j] - s.prev_action[row, j]
            total += d * d
        return total

    return term


def _weighted_pose(ctx: TermContext, pose_weights: Any) -> Any:
    weights = ctx.vector_row(pose_weights.tolist() if hasattr(pose_weights, "tolist") else pose_weights)

    @wp.func
    def term(s: StepArrays, row: int) -> wp.float32:
        total = wp.float64(0.0)
        for j in range(s.joint_qpos_cols.shape[0]):
            d = s.qpos[row, s.joint_qpos_cols[j]] - s.default_joint_pos[row, j]
            total += s.vectors[weights, j] * wp.float64(d * d)
        return wp.float32(total)

    return term


def _penalty_feet_ori(ctx: TermContext) -> Any:
    left, right = ctx.sensor("left_foot_quat"), ctx.sensor("right_foot_quat")

    @wp.func
    def term(s: StepArrays, row: int) -> wp.float32:
        l1 = s.sensordata[row, left + 1]
        l2 = s.sensordata[row, left + 2]
        r1 = s.sensordata[row, right + 1]
        r2 = s.sensordata[row, right + 2]
        return l1 * l1 + l2 * l2 + r1 * r1 + r2 * r2

    return term


def _feet_phase(ctx: TermContext, frequency: float, swing_height: float, tracking_sigma: float,
                min_forward_speed: float, command_name: str) -> Any:
    left, right = ctx.sensor("left_foot_pos"), ctx.sensor("right_foot_pos")
    linvel = ctx.sensor("pelvis_local_linvel")
    height, sigma, min_speed = float(swing_height), float(tracking_sigma), float(min_forward_speed)
    pi, two_pi = math.pi, 2.0 * math.pi

    @wp.func
    def bezier(t: wp.float32) -> wp.float32:
        return t * t * t + wp.float32(3.0) * (t * t * (wp.float32(1.0) - t))

    @wp.func
    def target(phase: wp.float32) -> wp.float32:
        # ``feet_phase_height_targets``: the cubic-Bézier swing-height target of one foot
        phi = wp.mod(phase + wp.float32(pi), wp.float32(two_pi)) - wp.float32(pi)
        x = (phi + wp.float32(pi)) / wp.float32(two_pi)
        if x <= wp.float32(0.5):
            return wp.float32(0.0) + wp.float32(height) * bezier(wp.float32(2.0) * x)
        return wp.float32(height) + wp.float32(-height) * bezier(wp.float32(2.0) * x - wp.float32(1.0))

    @wp.func
    def term(s: StepArrays, row: int) -> wp.float32:
        dl = s.sensordata[row, left + 2] - target(s.gait_phase[row, 0])
        dr = s.sensordata[row, right + 2] - target(s.gait_phase[row, 1])
        error = dl * dl + dr * dr
        forward = wp.max(s.sensordata[row, linvel], wp.float32(0.0))
        gate = wp.float32(0.0)
        if forward >= wp.float32(min_speed):
            gate = wp.float32(1.0)
        return wp.exp(-error / wp.float32(sigma)) * gate

    return term


def _alive(ctx: TermContext) -> Any:
    @wp.func
    def term(s: StepArrays, row: int) -> wp.float32:
        return wp.float32(1.0)

    return term


# --- terminations: (s, row) -> bool -----------------------------------------------------------------------

def _time_out(ctx: TermContext) -> Any:
    limit = int(ctx.max_episode_length)

    @wp.func
    def term(s: StepArrays, row: int) -> wp.bool:
        return s.episode_length[row] >= wp.int64(limit)

    return term


def _g1_tilt_exceeded(ctx: TermContext, max_tilt_deg: float) -> Any:
    up, limit = ctx.sensor("torso_upvector"), math.radians(float(max_tilt_deg))

    @wp.func
    def term(s: StepArrays, row: int) -> wp.bool:
        z = wp.clamp(s.sensordata[row, up + 2], wp.float32(-1.0), wp.float32(1.0))
        return wp.acos(z) > wp.float32(limit)

    return term


def _root_height_below_minimum(ctx: TermContext, minimum_height: float) -> Any:
    col, minimum = int(ctx.root_height_col), float(minimum_height)

    @wp.func
    def term(s: StepArrays, row: int) -> wp.bool:
        return s.qpos[row, col] < wp.float32(minimum)

    return term


Factory = Callable[..., Any]

_WARP_TWINS: dict[Any, Factory] = {
    T.builtin_sensor: _builtin_sensor, T.projected_gravity_from_sensor: _projected_gravity_from_sensor,
    T.joint_pos_rel: _joint_pos_rel, T.joint_vel_rel: _joint_vel_rel, T.last_action: _last_action,
    T.generated_commands: _generated_commands, T.gait_phase: _gait_phase,
    T.track_lin_vel: _track_lin_vel, T.track_ang_vel: _track_ang_vel, T.ang_vel_xy: _xy_square,
    T.orientation: _xy_square, T.action_rate_l2: _action_rate_l2, T.weighted_pose: _weighted_pose,
    T.penalty_feet_ori: _penalty_feet_ori, T.feet_phase: _feet_phase, T.alive: _alive,
    T.time_out: _time_out, T.g1_tilt_exceeded: _g1_tilt_exceeded,
    T.root_height_below_minimum: _root_height_below_minimum,
}


def warp_twin_of(twin: T.Term) -> Factory | None:
    """The Warp factory of a torch twin, or None (then the env keeps the torch step)."""
    return _WARP_TWINS.get(twin)
