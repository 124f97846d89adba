"""Go2 Joystick Flat on MuJoCo Warp with the env's whole step on the device: ``DeviceEnvBase`` with Go2's own parts.

Go2's parts, each read from the materialized UniLab env (``task=go2_joystick_flat/mjwarp``) and drawn in UniLab's
order through the env's draw source:

- the command: ``UniformVelocityCommand`` (resampling time, ``lin_vel_x``, ``lin_vel_y``, ``ang_vel_z``, then the
  standing, world-frame and forward flags; forward envs ``max(|x|, 0.3)``; standing envs zero), no heading and no
  world-frame commands (refused);
- the quadruped gait phase: UniLab's ``_GaitTerm`` clock, one phase for every gait term (observation and reward),
  ``fmod(phase + float32(step_dt * frequency), 1)`` each step, never reset; the terms must agree on the frequency
  and have no command gate (refused otherwise);
- the reset events, in the config's order: ``reset_scene_to_default``, ``reset_root_state_uniform``, ``pd_gains``
  (``abs`` or ``scale``, uniform), ``randomize_rigid_body_mass`` (``add``/``scale``/``abs``, uniform, ``min_mass``),
  ``randomize_rigid_body_com`` and ``randomize_physics_scene_gravity`` (uniform), written into MuJoCo Warp's
  per-world model rows; after mass and centre of mass the reset recomputes the model constants MuJoCo Warp's
  ``set_const`` derives from them, bitwise ``set_const``'s rows, where the backend's reset runs ``set_const`` (after
  the model rows, before the gains): ``flashsac_runtime.mjwarp.mass_constants.MassConstants``. It allocates nothing
  (``set_const`` allocates, which CUDA refuses inside the reset's conditional node) and works on a scratch ``Data``
  of its own: the env's ``Data`` gets no ``qpos0`` pass and no restore pass, and the next step's forward computes
  every derived array from qpos/qvel before reading it;
- the interval push ``push_by_setting_velocity`` on the global clock: the clock counts down by ``step_dt`` after
  the rewards, and when it runs out the interval is drawn again and every row's root linear velocity gets a
  world-frame kick, followed by the backend's forward: its position and velocity stages for every row
  (``MjwarpState.forward_rows``), the sensors a term reads before the next step's physics computes the rest again
  (the solver of a full forward allocates, which CUDA refuses inside the push's conditional node);
- the root body's tracked-body sensors (``track_*_w_<root>``), computed again from the final qpos/qvel after the
  last substep, the other sensors kept from the substep, as the backend refreshes them before a term reads them.

Any other event, command, curriculum or gait form is refused in one line naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from flashsac_runtime.envs.base import DeviceEnvBase, _CommandDraw, _tensor

_SE3_KEYS = ("x", "y", "z", "roll", "pitch", "yaw")
_XYZ = ("x", "y", "z")
#: The reset events with a device form, each at most once, in any order the config gives.
_RESET_EVENTS = frozenset(("reset_scene_to_default", "reset_root_state_uniform", "pd_gains",
                           "randomize_rigid_body_mass", "randomize_rigid_body_com",
                           "randomize_physics_scene_gravity"))


@dataclass(frozen=True)
class _PushDraw:
    """The interval push's draws: the next interval (row 0) and each row's world-frame linear velocity kick."""
    interval: torch.Tensor
    kick: torch.Tensor


@dataclass(frozen=True)
class _Go2ResetDraw:
    """A reset's draws for every row: root qpos/qvel, kp, kd, mass, CoM offset, gravity, the command."""
    qpos: torch.Tensor
    qvel: torch.Tensor
    kp: torch.Tensor | None
    kd: torch.Tensor | None
    mass: torch.Tensor | None
    com: torch.Tensor | None
    gravity: torch.Tensor | None
    command: _CommandDraw


def _ranges(value: dict | None, keys: tuple[str, ...]) -> np.ndarray:
    return np.asarray([(value or {}).get(k, (0.0, 0.0)) for k in keys], dtype=np.float64)


