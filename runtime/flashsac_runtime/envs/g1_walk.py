"""G1 Walk Flat on MuJoCo Warp with the env's whole step on the device: physics, terms, resets, in torch.

``G1WalkDeviceEnv`` is ``DeviceEnvBase`` (``base.py``: the physics, the draws, the terms through their torch twins,
the episode bookkeeping, the outputs) with G1 Walk Flat's own parts: its velocity command (``G1VelocityCommand``:
forward envs, a planar dead zone, standing envs) with its resampling, the gait phase, the penalty curriculum, and the
autoreset of the done rows by mask (``reset_scene_to_default``, ``reset_root_state_uniform``, ``pd_gains``, command
and gait resampling). Every parameter is read from the materialized UniLab env; a task whose terms have no torch
twin is refused when the env is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from flashsac_runtime.envs.base import (  # noqa: F401 - _StepDraws: the draws' record, read by the checks
    DeviceEnvBase,
    _CommandDraw,
    _RewardTerm,
    _StepDraws,
    _tensor,
)

_SE3_KEYS = ("x", "y", "z", "roll", "pitch", "yaw")
_RESET_EVENTS = ("reset_scene_to_default", "reset_root_state_uniform", "pd_gains")


@dataclass(frozen=True)
class _ResetDraw:
    """A reset's draws, worked out for every row: root qpos/qvel, kp, kd, the command, the gait phase."""
    qpos: torch.Tensor
    qvel: torch.Tensor
    kp: torch.Tensor
    kd: torch.Tensor
    command: _CommandDraw
    gait_phase: torch.Tensor | None


