#!/usr/bin/env python3
"""The device-resident G1 Walk Flat env is the same task as UniLab 1.3.2's NumPy env: checks, and counts of its work.

Run from a UniLab tree root with the overlay first on ``PYTHONPATH`` (``tests/test_device_env.py`` runs it on
Warp's CPU device, ``UNISIM_MJWARP_ALLOW_CPU=1``; on a GPU host it runs on CUDA). Both envs are built from the
tree's ``g1_walk_flat/mjwarp`` task config through the collector's own env factory.

  parity        UniLab's NumPy env and the device env (fed UniLab's own NumPy draws, ``NumpyDraws``, seeded
                like ``env.rng``), each on its own MJWarp physics, step side by side with the same seeded
                uniform actions for ``--steps`` steps with autoreset. Per step: both observation groups, the
                pre-reset final observations, qpos, terminated and truncated must be bitwise equal, the
                reward within ``REWARD_ATOL`` (the reward terms' exp and sums are float32 rounding away from
                NumPy's). ``--perturb-reward TERM`` scales one reward term of the device env by 1.001, and
                ``--perturb-kp`` widens its kp range: the negative controls, which must be reported.
  distribution  the device env with its own torch draws (``TorchDraws``, as in training), ``--num-envs`` rows:
                the reset root state (offsets, orientation, linear and angular velocity), kp/kd scales, commands
                and their resampling time, gait phases and observation noise it samples over a reset and
                ``--steps`` steps are checked against the ranges of the tree's config (composed without
                ``--override``) by ``device_env_distribution.range_check``: every sample inside its range, the range
                covered (min and max within 5 % of its ends), the mean within 4 standard errors of the middle and
                the samples uniform (Kolmogorov-Smirnov, significance 0.001); a point range exactly.
                ``--override`` changes the env's config only (e.g. a wrong kp range): the check must fail.
  host-reads    the device env with its own torch draws steps ``--steps`` times (after one warm-up step, as
                before its CUDA graph is recorded) under a torch function mode that records every host read a
                CUDA capture forbids: ``item``/``tolist``/``bool``/``int``/``float``/``numpy``/``cpu``, ``nonzero``,
                an index that is a 0-d or boolean tensor (read on the host), and tensors made from host data.
                On the CPU these cost nothing, on CUDA each is a sync that breaks the step's graph: none may
                occur; nor may a tensor of the env's state change its storage across the steps (``rebound``:
                the step's graph reads the addresses of its capture). ``--broken-index`` puts back a 0-d tensor
                index in the height termination: it must fail. ``--draws-ahead`` checks the env taking its draws
                ahead.
  ops           not a check but a count: the ATen operations of ``--steps`` eager env steps (own torch draws,
                after one warm-up step), each under the innermost env method (``PARTS``) on the Python stack when
                it runs, split into compute operations (on CUDA each launches at least one kernel into the
                step's graph) and views (no kernel). The same on any device: run on the CPU it says where the
                step's torch work is without a GPU. ``--override`` changes the env's config (a removed reward term
                must lower the reward's count). Exit 0.
  sensors       two device envs with the same torch draws and actions, one computing the physics' sensors in each
                step's last substep only (the default), one in every substep (``sensors_every_substep``), step
                ``--steps`` times; after every step each MuJoCo Warp data array and the env's outputs must be
                bitwise equal (episodes of ``--episode-seconds``: resets within the run). Arrays that differ
                right after the reset are memory MuJoCo Warp allocates and does not fill there (its constraint
                islands, off for this model): they are zeroed in both, listed, and compared from then on like the
                rest. Also counts each env's Warp kernel launches per step.
                ``--broken-sensors`` skips the sensors in the last substep too: it must fail.
  draws-ahead   the same comparison between a device env taking its draws ahead (``draws_ahead``: each step's
                draws, and what follows from draws alone, taken beside the step before it) and one taking them in
                the step, both with their own torch draws and the reset on every step (``reset-when-done`` checks
                the reset's condition); also counts the step's compute operations and how many
                of them are taken ahead (``DRAW_PARTS``), and records the one-line refusal of draws ahead with
                UniLab's NumPy draws (sized by rows not known ahead). The draws must stay out of the step's CUDA
                graph (the env's ``_step_body``): MuJoCo Warp ends and resumes that capture at its conditional
                nodes, which CUDA refuses while a stream forked from the capture has not joined, so draws there
                could only run behind the physics, not beside it. ``--broken-draw-order`` takes the reset's draws
                before the observation noise, ``--draws-in-step-graph`` the next step's draws inside the step's
                graph: each must fail.
  reset-when-done  two device envs with draws ahead, the same torch draws and actions, one running the reset of
                its done rows only on a step with a done row (``reset_only_when_done``), one on every step (the
                default), step ``--steps`` times: after every step the env outputs and every MuJoCo Warp array must be
                bitwise equal, except on a step without a done row the arrays the reset's kinematics pass writes
                for the reset rows' sensors (``WarpLaunches``; derived arrays, which the next step's forward
                computes again before reading them: every other array stays equal). The run must have steps with
                and without a done row. ``--reset-never`` leaves the condition unset: the control, which must
                fail.
                Also counts each env's Warp kernel launches per step.
  failed-capture  a device env whose step capture fails (the capture replaced by one that moves the draws'
                generator, as a real capture does to a generator registered with it, then fails) against a twin
                that never tried: after the env's failure handling both step on from the same draws, so every
                MuJoCo Warp array and env output must stay bitwise equal over ``--steps`` steps. On CUDA the moved
                generator is also left in capture state, where its next draw stops the run; the GPU side is
                ``device_env_graph_check.py --mode failed``. ``--no-restore`` moves the generator the same way
                without the env's handling: the control, which must differ.
  step-split    the env's timestamps of its step's parts (``step_stamps``, the collector's split of the env step:
                physics, terms, reset) put each part's time where it is spent: a device env with the product's
                form steps once (its kernels built), then ``--steps`` steps per block, a block as it is, then one
                block each with ``STEP_SPLIT_DELAY_MS`` added to one part (the physics' substeps, the terms' work
                after them, the reset's conditional); after each step its parts are read from a copy of the env's
                ring of timestamps as the collector reads them, and a block's median step is its figure. Each
                delayed part must grow by at least 80 % of the delay and the others change by less than 30 % of
                it, and every read must see exactly the one step since the last (the ring goes round). The stamp
                kernel's CUDA side must build as an sm_90 cubin (``cuda_build``). ``--misplaced-stamp`` takes the
                physics' stamp before the physics: the control, which must fail.
  sensor-stages two device envs with the product's form, one computing every sensor stage in the last substep, one
                without the acceleration stage (the default, which the task does not read), step ``--steps`` times
                side by side (``step_side_by_side``, the sensors compared on the slots the default computes): only
                ``ACCELERATION_STAGE_ARRAYS`` may differ, and reading a sensor of the stage left out must be refused.
                ``--sensors-after-integration`` computes the position and velocity sensors after the integration:
                the control, which must fail.

Prints one JSON; exit 0 when the check holds (``equal``; for draws-ahead ``holds``: equal, and no draw in the step's
graph), 1 when it does not, 2 when the device env refuses the task.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "profile"))
from collector_profile import build_env  # noqa: E402
from device_env_build import (  # noqa: E402
    TASK, compose_cfg, make_device_env, seeded_actions, series_sha256, step_under, versions)
from device_env_compare import (REWARD_ATOL, SideBySideRecord, max_abs, record_step_outputs,  # noqa: E402
                                step_side_by_side)
from device_env_controls import misplace_physics_stamp, perturb_reward  # noqa: E402
from device_env_counts import (  # noqa: E402
    DRAW_PARTS, PARTS, HostReads, OpCount, WarpLaunches, held_storage, mark_step_graph, rebound)
from device_env_distribution import command_checks, pd_gains_checks, range_check, root_state_checks  # noqa: E402

#: What ``--mode step-split`` adds to one part of every step (milliseconds): far above a step part's noise on the CPU
#: (the physics of 16 G1 worlds on Warp's CPU device: about 40 ms, and on a 2-core machine busy with three more
#: processes the fastest of four steps moved by over 100 ms from one block to the next: the scheduler's share of a
#: core, and the head start it gives a process that slept). A sleep costs no CPU.
STEP_SPLIT_DELAY_MS = 1000.0


def parity(args: argparse.Namespace) -> dict[str, Any]:
    extra = (f"env.max_episode_seconds={args.episode_seconds}",)
    ref = build_env(args.num_envs, args.seed, task=TASK, extra=extra)
    dev = make_device_env(args.num_envs, args.seed, extra, numpy_draws=True)
    if args.perturb_reward:
        perturb_reward(dev, args.perturb_reward)
    if args.perturb_kp:
        dev._kp_range = (dev._kp_range[0] - 0.05, dev._kp_range[1] + 0.05)  # noqa: SLF001 - negative control
    ref.init_state()
    out = dev.reset()
    actions = np.random.default_rng(args.action_seed).uniform(
        -1.0, 1.0, (args.steps, args.num_envs, dev.action_dim)).astype(np.float32)
    record = SideBySideRecord(("obs", "critic", "final_obs", "final_critic", "qpos", "reward"))
    state = ref.state
    record(-1, "obs", max_abs(state.obs["obs"], out.policy_obs))
    record(-1, "critic", max_abs(state.obs["critic"], out.critic_obs))
    for t in range(args.steps):
        state = ref.step(actions[t])
        out = dev.step(torch.from_numpy(actions[t]).to(dev.device))
        record_step_outputs(record, t, state, out, dev.device)
        record(t, "qpos", max_abs(ref._backend.get_state(("qpos",))["qpos"], dev.sim.qpos))  # noqa: SLF001
        record(t, "reward", max_abs(state.reward, out.reward), REWARD_ATOL)
        record.dones(t, state, out)
    return record.result(mode="parity", num_envs=args.num_envs, steps=args.steps)


def distribution(args: argparse.Namespace) -> dict[str, Any]:
    cfg = compose_cfg(args.num_envs, args.seed, ())  # the tree's own ranges
    env_cfg = cfg.env
    dev = make_device_env(args.num_envs, args.seed, tuple(args.override), numpy_draws=False)
    out = dev.reset()
    events = env_cfg.events
    command = dev.state.command.double().cpu().numpy()
    checks = [
        *root_state_checks(dev, events.reset_root_state_uniform.params),
        *pd_gains_checks(dev, events.pd_gains.params),
        range_check("gait phase (left)", dev.state.gait_phase[:, 0].cpu().numpy(), 0.0, 2 * math.pi),
        # G1's planar dead zone zeroes the planar command of the rows inside it: the moving rows keep theirs.
        *command_checks(dev, env_cfg.commands.twist, np.hypot(command[:, 0], command[:, 1]) > 0, " (moving)"),
    ]
    noise = {"joint_pos": [], "joint_vel": []}
    actions = torch.rand((args.steps, args.num_envs, dev.action_dim), generator=torch.Generator().manual_seed(3)) * 2 - 1
    terms = env_cfg.observations.policy.terms
    for t in range(args.steps + 1):
        policy, critic = out.policy_obs.double().cpu().numpy(), out.critic_obs.double().cpu().numpy()
        noise["joint_pos"].append(policy[:, 6:35] - critic[:, 6:35])
        noise["joint_vel"].append((policy[:, 35:64] - critic[:, 35:64]) / terms.joint_vel.scale)
        if t < args.steps:
            out = dev.step(actions[t].to(dev.device))
    for name in ("joint_pos", "joint_vel"):
        spec = terms[name].noise
        checks.append(range_check(f"{name} noise", np.concatenate(noise[name]), spec.n_min, spec.n_max))
    return {"mode": "distribution", "num_envs": args.num_envs, "override": list(args.override), "checks": checks,
            "failed": [c["name"] for c in checks if not c["ok"]], "equal": all(c["ok"] for c in checks)}


def host_reads(args: argparse.Namespace) -> dict[str, Any]:
    dev = make_device_env(args.num_envs, args.seed, (), numpy_draws=False, graph=False, draws_ahead=args.draws_ahead)
    if args.broken_index:
        from flashsac_runtime.envs import terms

        def height(s: Any, minimum_height: float) -> torch.Tensor:
            return s.sim.qpos[:, s.root_qpos_cols[2]] < minimum_height

        dev._terminations = [(height if twin is terms.common.root_height_below_minimum else twin, params, time_out)  # noqa: SLF001
                             for twin, params, time_out in dev._terminations]  # noqa: SLF001
    mode = HostReads()
    held: dict[str, int] = {}
    step_under(dev, mode, args.steps, lambda: held.update(held_storage(dev.state)))
    found = sorted(set(mode.found))
    moved = rebound(held, held_storage(dev.state))
    return {"mode": "host-reads", "steps": args.steps, "host_reads": found, "calls": len(mode.found),
            "rebound": moved, "equal": not found and not moved}


def ops(args: argparse.Namespace) -> dict[str, Any]:
    dev = make_device_env(args.num_envs, args.seed, tuple(args.override), numpy_draws=False, graph=False)
    count = OpCount()
    step_under(dev, count, args.steps)
    per_step = {part: count.compute[part] / args.steps for part in (*PARTS, "outside the env's methods")
                if count.compute[part]}
    return {"mode": "ops", "num_envs": args.num_envs, "steps": args.steps, "override": list(args.override),
            "device": str(dev.device), "versions": versions(), "series_sha256": series_sha256(),
            "compute_ops_per_step": sum(count.compute.values()) / args.steps,
            "views_per_step": sum(count.views.values()) / args.steps, "compute_ops_per_step_by_part": per_step,
            "most_frequent_ops": [[name, n / args.steps] for name, n in count.by_op.most_common(12)],
            "equal": True}


def sensors(args: argparse.Namespace) -> dict[str, Any]:
    extra = (f"env.max_episode_seconds={args.episode_seconds}",)
    last = make_device_env(args.num_envs, args.seed, extra, numpy_draws=False, graph=False, acceleration_sensors=True)
    every = make_device_env(args.num_envs, args.seed, extra, numpy_draws=False, graph=False, sensors_every_substep=True,
                            acceleration_sensors=True)
    if args.broken_sensors:  # negative control: no sensors in any substep, the last one included
        sim = last.sim

        def quiet_step(substeps: int) -> None:
            for _ in range(substeps):
                sim._mjw.step(sim._inner_substep_model, sim._data)  # noqa: SLF001

        sim.step = quiet_step
    compared = step_side_by_side(last, every, args.steps)
    launches = compared.pop("launches")
    return {"mode": "sensors", "num_envs": args.num_envs, "steps": args.steps, "device": str(last.device),
            "versions": versions(), "series_sha256": series_sha256(), "broken_sensors": bool(args.broken_sensors),
            **compared, "warp_launches_per_step": {"last_substep": launches[0], "every_substep": launches[1]},
            "equal": not compared["first_difference_step"]}


#: What only the acceleration stage of the sensors writes (its sensors' slots aside): the post-constraint RNE's
#: arrays, which the next substep's ``forward`` computes again before any stage reads them.
ACCELERATION_STAGE_ARRAYS = frozenset({"cacc", "cfrc_int", "cfrc_ext"})


def sensor_stages(args: argparse.Namespace) -> dict[str, Any]:
    """Two device envs with the product's form and the same torch draws and actions, one computing every sensor
    stage in the last substep (``acceleration_sensors=True``), one without the acceleration stage (the default):
    after every step the env outputs, every sensor slot but the acceleration stage's, and every MuJoCo Warp array
    but ``ACCELERATION_STAGE_ARRAYS`` must be bitwise equal (``step_side_by_side``)."""
    extra = (f"env.max_episode_seconds={args.episode_seconds}",)
    form = dict(numpy_draws=False, graph=False, draws_ahead=True, reset_only_when_done=True)
    every = make_device_env(args.num_envs, args.seed, extra, acceleration_sensors=True, **form)
    skipped = make_device_env(args.num_envs, args.seed, extra, **form)
    sim = skipped.sim
    if args.sensors_after_integration:  # the control: the position and velocity sensors of the integrated state
        mjw = sim._mjw  # noqa: SLF001

        def after_integration() -> None:
            mjw.step(sim._inner_substep_model, sim._data)  # noqa: SLF001
            sim.forward_rows(torch.ones(skipped.num_envs, dtype=torch.bool, device=skipped.device))

        sim._step_without_acceleration_sensors = after_integration  # noqa: SLF001
    uncomputed = sorted(sim.sensor_slots.uncomputed)
    computed = torch.ones(sim.sensordata.shape[1], dtype=torch.bool, device=sim.sensordata.device)
    for name in uncomputed:
        start, dim = dict.__getitem__(sim.sensor_slots, name)  # the slot itself, past the refusal
        computed[start:start + dim] = False
    compared = step_side_by_side(every, skipped, args.steps, sensor_columns=computed)
    launches = compared.pop("launches")
    differ, done_rows = compared["first_difference_step"], compared["done_rows"]
    reading = None
    if uncomputed:
        try:
            sim.sensor(uncomputed[0])
        except ValueError as exc:
            reading = str(exc)
    holds = set(differ) <= ACCELERATION_STAGE_ARRAYS and done_rows > 0 and bool(uncomputed) and reading is not None
    return {"mode": "sensor-stages", "num_envs": args.num_envs, "steps": args.steps, "device": str(every.device),
            "versions": versions(), "series_sha256": series_sha256(),
            "sensors_after_integration_control": bool(args.sensors_after_integration),
            "forms": {"every_stage": every.describe()["sensors"], "default": skipped.describe()["sensors"]},
            "acceleration_stage_sensors": uncomputed, "reading_one": reading, **compared,
            "exempt": sorted(ACCELERATION_STAGE_ARRAYS),
            "warp_launches_per_step": {"every_stage": launches[0], "default": launches[1]},
            "holds": holds, "equal": holds}


def draws_ahead(args: argparse.Namespace) -> dict[str, Any]:
    extra = (f"env.max_episode_seconds={args.episode_seconds}",)
    ahead = make_device_env(args.num_envs, args.seed, extra, numpy_draws=False, graph=False, draws_ahead=True)
    in_step = make_device_env(args.num_envs, args.seed, extra, numpy_draws=False, graph=False)
    if args.broken_draw_order:  # negative control: the reset's draws taken before the observation noise
        from flashsac_runtime.envs.g1_walk import _StepDraws

        def reordered() -> Any:
            rows = ahead._all_rows  # noqa: SLF001
            command, reset = ahead._draw_command(rows), ahead._draw_reset(rows)  # noqa: SLF001
            return _StepDraws(command, ahead._draw_noise(rows), reset, ahead._draw_noise(rows))  # noqa: SLF001

        ahead._draw_step = reordered  # noqa: SLF001
    if args.draws_in_step_graph:  # negative control: the next step's draws taken inside the step's graph
        body, draw_next = ahead._step_body, ahead._draw_next  # noqa: SLF001

        def body_drawing() -> None:
            draw_next()
            body()

        ahead._step_body, ahead._draw_next = body_drawing, lambda: None  # noqa: SLF001
    compared = step_side_by_side(ahead, in_step, args.steps)
    compared.pop("launches")
    count = OpCount()  # where the step's torch work is, counted after the comparison (it draws)
    mark_step_graph(ahead, count)
    step_under(ahead, count, 1)
    from flashsac_runtime.envs import G1WalkDeviceEnv
    from flashsac_runtime.envs.draws import NumpyDraws

    try:  # UniLab's NumPy draws are sized by the rows, which are not known ahead: refused before anything is built
        G1WalkDeviceEnv(in_step.host_env, NumpyDraws(np.random.default_rng(args.seed), in_step.device), graph=False,
                        draws_ahead=True)
        refused = None
    except ValueError as exc:
        refused = str(exc)
    parts = {part: count.compute[part] for part in DRAW_PARTS if count.compute[part]}
    return {"mode": "draws-ahead", "num_envs": args.num_envs, "steps": args.steps, "device": str(ahead.device),
            "versions": versions(), "series_sha256": series_sha256(), "broken_draw_order": bool(args.broken_draw_order),
            "draws_in_step_graph_control": bool(args.draws_in_step_graph),
            **compared, "compute_ops_per_step": sum(count.compute.values()),
            "compute_ops_drawn_ahead_per_step": sum(parts.values()), "drawn_ahead_by_part": parts,
            "draw_ops_in_step_graph": count.draws_in_step_graph,
            "numpy_draws_refused": refused,
            "equal": not compared["first_difference_step"], "holds": not compared["first_difference_step"]
            and not count.draws_in_step_graph}


def reset_when_done(args: argparse.Namespace) -> dict[str, Any]:
    extra = (f"env.max_episode_seconds={args.episode_seconds}",)
    when_done = make_device_env(args.num_envs, args.seed, extra, numpy_draws=False, graph=False, draws_ahead=True,
                                reset_only_when_done=True)
    every = make_device_env(args.num_envs, args.seed, extra, numpy_draws=False, graph=False, draws_ahead=True)
    if args.reset_never:  # negative control: the condition is never set, so no row is ever reset
        sim, when_any = when_done.sim, when_done.sim.when_any
        sim.when_any = lambda rows, body: when_any(torch.zeros_like(rows), body)
    with WarpLaunches(every) as kinematics:  # what the reset's kinematics pass writes (before any draw or reset)
        every.sim.forward_rows(torch.zeros(every.num_envs, dtype=torch.bool, device=every.device))
    exempt = frozenset(kinematics.written - {"sensordata"})  # the reset puts the sensors of other rows back
    compared = step_side_by_side(when_done, every, args.steps, idle_exempt=exempt)
    launches = compared.pop("launches")
    holds = not compared["first_difference_step"] and compared["idle_steps"] > 0 and compared["done_rows"] > 0
    return {"mode": "reset-when-done", "num_envs": args.num_envs, "steps": args.steps, "device": str(every.device),
            "versions": versions(), "series_sha256": series_sha256(), "reset_never_control": bool(args.reset_never),
            "kinematics_pass_writes": sorted(exempt), **compared,
            "warp_launches_per_step": {"when_done": launches[0], "every_step": launches[1]},
            "equal": not compared["first_difference_step"], "holds": holds}


def failed_capture(args: argparse.Namespace) -> dict[str, Any]:
    extra = (f"env.max_episode_seconds={args.episode_seconds}",)
    failing = make_device_env(args.num_envs, args.seed, extra, numpy_draws=False, graph=False)
    twin = make_device_env(args.num_envs, args.seed, extra, numpy_draws=False, graph=False)

    def move(generators: tuple[torch.Generator, ...]) -> None:
        for generator in generators:
            torch.rand(16, generator=generator)

    def capture(body: Any, generators: tuple[torch.Generator, ...], **kwargs: Any) -> Any:
        move(generators)
        raise RuntimeError("the capture failed (on purpose)")

    if args.no_restore:  # the control: the generator moved, and nothing put it back
        move((failing.draws.generator,))
    else:
        failing.sim.capture = capture
        failing._capture()  # noqa: SLF001 - what the first reset runs on CUDA
    compared = step_side_by_side(failing, twin, args.steps)
    compared.pop("launches")
    return {"mode": "failed-capture", "num_envs": args.num_envs, "steps": args.steps, "device": str(failing.device),
            "no_restore_control": bool(args.no_restore), "graph_status": failing.graph_status, **compared,
            "equal": not compared["first_difference_step"]}


def _delayed(function: Any, seconds: float) -> Any:
    def slow(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        time.sleep(seconds)
        return result

    return slow


def step_split(args: argparse.Namespace) -> dict[str, Any]:
    dev = make_device_env(args.num_envs, args.seed, (f"env.max_episode_seconds={args.episode_seconds}",),
                          numpy_draws=False, draws_ahead=True, reset_only_when_done=True)
    dev.reset()
    stamps = dev.step_stamps
    # Where each part's delay goes: the physics' substeps, the terms' work after them, the reset's conditional.
    where = {"env_physics": (dev.sim, "step"), "env_terms": (dev, "_after_physics"),
             "env_reset": (dev.sim, "when_any")}
    if args.misplaced_stamp:
        misplace_physics_stamp(dev)
    actions = seeded_actions(dev, args.steps * (len(where) + 1) + 1)
    dev.step(actions[0])  # kernels built at their first launch (an empty Warp cache) fall outside the blocks
    blocks: dict[str, dict[str, float]] = {}
    reads: list[int] = []
    last, t = stamps.split_ms(stamps.ring.tolist(), 0)[1], 1
    for block in ("none", *where):
        owner, name = where.get(block, (None, None))
        if owner is not None:  # on the class, as the env's and the physics' methods are looked up
            original = getattr(type(owner), name)
            setattr(type(owner), name, _delayed(original, STEP_SPLIT_DELAY_MS / 1000.0))
        steps: list[dict[str, float]] = []
        for _ in range(args.steps):
            dev.step(actions[t])
            t += 1
            split, through = stamps.split_ms(stamps.ring.tolist(), last)
            reads.append(through - last)
            steps.append(split)
            last = through
        if owner is not None:
            setattr(type(owner), name, original)
        # the block's fastest step per part: another process on the machine only ever adds time to a step, so the
        # fastest one is the least disturbed
        blocks[block] = {part: min(step[part] for step in steps) for part in steps[0]}
    base = blocks["none"]
    grew = {block: {part: blocks[block][part] - base[part] for part in base} for block in where}
    cuda = cuda_build(type(stamps).__module__)
    holds = cuda["cubin"] and cuda["reads_globaltimer"] and reads == [1] * len(reads) and all(
        (grown[part] >= 0.8 * STEP_SPLIT_DELAY_MS) if part == block else (abs(grown[part]) < 0.3 * STEP_SPLIT_DELAY_MS)
        for block, grown in grew.items() for part in grown)
    return {"mode": "step-split", "num_envs": args.num_envs, "steps_per_block": args.steps,
            "device": str(dev.device), "form": dev.describe(), "delay_ms": STEP_SPLIT_DELAY_MS,
            "misplaced_stamp_control": bool(args.misplaced_stamp), "parts": list(base), "steps_read": reads,
            "split_ms": blocks, "grew_ms": grew, "cuda_build": cuda, "holds": holds, "equal": holds}


def cuda_build(module: str) -> dict[str, Any]:
    """The Warp module ``module`` built for an H100/H200 (sm_90 cubin) by Warp's own compiler, no GPU needed: the
    CUDA side of a kernel that only a GPU runs (the step stamps' read of the device clock)."""
    import importlib
    import tempfile

    import warp as wp

    importlib.import_module(module)  # its kernels are Warp's once the Python module has run
    with tempfile.TemporaryDirectory() as folder:
        wp.compile_aot_module(module, arch=90, module_dir=folder, use_ptx=False)
        cubins = [path.read_bytes()[:4] == b"\x7fELF" for path in Path(folder).glob("*.sm90.cubin")]
        source = "".join(path.read_text() for path in Path(folder).glob("*.cu"))
    return {"module": module, "arch": 90, "cubin": cubins == [True], "reads_globaltimer": "%%globaltimer" in source}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("parity", "distribution", "host-reads", "ops", "sensors", "draws-ahead",
                                           "reset-when-done", "failed-capture", "step-split", "sensor-stages"),
                        required=True)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--episode-seconds", type=float, default=1.0,
                        help="parity, sensors, draws-ahead: the episode length (time-outs within the run; the tree's "
                             "is 20 s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--action-seed", type=int, default=7)
    parser.add_argument("--perturb-reward", default=None)
    parser.add_argument("--perturb-kp", action="store_true")
    parser.add_argument("--override", action="append", default=[],
                        help="distribution, ops: a Hydra override of the env")
    parser.add_argument("--broken-index", action="store_true", help="host-reads: the negative control")
    parser.add_argument("--broken-sensors", action="store_true", help="sensors: the negative control")
    parser.add_argument("--broken-draw-order", action="store_true", help="draws-ahead: a negative control")
    parser.add_argument("--draws-in-step-graph", action="store_true", help="draws-ahead: a negative control")
    parser.add_argument("--draws-ahead", action="store_true", help="host-reads: the env taking its draws ahead")
    parser.add_argument("--no-restore", action="store_true", help="failed-capture: the negative control")
    parser.add_argument("--reset-never", action="store_true", help="reset-when-done: the negative control")
    parser.add_argument("--misplaced-stamp", action="store_true", help="step-split: the negative control")
    parser.add_argument("--sensors-after-integration", action="store_true",
                        help="sensor-stages: the negative control")
    args = parser.parse_args(argv)
    try:
        result = {"parity": parity, "distribution": distribution, "host-reads": host_reads, "ops": ops,
                  "sensors": sensors, "draws-ahead": draws_ahead, "reset-when-done": reset_when_done,
                  "failed-capture": failed_capture, "step-split": step_split, "sensor-stages": sensor_stages}[args.mode](args)
    except ValueError as exc:  # a task the device env refuses: its one-line reason
        print(f"device_env_check: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0 if result.get("holds", result["equal"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
