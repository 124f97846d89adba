"""UniLab 1.3.2's env terms in torch, one small function each: the twins of its NumPy terms.

Each twin reads the device env's state (``DeviceEnvState``: the physics views and the env's own buffers) and
returns one value per env, as its NumPy term does, with the term's arithmetic in the term's dtypes (float32 where
UniLab computes in float32), so that on identical inputs the two agree to float32 rounding. The twins are grouped
by the UniLab module of their term: ``common`` (``unilab.envs.mdp``), ``locomotion``
(``unilab.tasks.locomotion.common``), ``g1`` (G1 Walk Flat's own), ``motion_tracking``
(``unilab.tasks.motion_tracking.common``). ``twin_of`` maps a task config's term ``func``
(by its object: a function, or the class of a class term) to its twin, from the one table ``_unilab_terms``; a
term without a twin is refused in one line when a device env is bound. G1 Walk Flat's, Go2 Joystick Flat's and
G1 motion tracking's terms each have a twin.
"""

from __future__ import annotations

import inspect
from typing import Any

from flashsac_runtime.envs.terms import common, g1, locomotion, motion_tracking
from flashsac_runtime.envs.terms.state import DeviceEnvState, PhysicsView, Term, device_params

__all__ = ["DeviceEnvState", "PhysicsView", "Term", "common", "device_params", "g1", "locomotion", "motion_tracking",
           "twin_of"]


def _same_names(unilab_module: Any, twins: Any, names: tuple[str, ...]) -> dict[Any, Term]:
    """UniLab's terms of ``unilab_module`` named ``names`` -> the twins of the same name in ``twins``."""
    return {getattr(unilab_module, name): getattr(twins, name) for name in names}


def _unilab_terms() -> tuple[dict[Any, Term], dict[Any, Term], dict[Any, Term]]:
    """UniLab's term objects (functions, or the classes of class terms) -> torch twins."""
    from unilab.envs import mdp
    from unilab.tasks.locomotion.common import manager_terms as loco
    from unilab.tasks.locomotion.common import sensor_reward_terms as sensor
    from unilab.tasks.locomotion.g1 import manager_terms as unilab_g1
    from unilab.tasks.motion_tracking.common import manager_terms as motion

    observations = {mdp.builtin_sensor: common.builtin_sensor,
                    mdp.projected_gravity_from_sensor: common.projected_gravity_from_sensor,
                    mdp.joint_pos_rel: common.joint_pos_rel, mdp.joint_vel_rel: common.joint_vel_rel,
                    mdp.last_action: common.last_action, mdp.generated_commands: common.generated_commands,
                    unilab_g1.G1GaitPhase: g1.gait_phase, loco.quadruped_gait_phase: locomotion.quadruped_gait_phase,
                    **_same_names(motion, motion_tracking, ("motion_anchor_pos_b", "motion_anchor_ori_b",
                                                            "robot_body_pos_b", "robot_body_ori_b",
                                                            "motion_joint_pos_rel"))}
    rewards = {sensor.track_lin_vel: locomotion.track_lin_vel, sensor.track_ang_vel: locomotion.track_ang_vel,
               sensor.ang_vel_xy: locomotion.ang_vel_xy, sensor.orientation: locomotion.orientation,
               mdp.action_rate_l2: common.action_rate_l2, loco.alive: locomotion.alive,
               unilab_g1.weighted_pose: g1.weighted_pose, unilab_g1.penalty_feet_ori: g1.penalty_feet_ori,
               unilab_g1.feet_phase: g1.feet_phase,
               loco.track_lin_vel_xy_exp: locomotion.track_lin_vel_xy_exp,
               loco.track_ang_vel_z_exp: locomotion.track_ang_vel_z_exp, loco.lin_vel_z_l2: locomotion.lin_vel_z_l2,
               loco.ang_vel_xy_l2: locomotion.ang_vel_xy_l2, loco.base_height_l2: locomotion.base_height_l2,
               loco.joint_deviation_l1: locomotion.joint_deviation_l1,
               loco.feet_phase_contact: locomotion.feet_phase_contact,
               loco.feet_phase_swing_height: locomotion.feet_phase_swing_height,
               **_same_names(motion, motion_tracking, (
                   "motion_global_anchor_position_error_exp", "motion_global_anchor_orientation_error_exp",
                   "motion_relative_body_position_error_exp", "motion_relative_body_orientation_error_exp",
                   "motion_global_body_linear_velocity_error_exp", "motion_global_body_angular_velocity_error_exp",
                   "motion_joint_position_error_exp", "motion_joint_velocity_error_exp", "joint_pos_limits",
                   "undesired_body_contacts"))}
    terminations = {mdp.time_out: common.time_out, unilab_g1.g1_tilt_exceeded: g1.g1_tilt_exceeded,
                    mdp.root_height_below_minimum: common.root_height_below_minimum,
                    mdp.bad_orientation: common.bad_orientation,
                    **_same_names(motion, motion_tracking, ("motion_clip_end", "bad_anchor_pos_z_only",
                                                            "bad_anchor_ori", "bad_motion_body_pos_z_only"))}
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