class G1WalkDeviceEnv(DeviceEnvBase):
    """The device-resident G1 Walk Flat env: uni_rl's ``DeviceVecEnv`` contract (its ``DeviceStep`` outputs, buffers
    owned by the env and valid until the next step or reset)."""

    name = "G1WalkDeviceEnv"

    def _bind_task(self, env: Any) -> None:
        self._bind_command(env)
        self._bind_gait(env)
        self._bind_curriculum(env)
        self._bind_reset_events(env)

    def _bind_command(self, env: Any) -> None:
        names = env.command_manager.active_terms
        if len(names) != 1 or type(env.command_manager.get_term(names[0])).__name__ != "G1VelocityCommand":
            raise ValueError(f"the device env supports one G1VelocityCommand term, got {names}")
        cfg = env.command_manager.get_term(names[0]).cfg
        if cfg.heading_command or cfg.rel_world_envs > 0.0:
            raise ValueError("the device env has no heading or world-frame velocity commands")
        self._command_cfg = cfg

    def _bind_gait(self, env: Any) -> None:
        from unilab.tasks.locomotion.g1.manager_terms import G1GaitPhase, _gait_context

        manager = env.observation_manager
        gait_terms = [cfg.func for group in manager._group_obs_term_cfgs.values() for cfg in group  # noqa: SLF001
                      if isinstance(cfg.func, G1GaitPhase)]
        context = _gait_context(env, "gait_phase", gait_terms[0]._context.frequency, gait_terms[0]._context.init_mode)  # noqa: SLF001
        self._gait_delta = float(context.delta)
        self._gait_independent = context.init_mode == "independent"
        # Each G1GaitPhase observation term resamples the shared phase on reset; the last draw stands.
        self._gait_resamples = len(gait_terms)

    def _bind_curriculum(self, env: Any) -> None:
        from unilab.tasks.locomotion.g1.manager_terms import G1PenaltyCurriculum

        manager = env.curriculum_manager
        terms = [cfg.func for cfg in manager._term_cfgs]  # noqa: SLF001
        if len(terms) != 1 or not isinstance(terms[0], G1PenaltyCurriculum):
            raise ValueError("the device env supports the G1 penalty curriculum alone")
        c = terms[0]
        self._curriculum = c
        self._scale = torch.tensor(c._current_scale, dtype=torch.float64, device=self.device)  # noqa: SLF001
        self._average_length = torch.tensor(c._tracker.average_length, dtype=torch.float64, device=self.device)  # noqa: SLF001
        self._rewards = [
            _RewardTerm(r.name, r.twin, r.params, c._original_weights[r.name], True)  # noqa: SLF001
            if r.name in c._original_weights else r for r in self._rewards  # noqa: SLF001
        ]

    def _bind_reset_events(self, env: Any) -> None:
        manager = env.event_manager
        names = list(manager._mode_term_names.get("reset", []))  # noqa: SLF001
        if tuple(names) != _RESET_EVENTS or set(manager._mode_term_names) - {"reset"}:  # noqa: SLF001
            raise ValueError(f"the device env supports the reset events {_RESET_EVENTS}, got {manager._mode_term_names}")  # noqa: SLF001
        cfgs = dict(zip(names, manager._mode_term_cfgs["reset"], strict=True))  # noqa: SLF001
        root = cfgs["reset_root_state_uniform"].params
        self._pose_range = np.asarray([root["pose_range"].get(k, (0.0, 0.0)) for k in _SE3_KEYS], dtype=np.float64)
        velocity = root.get("velocity_range") or {}
        self._velocity_range = np.asarray([velocity.get(k, (0.0, 0.0)) for k in _SE3_KEYS], dtype=np.float64)
        entity = env.scene["robot"]
        self._default_root_state = _tensor(entity.data.default_root_state, self.device)
        self._env_origins = _tensor(env.scene.env_origins, self.device)
        reset_state = env._reset_state  # noqa: SLF001 - the transaction the NumPy reset writes into
        self._default_qpos = _tensor(reset_state._default_qpos, self.device)  # noqa: SLF001
        self._default_qvel = _tensor(reset_state._default_qvel, self.device)  # noqa: SLF001
        layout = entity._reset_root_layout  # noqa: SLF001
        self._root_qvel_cols = _tensor(layout.qvel_indices, self.device)
        gains = cfgs["pd_gains"].func
        if gains._operation != "scale" or gains._distribution != "uniform":  # noqa: SLF001
            raise ValueError("the device env supports pd_gains with operation=scale, distribution=uniform")
        self._kp_range, self._kd_range = gains._kp_range, gains._kd_range  # noqa: SLF001
        self._gain_cols = torch.as_tensor(entity._actuator_ids[gains._actuator_ids], device=self.device)  # noqa: SLF001
        self._default_kp = _tensor(gains._default_kp, self.device)  # noqa: SLF001
        self._default_kd = _tensor(gains._default_kd, self.device)  # noqa: SLF001

    # --- the task's parts of the step ---------------------------------------------------------------------

    def _advance_phase(self) -> None:
        s = self.state
        torch.fmod(s.gait_phase + self._gait_delta, 2.0 * math.pi, out=s.gait_phase)

    def _draw_command(self, rows: torch.Tensor) -> _CommandDraw:
        """``G1VelocityCommand._resample``: the uniform velocity command's draws (the base's), then the planar dead
        zone, which draws nothing."""
        drawn = super()._draw_command(rows)
        new = drawn.command
        planar = new[:, :2]
        dead_zone = self._command_cfg.planar_dead_zone
        moving = torch.sqrt(planar[:, 0] * planar[:, 0] + planar[:, 1] * planar[:, 1]) > dead_zone
        new = torch.cat([planar * moving[:, None].to(planar.dtype), new[:, 2:]], dim=1)
        return _CommandDraw(drawn.time_left, new, drawn.standing)


    def _update_curriculum(self, rows: torch.Tensor) -> None:
        """G1PenaltyCurriculum with its EpisodeLengthTracker, on device scalars (applied from the next step)."""
        c = self._curriculum
        count = rows.sum().to(torch.float64)
        lengths = torch.where(rows, self.state.episode_length, 0).to(torch.float64)
        mean = lengths.sum() / torch.clamp_min(count, 1.0)
        weight = torch.clamp_max(count / c._tracker.window_size, 1.0)  # noqa: SLF001
        average = self._average_length * (1 - weight) + mean * weight
        scale = torch.where(average < c._level_down_threshold, self._scale * (1.0 - c._degree),  # noqa: SLF001
                            torch.where(average > c._level_up_threshold, self._scale * (1.0 + c._degree), self._scale))  # noqa: SLF001
        scale = torch.clamp(scale, c._min_scale, c._max_scale)  # noqa: SLF001
        any_done = count > 0
        self._average_length.copy_(torch.where(any_done, average, self._average_length))
        self._scale.copy_(torch.where(any_done, scale, self._scale))

    def _draw_reset(self, rows: torch.Tensor) -> _ResetDraw:
        """The reset events' draws for ``rows`` in UniLab's order (root state, kp, kd, command, gait phase) and what
        follows from them alone."""
        qpos, qvel = self._reset_state(rows)
        kp = (self.draws.uniform(*self._kp_range, rows, len(self._gain_cols)) * self._default_kp.double()).float()
        kd = (self.draws.uniform(*self._kd_range, rows, len(self._gain_cols)) * self._default_kd.double()).float()
        command = self._draw_command(rows)
        phase = None
        for _ in range(self._gait_resamples):  # each gait term resamples the shared phase; the last draw stands
            left = self.draws.uniform(0.0, 2.0 * math.pi, rows)
            right = self.draws.uniform(0.0, 2.0 * math.pi, rows) if self._gait_independent else left + math.pi
            phase = torch.stack([left, right], dim=1).to(torch.float32)
        return _ResetDraw(qpos, qvel, kp, kd, command, phase)

    def _reset_task_rows(self, rows: torch.Tensor, drawn: _ResetDraw, *, update_curriculum: bool) -> None:
        """G1's reset of the masked rows: curriculum, command, gait, physics state and gains."""
        if update_curriculum:
            self._update_curriculum(rows)
        self._resample_command(rows, drawn.command)
        s = self.state
        if drawn.gait_phase is not None:
            s.gait_phase.copy_(torch.where(rows[:, None], drawn.gait_phase, s.gait_phase))
        self.sim.reset_rows(rows)
        sim = self.sim
        sim.qpos.copy_(torch.where(rows[:, None], drawn.qpos, sim.qpos))
        sim.qvel.copy_(torch.where(rows[:, None], drawn.qvel, sim.qvel))
        self._write_pd_gains(rows[:, None], drawn.kp, drawn.kd)
