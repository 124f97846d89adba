"""The device env's task-independent part: the physics, the draws, the terms, the episode bookkeeping, the outputs.

``DeviceEnvBase`` wraps a UniLab ``ManagerBasedRlEnv`` built the usual way on the ``mjwarp`` backend (the same Hydra
task config, model, solver options, substeps and term parameters) and replaces its host-side NumPy step with torch
work on the MJWarp arrays (``MjwarpState``): the joint-position action, the physics substeps, terminations, rewards,
both observation groups with their noise (every term through its torch twin, ``terms.twin_of``), the episode
lengths and time-outs, the step's outputs (``DeviceStep``), the CUDA graph of the step and the draws taken a step
ahead. A task module adds what is the task's own (``G1WalkDeviceEnv``: its velocity command, gait phase, penalty
curriculum and reset events; ``Go2JoystickDeviceEnv``: its uniform velocity command, quadruped gait phase, reset
events with the model randomization, interval push; ``MotionTrackingDeviceEnv``: G1's motion command, its action
with the reset's joint bias) through the hooks below; a term or event without a device
form is refused in one line naming it when the env is built.

The step follows UniLab 1.3.2's order exactly (``NpEnv.step`` -> ``ManagerBasedRlEnv.update_state`` -> autoreset
-> ``ManagerBasedRlEnv.reset``), and makes the same random draws in the same order through a draw source
(``draws.py``): with ``NumpyDraws`` seeded like ``env.rng`` the device env reproduces the NumPy env's trajectory,
which is how the tests prove it is the same task. Training uses ``TorchDraws``: no host sync in a step. Draws are
taken apart from what they are applied to (``_draw_*`` then ``_resample_command``, ``_observe``, ``_reset_rows``),
so that with ``draws_ahead`` the draws of the next step can be taken beside this one (``_DrawBuffers``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flashsac_runtime.collector.device_env import DeviceStep

from flashsac_runtime.envs import terms as T
from flashsac_runtime.envs.draws import Draws
from flashsac_runtime.envs.mjwarp_state import MjwarpState
from flashsac_runtime.envs.rotation import quat_apply_inverse, quat_from_euler_xyz, quat_mul


@dataclass(frozen=True)
class _ObsTerm:
    name: str
    twin: T.Term
    params: dict[str, Any]
    scale: torch.Tensor | None
    noise: tuple[torch.Tensor, torch.Tensor] | None  # (n_max - n_min, n_min), float32, additive
    width: int  # the term's columns (UniLab's term dims)


@dataclass(frozen=True)
class _RewardTerm:
    name: str
    twin: T.Term
    params: dict[str, Any]
    weight: float
    curriculum_scaled: bool  # its weight is original * penalty scale


@dataclass(frozen=True)
class _CommandDraw:
    """A command resampling's draws, worked out for every row: new resampling times, commands, standing flags."""
    time_left: torch.Tensor
    command: torch.Tensor
    standing: torch.Tensor


@dataclass(frozen=True)
class _StepDraws:
    """Every draw of a step, taken ahead in the step's order: the time-out command resampling, the observation
    noise, the reset, the reset rows' observation noise; ``events``: the task's step events drawn before the
    command (Go2's interval push; None where a task has none)."""
    command: _CommandDraw | None  # None: the task's command draws nothing in a step
    noise: list[torch.Tensor | None]
    reset: Any
    reset_noise: list[torch.Tensor | None]
    events: Any = None


