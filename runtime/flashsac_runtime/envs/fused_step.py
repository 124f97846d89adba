"""The device env step's work around the physics as Warp kernels: terms, command, observations, and the reset.

With the torch twins (``terms.py``) the work between a G1 Walk Flat step's physics and its reset is about 160
torch operations, and the reset of the done rows about 80 more, each a small kernel of its own in the step's CUDA
graph; at the report's 256 envs each costs a launch slot more than its work. ``FusedStep`` generates kernels for
the task's bound terms (``warp_terms``: the twins' arithmetic for one row, their parameters compiled in as
constants), one thread per env row:

- ``after_physics``: one kernel, in the order of ``G1WalkDeviceEnv._after_physics``: the episode length, the
  terminations, the gait phase, the rewards with the curriculum's scale and the NaN guard, the command's
  countdown and resampling, both observation groups with their noise and scales, the final observations, the
  step count.
- ``reset_done_rows``: ``G1WalkDeviceEnv._reset_rows`` of the done rows: the curriculum (the done rows and their
  lengths summed in integers, so in any order exactly, then one thread), the command, gait phase and actions of
  the done rows and MuJoCo Warp's reset mask; MuJoCo Warp's ``reset_data``; the drawn qpos, qvel and gains; the
  kinematics pass for the reset rows' sensors (``MjwarpState.forward_rows``); the step count and both observation
  groups of the done rows. Five kernels of ours instead of about 80 torch operations.

Both read the step's draws from the buffer the draws taken ahead filled (one flat view, the offsets found here),
so the fused step needs ``draws_ahead``.

Same values as the torch step within float32 rounding: the order of every sum and product is the twin's, but a
compiler may contract a product and a sum into one fused multiply-add (CUDA does by default), two reductions may
sum in another order, and Warp's ``exp`` and ``acos`` are not torch's (``experiments/evidence``'s
``device_env_check.py --mode fused-terms`` states the tolerance and measures it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import warp as wp

from flashsac_runtime.envs import warp_terms as W

#: A bound observation term: (its Warp function, width, first column, noise offset or -1, scale row or -1).
ObsTerm = tuple[Any, int, int, int, int]


def unsupported(env: Any) -> list[str]:
    """The bound terms without a Warp twin (the fused step needs every one)."""
    bound = [("observation", t.name, t.twin) for t in (*env._policy_terms, *env._critic_terms)]  # noqa: SLF001
    bound += [("reward", r.name, r.twin) for r in env._rewards]  # noqa: SLF001
    bound += [("termination", getattr(twin, "__name__", "?"), twin) for twin, _, _ in env._terminations]  # noqa: SLF001
    return [f"{kind} {name!r}" for kind, name, twin in bound if W.warp_twin_of(twin) is None]


def _warp(tensor: torch.Tensor) -> Any:
    """A zero-copy Warp view of a torch tensor (its address is the tensor's: the graph reads it in place)."""
    return wp.from_torch(tensor)


def _constant(values: Any, device: str, dtype: Any = wp.int32) -> Any:
    """A Warp array of constant values, made once and kept with the kernels' arguments."""
    return wp.array(np.asarray(values), dtype=dtype, device=device)


class FusedStep:
    """The step's work after the physics and its reset of the done rows as Warp kernels (module docstring), bound
    to ``env``'s buffers and to the done rows ``done`` (which ``after_physics`` writes).

    It holds no state of its own between steps (its sums over the done rows are cleared by the reset that reads
    them), only kernels and views of the env's buffers: its slots keep it out of the env's checkpoint
    (``flashsac_runtime.preemption.env_state`` walks objects' ``__dict__``), whose keys are then those of the torch
    step, so a checkpoint resumes with either form.
    """

    __slots__ = ("_step", "_count", "_curriculum", "_reset_first", "_reset_state", "_reset_observe", "_arrays",
                 "_sim", "_done", "_rows", "_device")

    def __init__(self, env: Any, done: torch.Tensor) -> None:
        # The env has refused a task with a term without a Warp twin (``unsupported``), and made the draws' buffers.
        assert env._drawn is not None  # noqa: SLF001
        s, sim, device = env.state, env.sim, str(env.device)
        ctx = W.TermContext(sim.sensor_slots, int(s.root_qpos_cols[2]), int(env.max_episode_length), [])
        drawn = env._drawn.current  # noqa: SLF001
        base = env._drawn.current_bytes  # noqa: SLF001

        def at(leaf: torch.Tensor) -> int:
            """A draw's offset in the draws' buffer, in its own elements (each draw is a contiguous view of it)."""
            start = leaf.data_ptr() - base.data_ptr()
            assert start % leaf.element_size() == 0 and leaf.is_contiguous()
            return start // leaf.element_size()

        obs_terms = []
        for terms in (env._policy_terms, env._critic_terms):  # noqa: SLF001
            column, group = 0, []
            for term in terms:
                factory = W.warp_twin_of(term.twin)
                assert factory is not None
                scale = (-1 if term.scale is None
                         else ctx.vector_row(np.broadcast_to(term.scale.cpu().numpy(), (term.width,))))
                group.append((factory(ctx, **term.params), term.width, column, scale))
                column += term.width
            obs_terms.append(group)

        def with_noise(noise: list[torch.Tensor | None]) -> list[list[ObsTerm]]:
            leaves = iter(noise)
            return [[(func, width, column, -1 if (leaf := next(leaves)) is None else at(leaf), scale)
                     for func, width, column, scale in group] for group in obs_terms]

        rewards = []
        for r in env._rewards:  # noqa: SLF001
            factory = W.warp_twin_of(r.twin)
            assert factory is not None
            rewards.append((factory(ctx, **r.params), float(r.weight), bool(r.curriculum_scaled)))
        terminations = []
        for twin, params, time_out in env._terminations:  # noqa: SLF001
            factory = W.warp_twin_of(twin)
            assert factory is not None
            terminations.append((factory(ctx, **params), bool(time_out)))

        def command_at(command: Any) -> tuple[int, int, int]:
            return at(command.time_left), at(command.command), at(command.standing)

        reset = drawn.reset
        self._step = _step_kernel(_observe(with_noise(drawn.noise), final=True), rewards, terminations,
                                  step_dt=float(env.step_dt), gait_delta=float(env._gait_delta),  # noqa: SLF001
                                  command=command_at(drawn.command))
        self._count = _count_kernel()
        self._curriculum = _curriculum_kernel(env._curriculum)  # noqa: SLF001
        self._reset_first = _reset_first_kernel(command_at(reset.command),
                                                -1 if reset.gait_phase is None else at(reset.gait_phase))
        self._reset_state = _reset_state_kernel(at(reset.qpos), at(reset.qvel), at(reset.kp), at(reset.kd))
        self._reset_observe = _reset_observe_kernel(_observe(with_noise(drawn.reset_noise), final=False))

        a = W.StepArrays()
        a.qpos, a.qvel, a.sensordata = _warp(sim.qpos), _warp(sim.qvel), _warp(sim.sensordata)
        a.joint_qpos_cols = _constant(s.joint_qpos_cols.cpu().numpy(), device)
        a.joint_qvel_cols = _constant(s.joint_qvel_cols.cpu().numpy(), device)
        width = max((len(v) for v in ctx.vectors), default=1)
        vectors = np.zeros((max(len(ctx.vectors), 1), width), dtype=np.float64)
        for index, values in enumerate(ctx.vectors):
            vectors[index, :len(values)] = values
        a.vectors = _constant(vectors, device, wp.float64)
        a.default_joint_pos, a.default_joint_vel = _warp(s.default_joint_pos), _warp(s.default_joint_vel)
        a.action, a.prev_action = _warp(s.action), _warp(s.prev_action)
        a.command, a.gait_phase = _warp(s.command), _warp(s.gait_phase)
        a.steps, a.episode_length = _warp(env.steps), _warp(s.episode_length)
        a.time_left, a.is_standing = _warp(env.time_left), _warp(env.is_standing)
        a.penalty_scale = _warp(env._scale.view(1))  # noqa: SLF001
        a.average_length = _warp(env._average_length.view(1))  # noqa: SLF001
        a.done_count = wp.zeros(2, dtype=wp.int64, device=device)
        a.reset_mask = sim.reset_mask
        a.gainprm, a.biasprm = _warp(sim.gainprm), _warp(sim.biasprm)
        a.gain_cols = _constant(env._gain_cols.cpu().numpy(), device)  # noqa: SLF001
        a.drawn_f32 = _warp(base.view(torch.float32))
        a.drawn_bool = _warp(base.view(torch.bool))
        a.reward = _warp(env.reward)
        a.terminated, a.truncated, a.done = _warp(env.terminated), _warp(env.truncated), _warp(done)
        a.policy_obs, a.critic_obs = _warp(env.policy_obs), _warp(env.critic_obs)
        a.final_policy_obs, a.final_critic_obs = _warp(env.final_policy_obs), _warp(env.final_critic_obs)
        self._arrays, self._sim, self._done = a, sim, done
        self._rows, self._device = int(env.num_envs), device

    def kernels(self) -> list[Any]:
        """Its Warp kernels, in launch order (``G1WalkDeviceEnv.warp_kernels``)."""
        return [self._step, self._count, self._curriculum, self._reset_first, self._reset_state, self._reset_observe]

    def _launch(self, kernel: Any, rows: int | None = None) -> None:
        """On Warp's current stream of the device (the env's stream)."""
        wp.launch(kernel, dim=self._rows if rows is None else rows, inputs=[self._arrays], device=self._device)

    def after_physics(self) -> None:
        """The step's work between the physics and the reset (``G1WalkDeviceEnv._after_physics``)."""
        self._launch(self._step)

    def reset_done_rows(self) -> None:
        """The reset of the done rows (``G1WalkDeviceEnv._reset_rows`` with the curriculum and the draws ahead)."""
        self._launch(self._count)
        self._launch(self._curriculum, rows=1)
        self._launch(self._reset_first)
        self._sim.reset_masked()
        self._launch(self._reset_state)
        self._sim.forward_rows(self._done)
        self._launch(self._reset_observe)


def _observe(groups: list[list[ObsTerm]], *, final: bool) -> list[Any]:
    """One function per observation term writing its columns of one row (noise, then scale; with ``final`` the
    final copies too), for a kernel to call in order.

    Every constant a function uses is a closure variable of its own, never an element of a list: Warp's kernel cache
    keys a function on its closure's scalars and functions, and on its ``wp.static`` expressions, except those that
    index a container by a loop variable, which it evaluates after hashing. A list read that way inside a function
    would let a kernel built for other offsets (another env count) be loaded from the cache.
    """
    writers = []
    for group, terms in enumerate(groups):
        for term, width, column, noise_at, scale_row in terms:
            writers.append(_write_term(term, width, column, noise_at, scale_row, group, final))
    return writers


def _write_term(term: Any, width: int, column: int, noise_at: int, scale_row: int, group: int, final: bool) -> Any:
    @wp.func
    def write(s: W.StepArrays, row: int) -> None:
        for j in range(width):
            value = term(s, row, j)
            if wp.static(noise_at >= 0):
                value = value + s.drawn_f32[noise_at + row * width + j]
            if wp.static(scale_row >= 0):
                value = value * wp.float32(s.vectors[scale_row, j])
            if wp.static(group == 0):
                s.policy_obs[row, column + j] = value
                if wp.static(final):
                    s.final_policy_obs[row, column + j] = value
            else:
                s.critic_obs[row, column + j] = value
                if wp.static(final):
                    s.final_critic_obs[row, column + j] = value

    return write


def _step_kernel(observe: list[Any], rewards: list[tuple[Any, float, bool]], terminations: list[tuple[Any, bool]], *,
                 step_dt: float, gait_delta: float, command: tuple[int, int, int]) -> Any:
    """The kernel of ``after_physics`` for these bound terms (each loop over terms is unrolled: they are constants)."""
    two_pi = 2.0 * math.pi
    time_left_at, command_at, standing_at = command

    @wp.kernel(enable_backward=False, module="unique")
    def fused_step(s: W.StepArrays) -> None:
        row = wp.tid()
        # ``steps + 1``: this step counted in the episode length the terminations and the curriculum read
        length = s.steps[row] + wp.int64(1)
        s.episode_length[row] = length
        terminated = False
        truncated = False
        for i in range(wp.static(len(terminations))):
            hit = wp.static(terminations[i][0])(s, row)
            if wp.static(terminations[i][1]):
                if hit:
                    truncated = True
            else:
                if hit:
                    terminated = True
        done = terminated or truncated
        s.terminated[row] = terminated
        s.truncated[row] = truncated
        s.done[row] = done
        for k in range(2):
            s.gait_phase[row, k] = wp.mod(s.gait_phase[row, k] + wp.float32(gait_delta), wp.float32(two_pi))
        scale = s.penalty_scale[0]
        reward = wp.float32(0.0)
        for i in range(wp.static(len(rewards))):
            value = wp.static(rewards[i][0])(s, row)
            weight = wp.float32(wp.static(rewards[i][1]))
            if wp.static(rewards[i][2]):
                weight = wp.float32(wp.float64(wp.static(rewards[i][1])) * scale)
            reward = reward + (value * weight) * wp.float32(step_dt)
        if wp.isnan(reward) or wp.isinf(reward):
            reward = wp.float32(0.0)
        s.reward[row] = reward
        # the command: its countdown (in float64, as the torch step's float64 dt), then the rows due resample
        countdown = wp.float64(step_dt)
        if done:
            countdown = wp.float64(0.0)
        time_left = wp.float32(wp.float64(s.time_left[row]) - countdown)
        if time_left <= wp.float32(0.0):
            time_left = s.drawn_f32[time_left_at + row]
            for k in range(3):
                s.command[row, k] = s.drawn_f32[command_at + row * 3 + k]
            s.is_standing[row] = s.drawn_bool[standing_at + row]
        s.time_left[row] = time_left
        if s.is_standing[row]:
            for k in range(3):
                s.command[row, k] = wp.float32(0.0)
        for i in range(wp.static(len(observe))):
            wp.static(observe[i])(s, row)
        s.steps[row] = length

    return fused_step


def _count_kernel() -> Any:
    """The curriculum's sums over the done rows: how many, and their episode lengths (integers: exact in any
    order, as the torch step's float64 sums of integers are)."""

    @wp.kernel(enable_backward=False, module="unique")
    def count_done(s: W.StepArrays) -> None:
        row = wp.tid()
        if s.done[row]:
            wp.atomic_add(s.done_count, 0, wp.int64(1))
            wp.atomic_add(s.done_count, 1, s.episode_length[row])

    return count_done


def _curriculum_kernel(curriculum: Any) -> Any:
    """``G1WalkDeviceEnv._update_curriculum`` on one thread, from ``count_done``'s sums (then cleared)."""
    window = float(curriculum._tracker.window_size)  # noqa: SLF001
    down, up = float(curriculum._level_down_threshold), float(curriculum._level_up_threshold)  # noqa: SLF001
    lower, higher = 1.0 - float(curriculum._degree), 1.0 + float(curriculum._degree)  # noqa: SLF001
    least, most = float(curriculum._min_scale), float(curriculum._max_scale)  # noqa: SLF001

    @wp.kernel(enable_backward=False, module="unique")
    def curriculum_step(s: W.StepArrays) -> None:
        count = wp.float64(s.done_count[0])
        mean = wp.float64(s.done_count[1]) / wp.max(count, wp.float64(1.0))
        s.done_count[0] = wp.int64(0)
        s.done_count[1] = wp.int64(0)
        if count > wp.float64(0.0):
            weight = wp.min(count / wp.float64(window), wp.float64(1.0))
            average = s.average_length[0] * (wp.float64(1.0) - weight) + mean * weight
            scale = s.penalty_scale[0]
            if average < wp.float64(down):
                scale = scale * wp.float64(lower)
            elif average > wp.float64(up):
                scale = scale * wp.float64(higher)
            s.average_length[0] = average
            s.penalty_scale[0] = wp.clamp(scale, wp.float64(least), wp.float64(most))

    return curriculum_step


def _reset_first_kernel(command: tuple[int, int, int], gait_at: int) -> Any:
    """The done rows' command, gait phase and actions, and MuJoCo Warp's reset mask (before ``reset_data``)."""
    time_left_at, command_at, standing_at = command

    @wp.kernel(enable_backward=False, module="unique")
    def reset_first(s: W.StepArrays) -> None:
        row = wp.tid()
        rows = s.done[row]
        s.reset_mask[row] = rows
        if rows:
            s.time_left[row] = s.drawn_f32[time_left_at + row]
            for k in range(3):
                s.command[row, k] = s.drawn_f32[command_at + row * 3 + k]
            s.is_standing[row] = s.drawn_bool[standing_at + row]
            if wp.static(gait_at >= 0):
                for k in range(2):
                    s.gait_phase[row, k] = s.drawn_f32[gait_at + row * 2 + k]
            for j in range(s.action.shape[1]):
                s.action[row, j] = wp.float32(0.0)
                s.prev_action[row, j] = wp.float32(0.0)
        if s.is_standing[row]:
            for k in range(3):
                s.command[row, k] = wp.float32(0.0)

    return reset_first


def _reset_state_kernel(qpos_at: int, qvel_at: int, kp_at: int, kd_at: int) -> Any:
    """The done rows' drawn qpos, qvel, kp and kd (after ``reset_data``)."""

    @wp.kernel(enable_backward=False, module="unique")
    def reset_state(s: W.StepArrays) -> None:
        row = wp.tid()
        if s.done[row]:
            nq = s.qpos.shape[1]
            for j in range(nq):
                s.qpos[row, j] = s.drawn_f32[qpos_at + row * nq + j]
            nv = s.qvel.shape[1]
            for j in range(nv):
                s.qvel[row, j] = s.drawn_f32[qvel_at + row * nv + j]
            gains = s.gain_cols.shape[0]
            for j in range(gains):
                kp = s.drawn_f32[kp_at + row * gains + j]
                col = s.gain_cols[j]
                s.gainprm[row, col, 0] = kp
                s.biasprm[row, col, 1] = -kp
                s.biasprm[row, col, 2] = -s.drawn_f32[kd_at + row * gains + j]

    return reset_state


def _reset_observe_kernel(observe: list[Any]) -> Any:
    """The done rows' step count and observations (after the kinematics pass for their sensors)."""

    @wp.kernel(enable_backward=False, module="unique")
    def reset_observe(s: W.StepArrays) -> None:
        row = wp.tid()
        if s.done[row]:
            s.steps[row] = wp.int64(0)
            for i in range(wp.static(len(observe))):
                wp.static(observe[i])(s, row)

    return reset_observe
