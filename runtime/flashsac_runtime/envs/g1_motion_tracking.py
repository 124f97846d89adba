"""G1 motion tracking on MuJoCo Warp with the env's whole step on the device: ``DeviceEnvBase`` with the motion
command as device tensors.

The task's parts, read from the materialized UniLab env (``task=g1_motion_tracking/mjwarp``) and drawn in UniLab's
order through the env's draw source:

- the clip: UniLab's ``MotionLoader`` arrays (every clip of the command, its tracked bodies selected), on the device
  once; each row's reference (``terms.motion_tracking.MotionReference``) is gathered from them at its frame;
- the command (``MotionCommand``): each step the failure statistics of adaptive sampling take the step's
  terminations (an EMA per time bin of the clip, as ``MotionSampler.update_failure_stats``), the rows that do not
  reset advance one frame, and the reference is gathered again; the relative state is derived before the
  observations (``post_compute``), the robot's bodies read after the physics (``terms.motion_tracking``);
- a reset (``MotionCommand.reset`` then ``_resample_command``): the joint default bias, the resampling time (drawn,
  never reached: ``resampling_time_range`` beyond the episode), the start frame (``adaptive``: a time bin by the
  failure statistics, then a uniform offset in it; ``uniform``; ``start``), the root pose and velocity noise and the
  joint position noise, written as the root state and the joint state of the reference frame;
- the action ``MotionJointPositionAction``: the joint-position action plus the reset's joint default bias;
- the tracked bodies' sensors computed again from the final qpos/qvel after the last substep, as the backend
  refreshes them before a term reads them.

Anything else (an event, a curriculum, another command or sampling mode, a clip-end wrap, the action's latency, an
encoder bias) is refused in one line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from flashsac_runtime.envs.base import DeviceEnvBase, _tensor
from flashsac_runtime.envs.rotation import quat_apply_inverse, quat_from_euler_xyz, quat_mul
from flashsac_runtime.envs.terms.motion_tracking import MotionReference, read_robot_bodies, refresh_relative_state

_SAMPLING_MODES = ("adaptive", "uniform", "start")


@dataclass(frozen=True)
class _MotionResetDraw:
    """A reset's draws for every row, in UniLab's order: the joint default bias, the resampling time, the start
    frame's draws (adaptive: the bin's and the offset's uniforms; uniform: the frame), the root pose and velocity
    noise, the joint position noise."""
    bias: torch.Tensor
    time_left: torch.Tensor
    bin_draw: torch.Tensor | None
    offset: torch.Tensor | None
    frame: torch.Tensor | None
    pose: torch.Tensor
    velocity: torch.Tensor
    joint_noise: torch.Tensor


def numpy_sum_f32(values: torch.Tensor) -> torch.Tensor:
    """NumPy's float32 sum of a short 1-D tensor (its pairwise sum: eight running sums over whole blocks of
    eight, combined pairwise, then the rest in order; fewer than eight in order from 0), as a 0-d tensor."""
    n = values.shape[0]
    if n < 8:
        total = torch.zeros((), dtype=values.dtype, device=values.device)
        for i in range(n):
            total = total + values[i]
        return total
    if n > 128:
        raise ValueError(f"the device env's clip has {n} time bins; NumPy sums more than 128 by halves")
    blocks = n - n % 8
    r = [values[i] for i in range(8)]
    for start in range(8, blocks, 8):
        r = [r[i] + values[start + i] for i in range(8)]
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for i in range(blocks, n):
        total = total + values[i]
    return total


class MotionTrackingDeviceEnv(DeviceEnvBase):
    """The device-resident G1 motion tracking env (``DeviceEnvBase``'s contract)."""

    name = "MotionTrackingDeviceEnv"
    action_class = "MotionJointPositionAction"

    def _bind_task(self, env: Any) -> None:
        self._refuse_others(env)
        names = env.command_manager.active_terms
        command = env.command_manager.get_term(names[0])
        dev, n = self.device, self.num_envs
        motion = command.motion
        self._clip = {key: _tensor(getattr(motion, key), dev) for key in (
            "joint_pos", "joint_vel", "body_pos_w", "body_quat_w", "body_lin_vel_w", "body_ang_vel_w")}
        self._clip_offsets = _tensor(motion.clip_offsets, dev)
        self._clip_end_frames = _tensor(motion.clip_end_frames, dev)
        self._num_frames = int(motion.num_frames)
        sampler = command.sampler
        self._mode = str(sampler.mode)
        self._bin_count = int(sampler.bin_count)
        self._adaptive = (float(sampler.adaptive_alpha), float(sampler.adaptive_uniform_ratio))
        self._bin_failed = _tensor(sampler.bin_failed_count, dev)
        self._pose_range = np.array(command._pose_range)  # noqa: SLF001
        self._velocity_range = np.array(command._velocity_range)  # noqa: SLF001
        self._joint_position_range = tuple(command._joint_position_range)  # noqa: SLF001
        self._joint_default_position_range = tuple(command._joint_default_position_range)  # noqa: SLF001
        self._resampling_time_range = tuple(command._resampling_time_range)  # noqa: SLF001
        self._env_origins = _tensor(env.scene.env_origins, dev)
        entity = env.scene["robot"]
        reset_state = env._reset_state  # noqa: SLF001
        self._default_qpos = _tensor(reset_state._default_qpos, dev)  # noqa: SLF001
        self._default_qvel = _tensor(reset_state._default_qvel, dev)  # noqa: SLF001
        self._root_qvel_cols = _tensor(entity._reset_root_layout.qvel_indices, dev)  # noqa: SLF001
        self._bias_cols = _tensor(env.action_manager.get_term("joint_pos")._target_ids, dev)  # noqa: SLF001

        s = self.state
        s.root_body = str(env.cfg.scene.entities["robot"].root_body_name)
        s.motion = MotionReference.empty(n, int(motion.num_joints), command.cfg.body_names,
                                         command.cfg.anchor_body_name, dev)
        s.command = torch.zeros((n, 2 * int(motion.num_joints)), dtype=torch.float32, device=dev)
        s.soft_joint_pos_limits = _tensor(entity.data.soft_joint_pos_limits, dev)
        self._bind_tracked_sensors(list(command.cfg.body_names))

    def _refuse_others(self, env: Any) -> None:
        """One line for each part of the config without a device form here."""
        curriculum = getattr(env, "curriculum_manager", None)
        if curriculum is not None and getattr(curriculum, "_term_cfgs", []):
            names = list(curriculum._term_names)  # noqa: SLF001
            raise ValueError(f"the device env has no device form of curriculum terms {names}; "
                             "use training.collector=host for this task")
        modes = env.event_manager._mode_term_names  # noqa: SLF001
        events = [f"{mode}/{name}" for mode, names in modes.items() for name in names]
        if events:
            raise ValueError(f"the device env has no device form of event terms {events}; "
                             "use training.collector=host for this task")
        names = env.command_manager.active_terms
        kinds = {name: type(env.command_manager.get_term(name)).__name__ for name in names}
        if list(kinds.values()) != ["MotionCommand"]:
            raise ValueError(f"the device env supports one MotionCommand term, got {kinds}")
        command = env.command_manager.get_term(names[0])
        params = command.cfg.params
        if params.sampling_mode not in _SAMPLING_MODES:
            raise ValueError(f"the device env has no device form of motion sampling_mode {params.sampling_mode!r}")
        if params.sampling_mode == "adaptive" and params.adaptive_kernel_size != 1:
            raise ValueError("the device env has no device form of adaptive_kernel_size "
                             f"{params.adaptive_kernel_size} (the smoothing kernel)")
        if not params.truncate_on_clip_end:
            raise ValueError("the device env has no device form of truncate_on_clip_end=false (resampling at the "
                             "clip's end)")
        if command.cfg.resampling_time_range[0] <= float(env.cfg.max_episode_seconds):
            raise ValueError(f"the device env has no device form of motion resampling within an episode "
                             f"(resampling_time_range {tuple(command.cfg.resampling_time_range)})")
        action = env.action_manager.get_term("joint_pos")
        if action.cfg.simulate_action_latency:
            raise ValueError("the device env has no device form of simulate_action_latency")
        if np.any(np.asarray(env.scene["robot"].data.encoder_bias) != 0.0):
            raise ValueError("the device env has no device form of an encoder bias")

    # --- the step's parts ---------------------------------------------------------------------------------

    def _joint_targets(self) -> torch.Tensor:
        """``MotionJointPositionAction.apply_actions``: the joint-position target plus the joint default bias."""
        return super()._joint_targets() + self.state.motion.joint_default_bias[:, self._bias_cols]

    def _after_substeps(self) -> None:
        """The tracked bodies' sensors from the final state, and the robot's bodies as the step's terms read them."""
        self._refresh_tracked_sensors()
        read_robot_bodies(self.state)

    def _gather_reference(self) -> None:
        """Each row's reference at its frame (``MotionCommand._refresh_motion``): the clip's arrays, the env origins
        added to the body positions, the command (the frame's joint positions then velocities)."""
        m, frames = self.state.motion, self.state.motion.time_steps.long()
        m.joint_pos.copy_(self._clip["joint_pos"][frames])
        m.joint_vel.copy_(self._clip["joint_vel"][frames])
        m.body_pos_local_w.copy_(self._clip["body_pos_w"][frames])
        m.body_quat_w.copy_(self._clip["body_quat_w"][frames])
        m.body_lin_vel_w.copy_(self._clip["body_lin_vel_w"][frames])
        m.body_ang_vel_w.copy_(self._clip["body_ang_vel_w"][frames])
        torch.add(m.body_pos_local_w, self._env_origins[:, None, :], out=m.body_pos_w)
        self.state.command.copy_(torch.cat([m.joint_pos, m.joint_vel], dim=1))

    def _draw_command(self, rows: torch.Tensor) -> None:
        """The motion command draws nothing in a step (its draws are a reset's)."""
        return None

    def _advance_command(self, done: torch.Tensor, drawn: Any = None) -> None:
        """``MotionCommand._update_command`` on the step's path: the failure statistics (adaptive sampling), the
        rows that do not reset one frame on, the reference at the new frames."""
        m = self.state.motion
        if self._mode == "adaptive":
            self._update_failure_stats()
        m.time_steps.add_((~done).to(torch.int32))
        self._gather_reference()

    def _update_failure_stats(self) -> None:
        """``MotionSampler.update_failure_stats`` with the step's terminations (time-outs apart), float32: each
        bin's terminations this step, into the EMA where any row terminated."""
        alpha, _ = self._adaptive
        frames = self.state.motion.time_steps
        bins = torch.clamp(torch.div(frames * self._bin_count, max(self._num_frames, 1), rounding_mode="floor"),
                           0, self._bin_count - 1)
        failed = torch.zeros(self._bin_count, dtype=torch.float32, device=self.device)
        failed.index_add_(0, bins.long(), self.terminated.to(torch.float32))
        ema = alpha * failed + (1 - alpha) * self._bin_failed
        self._bin_failed.copy_(torch.where(self.terminated.any(), ema, self._bin_failed))

    def _observe(self, rows: torch.Tensor, noise: list[torch.Tensor | None] | None = None) -> None:
        """The relative state first (``MotionCommand.post_compute``), then the observations."""
        refresh_relative_state(self.state)
        super()._observe(rows, noise)

    # --- a reset ------------------------------------------------------------------------------------------

    def _draw_reset(self, rows: torch.Tensor) -> _MotionResetDraw:
        d, joints = self.draws, self.state.motion.joint_pos.shape[1]
        bias = d.uniform(*self._joint_default_position_range, rows, joints)
        time_left = d.uniform(*self._resampling_time_range, rows)
        bin_draw = offset = frame = None
        if self._mode == "adaptive":  # ``Generator.choice``'s uniform, then the offset within the bin
            bin_draw, offset = d.uniform(0.0, 1.0, rows), d.uniform(0.0, 1.0, rows)
        elif self._mode == "uniform":
            frame = d.integers(self._num_frames, rows)
        pose = d.uniform(self._pose_range[:, 0], self._pose_range[:, 1], rows, 6)
        velocity = d.uniform(self._velocity_range[:, 0], self._velocity_range[:, 1], rows, 6)
        joint_noise = d.uniform(*self._joint_position_range, rows, joints)
        return _MotionResetDraw(bias, time_left, bin_draw, offset, frame, pose, velocity, joint_noise)

    def _start_frames(self, drawn: _MotionResetDraw) -> torch.Tensor:
        """``MotionSampler.sample_frames``: the start frame of every row from the reset's draws."""
        if drawn.frame is not None:
            return drawn.frame
        if drawn.bin_draw is None:  # ``start``
            return torch.zeros(self.num_envs, dtype=torch.int32, device=self.device)
        _, ratio = self._adaptive
        probs = self._bin_failed + ratio / float(self._bin_count)
        probs = probs / numpy_sum_f32(probs)
        cdf = torch.cumsum(probs.double(), dim=0)
        cdf = cdf / cdf[-1]
        bins = torch.searchsorted(cdf, drawn.bin_draw.contiguous(), right=True)
        return ((bins.double() + drawn.offset) / self._bin_count * (self._num_frames - 1)).to(torch.int32)

    def _reset_task_rows(self, rows: torch.Tensor, drawn: _MotionResetDraw, *, update_curriculum: bool) -> None:
        """The joint default bias, the start frames with their clips' ends, the reference there, and the reference
        frame's root and joint state with their noise written to the rows (MuJoCo Warp's reset of the rows
        first)."""
        del update_curriculum
        m, sim, r2 = self.state.motion, self.sim, rows[:, None]
        m.joint_default_bias.copy_(torch.where(r2, drawn.bias.to(torch.float32), m.joint_default_bias))
        frames = self._start_frames(drawn)
        m.time_steps.copy_(torch.where(rows, frames, m.time_steps))
        clip = torch.searchsorted(self._clip_offsets, m.time_steps, right=True) - 1
        m.clip_end_frames.copy_(self._clip_end_frames[clip])
        self._gather_reference()
        qpos, qvel = self._reference_state(drawn)
        sim.reset_rows(rows)
        sim.qpos.copy_(torch.where(r2, qpos, sim.qpos))
        sim.qvel.copy_(torch.where(r2, qvel, sim.qvel))

    def _reference_state(self, drawn: _MotionResetDraw) -> tuple[torch.Tensor, torch.Tensor]:
        """qpos/qvel of ``MotionCommand._resample_command`` for every row: the root of the reference (its first
        body) moved by the pose noise, its velocity plus the velocity noise (float64, as NumPy promotes), the
        joints with their noise inside the soft limits; staged as UniLab's reset transaction stages them."""
        m, s = self.state.motion, self.state
        pose, velocity = drawn.pose, drawn.velocity
        position = ((m.body_pos_local_w[:, 0] + self._env_origins).double() + pose[:, 0:3]).to(torch.float32)
        quat = quat_mul(quat_from_euler_xyz(pose[:, 3], pose[:, 4], pose[:, 5]), m.body_quat_w[:, 0].double())
        linear = m.body_lin_vel_w[:, 0].double() + velocity[:, 0:3]
        angular = m.body_ang_vel_w[:, 0].double() + velocity[:, 3:6]
        limits = s.soft_joint_pos_limits
        joint_pos = (m.joint_pos.double() + drawn.joint_noise).to(torch.float32)
        joint_pos = torch.clamp(joint_pos, limits[:, 0], limits[:, 1])
        n = self.num_envs
        qpos = self._default_qpos.expand(n, -1).clone()
        qvel = self._default_qvel.expand(n, -1).clone()
        qpos[:, s.joint_qpos_cols] = joint_pos.to(qpos.dtype)
        qvel[:, s.joint_qvel_cols] = m.joint_vel.to(qvel.dtype)
        qpos[:, s.root_qpos_cols] = torch.cat([position.double(), quat], dim=1).to(qpos.dtype)
        staged_quat = qpos[:, s.root_qpos_cols[3:7]].double()
        qvel[:, self._root_qvel_cols] = torch.cat([linear, quat_apply_inverse(staged_quat, angular)], 1).to(qvel.dtype)
        return qpos.to(self.sim.qpos.dtype), qvel.to(self.sim.qvel.dtype)