def _leaves(value: Any) -> list[torch.Tensor]:
    """The tensors of a draw record (dataclasses, lists, None), in field order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if value is None:
        return []
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [leaf for field in dataclasses.fields(value) for leaf in _leaves(getattr(value, field.name))]


def _rebuild(template: Any, leaves: Iterator[torch.Tensor]) -> Any:
    """``template`` with its tensors taken from ``leaves``, in ``_leaves`` order."""
    if isinstance(template, torch.Tensor):
        return next(leaves)
    if template is None:
        return None
    if isinstance(template, list):
        return [_rebuild(item, leaves) for item in template]
    return dataclasses.replace(template, **{field.name: _rebuild(getattr(template, field.name), leaves)
                                            for field in dataclasses.fields(template)})


class _DrawBuffers:
    """A step's draws taken one step ahead: ``current`` is read by the step, ``pending`` is written beside it with
    the next step's. Each is a ``_StepDraws`` of views into one byte buffer of its own, so that handing ``pending``
    over (``take_pending``) is one copy, and the addresses never change (the step's CUDA graph reads them)."""

    _ALIGN = 16

    def __init__(self, template: _StepDraws) -> None:
        leaves = _leaves(template)
        offsets, size = [], 0
        for leaf in leaves:
            size = -(-size // self._ALIGN) * self._ALIGN
            offsets.append(size)
            size += leaf.numel() * leaf.element_size()
        self._bytes = [torch.zeros(size, dtype=torch.uint8, device=leaves[0].device) for _ in range(2)]
        views = [[buffer[start:start + leaf.numel() * leaf.element_size()].view(leaf.dtype).view(leaf.shape)
                  for start, leaf in zip(offsets, leaves, strict=True)] for buffer in self._bytes]
        self.current: _StepDraws = _rebuild(template, iter(views[0]))
        self.pending: _StepDraws = _rebuild(template, iter(views[1]))

    @staticmethod
    def write(target: _StepDraws, drawn: _StepDraws) -> None:
        for view, value in zip(_leaves(target), _leaves(drawn), strict=True):
            view.copy_(value)

    def take_pending(self) -> None:
        self._bytes[0].copy_(self._bytes[1])


def _tensor(values: Any, device: torch.device) -> torch.Tensor:
    """A device copy of a UniLab array (its dtype kept; UniLab's arrays may be read-only views)."""
    return torch.as_tensor(np.array(values, copy=True), device=device)


class DeviceEnvBase:
    """A device-resident env: uni_rl's ``DeviceVecEnv`` contract (its ``DeviceStep`` outputs, buffers owned by the
    env and valid until the next step or reset). A task subclass binds its own parts in ``_bind_task`` and gives the
    hooks ``_draw_command``, ``_resample_command``, ``_advance_phase``, ``_draw_events``, ``_apply_events``,
    ``_draw_reset`` and ``_reset_task_rows``."""

    #: The name in the env's one-line messages.
    name = "DeviceEnv"
    #: The action term class the env's control reads (UniLab's joint-position action, or a task's form of it).
    action_class = "JointPositionAction"

    def __init__(self, host_env: Any, draws: Draws, *, graph: bool = True, own_stream: bool = True,
                 sensors_every_substep: bool = False, acceleration_sensors: bool = True, draws_ahead: bool = True,
                 reset_only_when_done: bool = False, step_split: bool = False) -> None:
        if draws_ahead and not getattr(draws, "graph_safe", False):  # UniLab's NumPy draws are sized by the rows
            raise ValueError("draws ahead of the physics need row-independent draws (TorchDraws)")
        self.host_env = host_env
        if host_env.state is None:
            # One host reset materializes UniLab's lazily bound reset transaction (default qpos/qvel, gains);
            # the device env then resets every row itself.
            host_env.init_state()
        self.sim = MjwarpState(host_env._backend, own_stream=own_stream,  # noqa: SLF001 - the env's own backend
                               sensors_every_substep=sensors_every_substep,
                               acceleration_sensors=acceleration_sensors)
        self.device = self.sim.device
        self.num_envs = int(host_env.num_envs)
        self.draws = draws
        dev = self.device
        if getattr(host_env, "_uses_pre_step_control", False):
            raise ValueError("the device env applies one control per env step; this task needs per-substep control")
        self.substeps = int(host_env.cfg.sim_substeps)
        self.step_dt = float(host_env.step_dt)
        self.max_episode_length = int(host_env.max_episode_length)

        entity = host_env.scene["robot"]
        data = entity.data
        root_q, root_v = int(host_env._backend._root_qpos_dim), int(host_env._backend._root_qvel_dim)  # noqa: SLF001
        joint_q = np.arange(host_env._backend._num_dof_pos)[data._joint_pos_index] + root_q  # noqa: SLF001
        joint_v = np.arange(host_env._backend._num_dof_vel)[data._joint_vel_index] + root_v  # noqa: SLF001
        n = self.num_envs

        action = host_env.action_manager.get_term("joint_pos")
        if action._clip is not None or type(action).__name__ != self.action_class:  # noqa: SLF001
            raise ValueError(f"the device env supports one unclipped {self.action_class} term")
        self._action_scale = float(action._scale)  # noqa: SLF001
        self._action_offset = _tensor(action._offset, dev)  # noqa: SLF001
        self._ctrl_cols = torch.as_tensor(
            entity._actuator_ids[entity._joint_to_actuator_local[action._target_ids]], device=dev)  # noqa: SLF001
        self.action_dim = int(action.action_dim)

        self.state = T.DeviceEnvState(
            sim=self.sim,
            joint_qpos_cols=torch.as_tensor(joint_q, device=dev),
            joint_qvel_cols=torch.as_tensor(joint_v, device=dev),
            root_qpos_cols=_tensor(entity._reset_root_layout.qpos_indices, dev),  # noqa: SLF001
            default_joint_pos=_tensor(data.default_joint_pos, dev),
            default_joint_vel=_tensor(data.default_joint_vel, dev),
            action=torch.zeros((n, self.action_dim), dtype=torch.float32, device=dev),
            prev_action=torch.zeros((n, self.action_dim), dtype=torch.float32, device=dev),
            command=torch.zeros((n, 3), dtype=torch.float32, device=dev),
            gait_phase=torch.zeros((n, 2), dtype=torch.float32, device=dev),
            episode_length=torch.zeros(n, dtype=torch.int64, device=dev),
            max_episode_length=self.max_episode_length,
        )
        self._bind_observations(host_env)
        self._bind_rewards(host_env)
        self._bind_terminations(host_env)
        self._bind_task(host_env)

        self.steps = torch.zeros(n, dtype=torch.int64, device=dev)
        self.time_left = torch.zeros(n, dtype=torch.float32, device=dev)  # the velocity command's resampling time
        self.is_standing = torch.zeros(n, dtype=torch.bool, device=dev)
        self.reward = torch.zeros(n, dtype=torch.float32, device=dev)
        self.terminated = torch.zeros(n, dtype=torch.bool, device=dev)
        self.truncated = torch.zeros(n, dtype=torch.bool, device=dev)
        self.policy_obs = torch.zeros((n, self.policy_obs_dim), dtype=torch.float32, device=dev)
        self.critic_obs = torch.zeros((n, self.critic_obs_dim), dtype=torch.float32, device=dev)
        self.final_policy_obs = torch.zeros_like(self.policy_obs)
        self.final_critic_obs = torch.zeros_like(self.critic_obs)
        self._all_rows = torch.ones(n, dtype=torch.bool, device=dev)
        self._done = torch.zeros(n, dtype=torch.bool, device=dev)
        self._action_in = torch.zeros((n, self.action_dim), dtype=torch.float32, device=dev)
        # The whole step as one CUDA graph (CUDA, graph-safe draws): captured by the first reset.
        self._graph: torch.cuda.CUDAGraph | None = None
        self.graph_status = ("pending" if graph and dev.type == "cuda" and getattr(draws, "graph_safe", False)
                             else "off")
        # Draws ahead: the next step's draws, taken beside each step on a stream of their own on CUDA (a CUDA graph
        # of their own once the step's is captured); the buffers are made by the first reset.
        self._draws_ahead = draws_ahead
        # With ``reset_only_when_done`` the reset of the done rows runs only on steps with one (``_step_body``); with
        # draws in the step it always runs, since its draws move the generator on every step.
        self._reset_only_when_done = reset_only_when_done and draws_ahead
        self._draw_stream = torch.cuda.Stream(dev) if draws_ahead and dev.type == "cuda" else None
        self._draw_graph: torch.cuda.CUDAGraph | None = None
        self._drawn: _DrawBuffers | None = None
        # ``step_split``: the step stamps its parts' boundaries on the device (``step_stamps``), for the collector's
        # time split of the step (physics, terms, reset).
        self.step_stamps: Any = None
        if step_split:
            from flashsac_runtime.envs.step_stamps import StepStamps

            self.step_stamps = StepStamps(dev)

    # --- binding the task config (cold path) --------------------------------------------------------------

    def _bind_observations(self, env: Any) -> None:
        manager = env.observation_manager
        groups = {}
        for role, group in (("policy", env.cfg.policy_observation_group), ("critic", env.cfg.critic_observation_group)):
            terms = []
            for name, cfg, dims in zip(manager._group_obs_term_names[group], manager._group_obs_term_cfgs[group],  # noqa: SLF001
                                       manager._group_obs_term_dim[group], strict=True):  # noqa: SLF001
                if cfg.clip is not None or cfg.history_length or cfg.delay_max_lag:
                    raise ValueError(f"the device env has no clip/history/delay for observation term {group}/{name}")
                noise = None
                if cfg.noise is not None:
                    if type(cfg.noise).__name__ != "UniformNoiseCfg" or cfg.noise.operation != "add":
                        raise ValueError(f"the device env supports additive uniform noise only ({group}/{name})")
                    lo = np.asarray(cfg.noise.n_min, dtype=np.float32)
                    hi = np.asarray(cfg.noise.n_max, dtype=np.float32)
                    noise = (torch.as_tensor(hi - lo, device=self.device), torch.as_tensor(lo, device=self.device))
                scale = None if cfg.scale is None else _tensor(cfg.scale, self.device)
                terms.append(_ObsTerm(name, T.twin_of("observation", name, cfg.func), dict(cfg.params), scale, noise,
                                      int(dims[0])))
            groups[role] = terms
        self._policy_terms, self._critic_terms = groups["policy"], groups["critic"]
        dims = env.obs_groups_spec
        self.policy_obs_dim, self.critic_obs_dim = int(dims["obs"]), int(dims["critic"])

    def _bind_rewards(self, env: Any) -> None:
        manager = env.reward_manager
        if not manager._scale_by_dt:  # noqa: SLF001
            raise ValueError("the device env scales rewards by dt, as the G1 task does")
        self._rewards = [
            _RewardTerm(name, T.twin_of("reward", name, cfg.func), self._device_params(cfg.params), float(cfg.weight),
                        False)
            for name, cfg in zip(manager._term_names, manager._term_cfgs, strict=True)  # noqa: SLF001
            if cfg.weight != 0.0
        ]

    def _device_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Term parameters with their number lists (e.g. ``pose_weights``) as float64 device tensors, made once."""
        return T.device_params(params, self.device)

    def _bind_terminations(self, env: Any) -> None:
        manager = env.termination_manager
        self._terminations = [(T.twin_of("termination", name, cfg.func), dict(cfg.params), bool(cfg.time_out))
                              for name, cfg in zip(manager._term_names, manager._term_cfgs, strict=True)]  # noqa: SLF001

    # --- UniLab's shared reset events, one device form each (the tasks bind their parameters) ---------------

    def _reset_state(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """qpos/qvel of ``reset_scene_to_default`` then ``reset_root_state_uniform`` (world-frame root state); the
        task binds ``_pose_range``, ``_velocity_range``, ``_default_root_state``, ``_env_origins``, the default qpos
        and qvel and the root's qvel columns."""
        n = self.num_envs
        pose = self.draws.uniform(self._pose_range[:, 0], self._pose_range[:, 1], rows, 6)
        velocity = self.draws.uniform(self._velocity_range[:, 0], self._velocity_range[:, 1], rows, 6)
        root = self._default_root_state
        dtype = root.dtype
        position = (root[:, 0:3].double() + pose[:, 0:3] + self._env_origins.double()).to(dtype)
        quat = quat_mul(root[:, 3:7].double(), quat_from_euler_xyz(pose[:, 3], pose[:, 4], pose[:, 5])).to(dtype)
        velocity_w = (root[:, 7:13].double() + velocity).to(dtype)
        qpos = self._default_qpos.expand(n, -1).clone()
        qvel = self._default_qvel.expand(n, -1).clone()
        qpos[:, self.state.root_qpos_cols] = torch.cat([position, quat], dim=1).to(qpos.dtype)
        staged_quat = qpos[:, self.state.root_qpos_cols[3:7]]
        encoded = torch.cat([velocity_w[:, 0:3].to(qvel.dtype),
                             quat_apply_inverse(staged_quat, velocity_w[:, 3:6].to(staged_quat.dtype)).to(qvel.dtype)], 1)
        qvel[:, self._root_qvel_cols] = encoded
        return qpos.to(self.sim.qpos.dtype), qvel.to(self.sim.qvel.dtype)

    def _write_pd_gains(self, rows: torch.Tensor, kp: torch.Tensor, kd: torch.Tensor) -> None:
        """``pd_gains``: the drawn kp and kd into the actuators' gain and bias rows where ``rows`` (an (N, 1) mask)
        is set, as UniLab's backend writes them (gain kp; bias -kp, -kd)."""
        sim = self.sim
        gain, bias = sim.gainprm[:, self._gain_cols], sim.biasprm[:, self._gain_cols]
        gain[:, :, 0] = torch.where(rows, kp, gain[:, :, 0])
        bias[:, :, 1] = torch.where(rows, -kp, bias[:, :, 1])
        bias[:, :, 2] = torch.where(rows, -kd, bias[:, :, 2])
        sim.gainprm[:, self._gain_cols] = gain
        sim.biasprm[:, self._gain_cols] = bias

    # --- the task's parts (a task subclass gives them) ---------------------------------------------------

    def _bind_task(self, env: Any) -> None:
        """Bind the task's command, gait phase, curriculum and events from the materialized UniLab env (refusing in
        one line what has no device form)."""
        raise NotImplementedError

    def _draw_command(self, rows: torch.Tensor) -> _CommandDraw:
        """``UniformVelocityCommand._resample``'s draws for ``rows`` in UniLab's order, and the commands they give
        (the task binds ``_command_cfg``; a command class that resamples otherwise overrides this)."""
        cfg, draws = self._command_cfg, self.draws
        ranges = cfg.ranges
        lo, hi = cfg.resampling_time_range
        time_left = draws.uniform(lo, hi, rows).to(torch.float32)
        new = torch.stack([draws.uniform(*ranges.lin_vel_x, rows), draws.uniform(*ranges.lin_vel_y, rows),
                           draws.uniform(*ranges.ang_vel_z, rows)], dim=1).to(torch.float32)
        standing = draws.uniform(0.0, 1.0, rows) <= cfg.rel_standing_envs
        draws.uniform(0.0, 1.0, rows)  # world-frame flags: refused when configured, still drawn as UniLab does
        forward = draws.uniform(0.0, 1.0, rows) <= cfg.rel_forward_envs
        fwd_x = torch.clamp_min(torch.abs(new[:, 0]), 0.3)
        new = torch.where(forward[:, None], torch.stack([fwd_x, torch.zeros_like(fwd_x), torch.zeros_like(fwd_x)], 1), new)
        return _CommandDraw(time_left, new, standing)

    def _resample_command(self, rows: torch.Tensor, drawn: _CommandDraw) -> None:
        cmd = self.state.command
        self.time_left.copy_(torch.where(rows, drawn.time_left, self.time_left))
        cmd.copy_(torch.where(rows[:, None], drawn.command, cmd))
        self.is_standing.copy_(torch.where(rows, drawn.standing, self.is_standing))
        cmd.masked_fill_(self.is_standing[:, None], 0.0)

    def _after_substeps(self) -> None:
        """The task's work right after the physics substeps (sensors its terms read from the final state)."""

    def _joint_targets(self) -> torch.Tensor:
        """The actuators' position targets from this step's action (``JointPositionAction``: scale, then offset)."""
        return self.state.action * self._action_scale + self._action_offset

    # --- the tracked-body sensors (the bodies a task's terms read in the world frame) ------------------------

    def _bind_tracked_sensors(self, bodies: list[str]) -> None:
        """The ``sensordata`` columns of ``bodies``' world-frame tracked-body sensors (``track_*_w_<body>``)."""
        spans = [self.sim.sensor_slots[f"{prefix}_{body}"] for body in bodies
                 for prefix in ("track_pos_w", "track_quat_w", "track_linvel_w", "track_angvel_w")]
        cols = torch.cat([torch.arange(start, start + dim) for start, dim in spans])
        self._tracked_sensor_cols = cols.to(self.device)

    def _refresh_tracked_sensors(self) -> None:
        """The tracked bodies' sensors from the final qpos/qvel (the backend refreshes them so before a term reads
        them; the physics step leaves them a substep behind); the other sensors kept from the substep."""
        sim = self.sim
        kept = sim.sensordata.clone()
        mjw, model, data = sim._mjw, sim._model, sim._data  # noqa: SLF001
        mjw.kinematics(model, data)
        mjw.com_pos(model, data)
        mjw.com_vel(model, data)
        mjw.sensor_pos(model, data)
        mjw.sensor_vel(model, data)
        kept[:, self._tracked_sensor_cols] = sim.sensordata[:, self._tracked_sensor_cols]
        sim.sensordata.copy_(kept)

    def _advance_phase(self) -> None:
        """The task's per-step phase (a gait clock), after the terminations and before the rewards."""

    def _draw_events(self, rows: torch.Tensor) -> Any:
        """The draws of the task's step events (after the rewards, before the command); None: no step events."""
        return None

    def _apply_events(self, drawn: Any) -> None:
        """Apply the task's step events with their draws (``_draw_events``)."""

    def _draw_reset(self, rows: torch.Tensor) -> Any:
        """The reset events' draws for ``rows`` in UniLab's order; the record has a ``command`` (``_CommandDraw``)."""
        raise NotImplementedError

    def _reset_task_rows(self, rows: torch.Tensor, drawn: Any, *, update_curriculum: bool) -> None:
        """The task's reset of the masked rows (curriculum, events, command, gait, physics state), before the actions
        are cleared and the rows' sensors computed (``DeviceEnvBase._reset_rows``)."""
        raise NotImplementedError

    # --- the contract -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _on_sim_stream(self) -> Iterator[None]:
        """Run on the env's stream, ordered after the caller's work and before the caller's next work.

        These two waits are every order between the env and its caller: the env's own stream (the default,
        ``MjwarpState``) is non-blocking, so no implicit synchronization with torch's default stream adds any.
        """
        stream = self.sim.stream
        if stream is None:
            yield
            return
        caller = torch.cuda.current_stream(self.device)
        stream.wait_stream(caller)
        with torch.cuda.stream(stream):
            yield
        caller.wait_stream(stream)

    def describe(self) -> dict[str, str]:
        """The form of the step as it runs (the device runner records it in the run's ``runtime_manifest``): its CUDA
        graph (``captured``; ``off`` on the CPU or without graph-safe draws; ``eager (capture failed: ...)``), and
        the form of each part it was built with (stream, sensors, draws, reset, terms, timestamps; the terms are
        always the torch twins, ``terms``)."""
        return {"step_graph": self.graph_status, "stream": self.sim.stream_kind, "sensors": self.sim.sensors_in,
                "draws_ahead": "true" if self._draws_ahead else "false",
                "reset": "when_done" if self._reset_only_when_done else "every_step",
                "terms": "torch",
                "step_split": "stamped" if self.step_stamps is not None else "off"}

    def reset(self) -> DeviceStep:
        """Reset every env (UniLab's ``init_state``): no curriculum update, reward 0, no dones.

        The first reset on CUDA also records the step's CUDA graph, here, ahead of the training loop (the
        collector resets the env before the learner's warm-up compiles and captures): the capture needs one
        eager step first (kernel loads, lazy allocations), taken with zero actions and then undone by
        resetting every env again.
        """
        with self._on_sim_stream():
            self._reset_all()
            if self.graph_status == "pending":
                self._action_in.zero_()
                self._step_eager()
                self._capture()
                self._reset_all()
        return self._output()

    def _reset_all(self) -> None:
        self.reward.zero_()
        self._reset_rows(self._all_rows, update_curriculum=False)
        self.terminated.zero_()
        self.truncated.zero_()
        self.final_policy_obs.copy_(self.policy_obs)
        self.final_critic_obs.copy_(self.critic_obs)
        if self._draws_ahead:  # the first step's draws, after the reset's: the order of draws taken in the step
            drawn = self._draw_step()
            if self._drawn is None:
                self._drawn = _DrawBuffers(drawn)
            self._drawn.write(self._drawn.current, drawn)

    def step(self, actions: torch.Tensor) -> DeviceStep:
        with self._on_sim_stream():
            self._action_in.copy_(actions)
            if self._graph is not None:
                self._draw_next()
                self._graph.replay()
                self._take_next()
            else:
                self._step_eager()
        return self._output()

    def _step_eager(self) -> None:
        self._draw_next()
        self._step_body()
        self._take_next()

    def _capture(self) -> None:
        """Record the step as one CUDA graph, and the next step's draws as one of their own (draws ahead); a capture
        that fails leaves the eager step, with the reason.

        A failed capture leaves a generator registered with it in capture state, where its next eager draw stops
        the run: the draws then go on from a new generator with the state from before the capture (the same
        numbers the step would have drawn).
        """
        generators = (self.draws.generator,)  # type: ignore[attr-defined]
        state = self.draws.generator.get_state()  # type: ignore[attr-defined]
        try:
            # With draws ahead the step's graph takes no draw, and must not register the generator: a replay of a
            # graph that does rewrites the generator's offset on the device, which the draws' graph reads beside it.
            self._graph = self.sim.capture(self._step_body, () if self._draws_ahead else generators)
            if self._draw_stream is not None:
                self._draw_graph = self.sim.capture(self._write_next_draws, generators, stream=self._draw_stream,
                                                    warp=False)
            self.graph_status = "captured"
        except RuntimeError as exc:
            self._graph = self._draw_graph = None
            generator = torch.Generator(device=self.device)
            generator.set_state(state)
            self.draws.generator = generator  # type: ignore[attr-defined]
            self.graph_status = f"eager (capture failed: {str(exc).splitlines()[0]})"
            print(f"{self.name}: the step stays eager: {self.graph_status}", file=sys.stderr)

    def _step_body(self) -> None:
        """One env step (UniLab's order), reading the action from ``_action_in``: no host sync, fixed shapes.

        With ``draws_ahead`` the step takes no draw: it reads the draws taken beside the step before it (every
        random draw of the step and what is computed from draws alone: reset states, gains, commands, gait phases,
        observation noise), in the step's draw order.

        ``reset_only_when_done`` (with draws ahead) runs the reset of the done rows only on a step with a done row
        (``MjwarpState.when_any``: a conditional node of the step's graph). A reset of no rows changes no output
        and nothing a later step reads: every update in it is masked by the rows, the curriculum keeps its level
        without a done row, and MuJoCo Warp's ``reset_data`` skips unmasked worlds. Its kinematics pass (for the
        reset rows' sensors) rewrites derived arrays of every world (body poses, COM velocities), which the next
        step's forward computes again before reading them; the sensors of the other rows are put back.
        """
        s = self.state
        ahead = self._drawn.current if self._drawn is not None else None
        stamps = self.step_stamps
        if stamps is not None:
            stamps.start()
        s.prev_action.copy_(s.action)
        s.action.copy_(self._action_in)
        self.sim.ctrl[:, self._ctrl_cols] = self._joint_targets()
        self.sim.step(self.substeps)
        self._after_substeps()
        if stamps is not None:
            stamps.after("env_physics")
        self._after_physics(ahead)
        reset = functools.partial(self._reset_rows, self._done, update_curriculum=True,
                                  drawn=ahead.reset if ahead else None, noise=ahead.reset_noise if ahead else None)
        if stamps is not None:
            stamps.after("env_terms")
        done = self._done
        if self._reset_only_when_done:
            self.sim.when_any(done, reset)
        else:
            reset()
        if stamps is not None:
            stamps.after("env_reset")

    def _after_physics(self, ahead: _StepDraws | None) -> None:
        """The step's work between the physics and the reset: episode length, terminations into ``_done``, gait phase,
        rewards (NaN guarded: the reset never touches them), the command, both observation groups, the final
        observations, the step count."""
        s = self.state
        torch.add(self.steps, 1, out=s.episode_length)
        self._terminate()
        done = torch.logical_or(self.terminated, self.truncated, out=self._done)
        self._advance_phase()
        self._reward()
        torch.nan_to_num(self.reward, nan=0.0, posinf=0.0, neginf=0.0, out=self.reward)
        events = ahead.events if ahead else self._draw_events(self._all_rows)
        if events is not None:
            self._apply_events(events)
        self._advance_command(done, ahead.command if ahead else None)
        self._observe(self._all_rows, ahead.noise if ahead else None)
        self.final_policy_obs.copy_(self.policy_obs)
        self.final_critic_obs.copy_(self.critic_obs)
        self.steps += 1

    def _draw_step(self) -> _StepDraws:
        """Every draw of a step and what follows from draws alone, in the step's draw order (the draws ignore the
        rows: ``TorchDraws``)."""
        rows = self._all_rows
        events = self._draw_events(rows)
        command = self._draw_command(rows)
        noise = self._draw_noise(rows)
        reset = self._draw_reset(rows)
        return _StepDraws(command, noise, reset, self._draw_noise(rows), events)

    def _write_next_draws(self) -> None:
        assert self._drawn is not None
        self._drawn.write(self._drawn.pending, self._draw_step())

    def _draw_next(self) -> None:
        """Draws ahead: the next step's draws into ``pending``, beside this step (on the draw stream on CUDA, as its
        own CUDA graph once captured). They come after this step's draws (taken beside the step before) and before
        the next step's, so the generator's order is that of draws taken in the step.

        The draws are a graph of their own, not a branch inside the step's graph: MuJoCo Warp's solver loop and
        collision dispatch are conditional graph nodes, for which Warp ends and resumes the step's capture, and
        CUDA refuses to end a capture while a stream forked from it has not joined.
        """
        if not self._draws_ahead:
            return
        stream = self._draw_stream
        if stream is None:
            self._write_next_draws()
            return
        stream.wait_stream(torch.cuda.current_stream(self.device))  # the previous step took ``pending`` over
        with torch.cuda.stream(stream):
            if self._draw_graph is not None:
                self._draw_graph.replay()
            else:
                self._write_next_draws()

    def _take_next(self) -> None:
        """Draws ahead: after the step, ``pending`` becomes ``current`` (one copy, once the draws have finished)."""
        if not self._draws_ahead:
            return
        assert self._drawn is not None
        if self._draw_stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self._draw_stream)
        self._drawn.take_pending()

    def _output(self) -> DeviceStep:
        return DeviceStep(self.policy_obs, self.critic_obs, self.reward, self.terminated, self.truncated,
                          self.final_policy_obs, self.final_critic_obs)

    # --- the step's parts ---------------------------------------------------------------------------------

    def _terminate(self) -> None:
        self.terminated.zero_()
        self.truncated.zero_()
        for twin, params, is_time_out in self._terminations:
            value = twin(self.state, **params)
            (self.truncated if is_time_out else self.terminated).logical_or_(value)

    def _reward(self) -> None:
        self.reward.zero_()
        for term in self._rewards:
            weight = term.weight * self._scale if term.curriculum_scaled else term.weight
            self.reward += (term.twin(self.state, **term.params) * weight) * self.step_dt

    def _advance_command(self, done: torch.Tensor, drawn: _CommandDraw | None = None) -> None:
        dt = torch.full(done.shape, self.step_dt, dtype=torch.float64, device=self.device).masked_fill_(done, 0.0)
        self.time_left.sub_(dt)
        rows = self.time_left <= 0.0
        self._resample_command(rows, drawn if drawn is not None else self._draw_command(rows))

    def _draw_noise(self, rows: torch.Tensor) -> list[torch.Tensor | None]:
        """Both observation groups' additive noise for ``rows``, term by term in UniLab's order (None: no noise)."""
        noise: list[torch.Tensor | None] = []
        for term in (*self._policy_terms, *self._critic_terms):
            if term.noise is None:
                noise.append(None)
            else:
                span, low = term.noise
                noise.append(self.draws.random_f32(rows, term.width) * span + low)
        return noise

    def _observe(self, rows: torch.Tensor, noise: list[torch.Tensor | None] | None = None) -> None:
        noise = noise if noise is not None else self._draw_noise(rows)
        index = 0
        for terms, out in ((self._policy_terms, self.policy_obs), (self._critic_terms, self.critic_obs)):
            values = []
            for term in terms:
                value = term.twin(self.state, **term.params)
                if noise[index] is not None:
                    value = value + noise[index]
                index += 1
                if term.scale is not None:
                    value = value * term.scale
                values.append(value)
            out.copy_(torch.where(rows[:, None], torch.cat(values, dim=1), out))

    def _reset_rows(self, rows: torch.Tensor, *, update_curriculum: bool, drawn: Any = None,
                    noise: list[torch.Tensor | None] | None = None) -> None:
        """UniLab's reset of the masked rows: the task's part (curriculum, reset events, command, gait, physics
        state), actions, the rows' sensors, episode counts, observations (``drawn`` and ``noise``: the draws taken
        ahead; else drawn here)."""
        drawn = drawn if drawn is not None else self._draw_reset(rows)
        self._reset_task_rows(rows, drawn, update_curriculum=update_curriculum)
        self.state.action.masked_fill_(rows[:, None], 0.0)
        self.state.prev_action.masked_fill_(rows[:, None], 0.0)
        self.sim.forward_rows(rows)
        self.steps.masked_fill_(rows, 0)
        self._observe(rows, noise)