class Go2JoystickDeviceEnv(DeviceEnvBase):
    """The device-resident Go2 Joystick Flat env (``DeviceEnvBase``'s contract)."""

    name = "Go2JoystickDeviceEnv"

    def _bind_task(self, env: Any) -> None:
        if getattr(env, "curriculum_manager", None) is not None and getattr(env.curriculum_manager, "_term_cfgs", []):
            names = list(env.curriculum_manager._term_names)  # noqa: SLF001
            raise ValueError(f"the device env has no device form of curriculum terms {names}; "
                             "use training.collector=host for this task")
        entity = env.scene["robot"]
        self._entity = entity
        self.state.root_body = str(env.cfg.scene.entities["robot"].root_body_name)
        self._bind_command(env)
        self._bind_gait(env)
        self._bind_events(env)
        self._bind_tracked_sensors([self.state.root_body])

    # --- binding (cold path) ------------------------------------------------------------------------------

    def _bind_command(self, env: Any) -> None:
        names = env.command_manager.active_terms
        term = env.command_manager.get_term(names[0]) if len(names) == 1 else None
        if term is None or type(term).__name__ != "UniformVelocityCommand":
            kinds = [type(env.command_manager.get_term(n)).__name__ for n in names]
            raise ValueError(f"the device env supports one UniformVelocityCommand term, got {dict(zip(names, kinds))}")
        cfg = term.cfg
        if cfg.heading_command or cfg.rel_world_envs > 0.0 or cfg.init_velocity_prob > 0.0:
            raise ValueError("the device env has no heading, world-frame or initial-velocity commands "
                             f"(command {names[0]!r})")
        self._command_cfg = cfg

    def _bind_gait(self, env: Any) -> None:
        from unilab.tasks.locomotion.common.manager_terms import _GaitTerm

        terms = [cfg.func for group in env.observation_manager._group_obs_term_cfgs.values() for cfg in group  # noqa: SLF001
                 if isinstance(cfg.func, _GaitTerm)]
        terms += [cfg.func for cfg in env.reward_manager._term_cfgs if isinstance(cfg.func, _GaitTerm)]  # noqa: SLF001
        self._gait_increment = None
        if not terms:
            return
        frequencies = {float(t._frequency) for t in terms}  # noqa: SLF001
        gates = {t._command_name for t in terms}  # noqa: SLF001
        if len(frequencies) != 1 or gates != {None}:
            raise ValueError(f"the device env's gait terms share one ungated phase; got frequencies {sorted(frequencies)} "
                             f"and command gates {sorted(map(str, gates))}")
        step_dt = float(terms[0]._step_dt)  # noqa: SLF001
        self._gait_increment = float(np.asarray(step_dt * frequencies.pop(), dtype=np.float32))
        self.state.quadruped_phase = _tensor(terms[0]._phase_value, self.device).to(torch.float32)  # noqa: SLF001

    def _bind_events(self, env: Any) -> None:
        manager = env.event_manager
        modes = dict(manager._mode_term_names)  # noqa: SLF001
        cfgs = {mode: dict(zip(modes[mode], manager._mode_term_cfgs[mode], strict=True)) for mode in modes}  # noqa: SLF001
        unknown = [f"{mode}/{name}" for mode, names in modes.items() for name in names
                   if not ((mode == "reset" and name in _RESET_EVENTS)
                           or (mode == "interval" and name == "push_by_setting_velocity"))]
        if unknown:
            raise ValueError(f"the device env has no device form of event terms {unknown}; "
                             "use training.collector=host for this task")
        reset = cfgs.get("reset", {})
        self._reset_order = list(modes.get("reset", []))
        for name, cfg in reset.items():
            if getattr(cfg, "min_step_count_between_reset", 0):
                raise ValueError(f"the device env has no min_step_count_between_reset (event {name!r})")
        dev = self.device
        model = self.sim._model  # noqa: SLF001 - the env's own MuJoCo Warp model
        import mujoco
        import warp as wp

        cpu = env._backend._cpu_model  # noqa: SLF001
        root = reset.get("reset_root_state_uniform")
        if root is None or "reset_scene_to_default" not in reset:
            raise ValueError("the device env needs the reset events reset_scene_to_default and reset_root_state_uniform")
        self._pose_range = _ranges(root.params["pose_range"], _SE3_KEYS)
        self._velocity_range = _ranges(root.params.get("velocity_range"), _SE3_KEYS)
        entity = self._entity
        self._default_root_state = _tensor(entity.data.default_root_state, dev)
        self._env_origins = _tensor(env.scene.env_origins, dev)
        reset_state = env._reset_state  # noqa: SLF001
        self._default_qpos = _tensor(reset_state._default_qpos, dev)  # noqa: SLF001
        self._default_qvel = _tensor(reset_state._default_qvel, dev)  # noqa: SLF001
        self._root_qvel_cols = _tensor(entity._reset_root_layout.qvel_indices, dev)  # noqa: SLF001

        self._gains = None
        if "pd_gains" in reset:
            gains = reset["pd_gains"].func
            if gains._distribution != "uniform":  # noqa: SLF001
                raise ValueError("the device env supports pd_gains with distribution=uniform")
            self._gains = gains
            self._gain_cols = torch.as_tensor(entity._actuator_ids[gains._actuator_ids], device=dev)  # noqa: SLF001
            self._default_kp = _tensor(gains._default_kp, dev)  # noqa: SLF001
            self._default_kd = _tensor(gains._default_kd, dev)  # noqa: SLF001

        def body_ids(cfg: Any) -> torch.Tensor:
            names = cfg.params["asset_cfg"].body_names
            names = [names] if isinstance(names, str) else list(names)
            ids = [mujoco.mj_name2id(cpu, mujoco.mjtObj.mjOBJ_BODY, n) for n in names]
            if min(ids) < 0:
                raise ValueError(f"the device env finds no body among {names}")
            return torch.as_tensor(ids, device=dev)

        self._mass = self._com = self._gravity = None
        if "randomize_rigid_body_mass" in reset:
            term = reset["randomize_rigid_body_mass"].func
            if term._distribution != "uniform":  # noqa: SLF001
                raise ValueError("the device env supports randomize_rigid_body_mass with distribution=uniform")
            self._mass = term
            self._mass_ids = body_ids(reset["randomize_rigid_body_mass"])
            self._default_mass = _tensor(term._default_mass, dev).double()  # noqa: SLF001
            self.body_mass = wp.to_torch(model.body_mass)
        if "randomize_rigid_body_com" in reset:
            cfg = reset["randomize_rigid_body_com"]
            self._com = _ranges(cfg.params["com_range"], _XYZ)
            self._com_ids = body_ids(cfg)
            self._default_ipos = _tensor(cfg.func._default_ipos, dev).double()  # noqa: SLF001
            self.body_ipos = wp.to_torch(model.body_ipos)
        if "randomize_physics_scene_gravity" in reset:
            term = reset["randomize_physics_scene_gravity"].func
            if term._distribution != "uniform":  # noqa: SLF001
                raise ValueError("the device env supports randomize_physics_scene_gravity with distribution=uniform")
            self._gravity = term
            self._default_gravity = _tensor(term._default_gravity, dev).double()  # noqa: SLF001
            self.gravity = wp.to_torch(model.opt.gravity)
        for name, view in (("body_mass", getattr(self, "body_mass", None)), ("body_ipos", getattr(self, "body_ipos", None)),
                           ("gravity", getattr(self, "gravity", None))):
            if view is not None and view.shape[0] != self.num_envs:
                raise ValueError(f"the mjwarp model's {name} is not per-world; its randomization cannot be applied")
        self._mass_constants = None
        if self._mass is not None or self._com is not None:
            from flashsac_runtime.mjwarp.mass_constants import MassConstants

            self._mass_constants = MassConstants(cpu, model, self.num_envs)

        self._push = None
        interval = cfgs.get("interval", {})
        if "push_by_setting_velocity" in interval:
            cfg = interval["push_by_setting_velocity"]
            ranges = _ranges(cfg.params["velocity_range"], _SE3_KEYS)
            if not cfg.is_global_time or np.any(ranges[3:] != 0.0):
                raise ValueError("the device env supports push_by_setting_velocity on the global clock, linear only")
            self._push = (ranges[:3], tuple(cfg.interval_range_s))
            # The clock as UniLab's event manager drew it when it was built (its own draw of env.rng): the device
            # env draws its first interval the same way, ahead of its first reset.
            one = torch.ones(1, dtype=torch.bool, device=dev)
            self._push_time_left = self.draws.uniform(*self._push[1], one)[:1].clone()
            self._lin_qvel_cols = self._root_qvel_cols[0:3]

    def _after_substeps(self) -> None:
        """The root's tracked-body sensors from the final qpos/qvel (the backend's refresh); other sensors kept."""
        self._refresh_tracked_sensors()

    def _advance_phase(self) -> None:
        phase = self.state.quadruped_phase
        if self._gait_increment is not None and phase is not None:
            torch.fmod(phase + self._gait_increment, 1.0, out=phase)

    def _push_fires(self) -> torch.Tensor:
        """Whether the push clock runs out at the next countdown (a (1,) bool on the device)."""
        return (self._push_time_left - self.step_dt) < 1e-6

    def _draw_events(self, rows: torch.Tensor) -> _PushDraw | None:
        if self._push is None:
            return None
        fires = self._push_fires()
        (linear, interval) = self._push
        interval_draw = self.draws.uniform(*interval, fires)[:1]
        kick = self.draws.uniform(linear[:, 0], linear[:, 1], rows & fires, 3)
        return _PushDraw(interval_draw.to(torch.float64), kick)

    def _apply_events(self, drawn: _PushDraw) -> None:
        self._push_time_left.sub_(self.step_dt)
        fires = self._push_time_left < 1e-6
        self._push_time_left.copy_(torch.where(fires, drawn.interval, self._push_time_left))
        sim = self.sim
        kick = torch.where(fires[:, None] & self._all_rows[:, None], drawn.kick, 0.0).to(sim.qvel.dtype)
        sim.qvel[:, self._lin_qvel_cols] = sim.qvel[:, self._lin_qvel_cols] + kick

        def forward() -> None:
            sim.forward_rows(self._all_rows)

        sim.when_any(fires, forward)

    def _draw_reset(self, rows: torch.Tensor) -> _Go2ResetDraw:
        """The reset events' draws in the config's order, then the command's."""
        d = self.draws
        qpos = qvel = kp = kd = mass = com = gravity = None
        for name in self._reset_order:
            if name == "reset_root_state_uniform":
                qpos, qvel = self._reset_state(rows)
            elif name == "pd_gains":
                g = self._gains
                width = len(self._gain_cols)
                kp = d.uniform(*g._kp_range, rows, width)  # noqa: SLF001
                kd = d.uniform(*g._kd_range, rows, width)  # noqa: SLF001
                if g._operation == "scale":  # noqa: SLF001
                    kp, kd = kp * self._default_kp.double(), kd * self._default_kd.double()
                kp, kd = kp.float(), kd.float()
            elif name == "randomize_rigid_body_mass":
                t = self._mass
                params = t._distribution_params  # noqa: SLF001
                sample = d.uniform(float(params[0]), float(params[1]), rows, len(self._mass_ids))
                op = t._operation  # noqa: SLF001
                value = (self._default_mass + sample if op == "add" else self._default_mass * sample if op == "scale"
                         else sample)
                mass = torch.clamp_min(value, t._min_mass).float()  # noqa: SLF001
            elif name == "randomize_rigid_body_com":
                offsets = d.uniform(self._com[:, 0], self._com[:, 1], rows, 3)
                com = (self._default_ipos[None] + offsets[:, None, :]).float()
            elif name == "randomize_physics_scene_gravity":
                t = self._gravity
                params = t._distribution_params  # noqa: SLF001
                sample = d.uniform(np.array(params[0]), np.array(params[1]), rows, 3)  # UniLab's are read-only
                op = t._operation  # noqa: SLF001
                value = (self._default_gravity + sample if op == "add" else self._default_gravity * sample
                         if op == "scale" else sample)
                gravity = value.float()
        command = self._draw_command(rows)
        return _Go2ResetDraw(qpos, qvel, kp, kd, mass, com, gravity, command)

    def _reset_task_rows(self, rows: torch.Tensor, drawn: _Go2ResetDraw, *, update_curriculum: bool) -> None:
        """The model rows (mass, CoM, gravity, then the constants that follow mass and CoM; gains), MuJoCo Warp's reset
        of the rows, their root state, the command."""
        del update_curriculum
        sim = self.sim
        r2 = rows[:, None]
        if drawn.mass is not None:
            cols = self.body_mass[:, self._mass_ids]
            self.body_mass[:, self._mass_ids] = torch.where(r2, drawn.mass, cols)
        if drawn.com is not None:
            cols = self.body_ipos[:, self._com_ids]
            self.body_ipos[:, self._com_ids] = torch.where(rows[:, None, None], drawn.com, cols)
        if drawn.gravity is not None:
            self.gravity.copy_(torch.where(r2, drawn.gravity, self.gravity))
        if self._mass_constants is not None:  # set_const's rows, before the gains as in the backend's reset
            self._mass_constants.recompute()
        if drawn.kp is not None:
            self._write_pd_gains(r2, drawn.kp, drawn.kd)
        self._resample_command(rows, drawn.command)
        sim.reset_rows(rows)
        sim.qpos.copy_(torch.where(r2, drawn.qpos, sim.qpos))
        sim.qvel.copy_(torch.where(r2, drawn.qvel, sim.qvel))
