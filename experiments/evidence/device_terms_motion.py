"""G1 motion tracking in ``device_terms_check.py``: UniLab's env on CPU MuJoCo, the twins on ``HostPhysics``.

The motion command's reference (the frame of each row, its body states with the env origins, the clip's end, the
joint default bias) is copied from UniLab's ``MotionCommand`` into the state's ``MotionReference`` wherever UniLab
derives its relative state (after each ``post_compute`` of the command: the step's and a reset's), and the twins'
own ``refresh_relative_state`` runs there on it, reading the tracked-body sensors UniLab's backend reads; before the
twins run, the robot's bodies are read again (``read_robot_bodies``), as UniLab's terms read them after the step's
physics. So the relative-state observations and the rewards on it compare UniLab's Numba kernels with the torch
form, each at the moment UniLab computes it.
"""

from __future__ import annotations

import argparse
import numpy as np
import torch
from device_terms_check import host_env, host_state, reward_refusal, sync_managers


class MotionTask:
    """G1 motion tracking (``g1_motion_tracking/mujoco``) with the synthetic or the real clip in the tree."""

    def __init__(self, args: argparse.Namespace) -> None:
        from flashsac_runtime.envs.terms.motion_tracking import MotionReference

        self.env = env = host_env(args)
        command = env.command_manager.get_term("motion")
        robot = env.scene["robot"]
        reference = MotionReference.empty(int(env.num_envs), command.motion.num_joints, command.cfg.body_names,
                                          command.cfg.anchor_body_name, torch.device("cpu"))
        self.state = host_state(env, motion=reference, soft_joint_pos_limits=torch.as_tensor(
            np.array(robot.data.soft_joint_pos_limits)))
        self.action_dim = int(self.state.action.shape[1])
        self.command = command
        post_compute = command.post_compute

        def post_compute_then_refresh() -> None:
            post_compute()
            self.refresh()

        command.post_compute = post_compute_then_refresh
        self.refresh()  # the reset of init_state (before this hook) computed UniLab's relative state last

    def copy_reference(self) -> None:
        """The state's motion reference as UniLab's command holds it now."""
        c, m = self.command, self.state.motion
        data = c._motion_data  # noqa: SLF001 - the reference frame UniLab's terms read
        for target, source in ((m.joint_pos, data.joint_pos), (m.joint_vel, data.joint_vel),
                               (m.body_pos_local_w, data.body_pos_w), (m.body_pos_w, c.body_pos_w),
                               (m.body_quat_w, data.body_quat_w), (m.body_lin_vel_w, data.body_lin_vel_w),
                               (m.body_ang_vel_w, data.body_ang_vel_w), (m.time_steps, c.time_steps),
                               (m.clip_end_frames, c.sampler.current_clip_end_frames),
                               (m.joint_default_bias, c.joint_default_bias)):
            target.copy_(torch.as_tensor(np.asarray(source)))

    def refresh(self) -> None:
        from flashsac_runtime.envs.terms.motion_tracking import refresh_relative_state

        self.copy_reference()
        refresh_relative_state(self.state)

    def before_twins(self) -> None:
        from flashsac_runtime.envs.terms.motion_tracking import read_robot_bodies

        sync_managers(self.env, self.state)
        self.copy_reference()
        read_robot_bodies(self.state)

    def after_twins(self) -> None:
        pass

    def refusal(self) -> str | None:
        """The config's reward terms, then two motion rewards without a twin, bound through ``twin_of`` in that
        order: the one-line refusal (it must name the first of the two)."""
        from unilab.envs import mdp
        from unilab.tasks.motion_tracking.common import manager_terms as motion

        # a class term, as materialized (an instance; its state is not read)
        body_pos_z = object.__new__(motion.motion_relative_body_position_z_error_exp)
        return reward_refusal(self.env, [("body_pos_z", body_pos_z), ("action_acc", mdp.action_acc_l2)])
