"""Go2 Joystick Flat's device env against UniLab's own Go2 env on MuJoCo Warp, fed the same draws; its own draws
against the config.

Run from the applied tree's root (``work/unilab-1.3.2``) with the overlay first on ``PYTHONPATH``; on the CPU with
``UNISIM_MJWARP_ALLOW_CPU=1`` (Warp's CPU device). Both envs are built from ``task=go2_joystick_flat/mjwarp`` with
the same overrides and seed; the device env takes UniLab's NumPy draws (``NumpyDraws`` seeded like ``env.rng``) and
both step the same seeded random actions. Each step compares the observations of both groups, the final
observations of the done rows, qpos and qvel, terminations and time-outs bitwise and the rewards within
``REWARD_ATOL`` (the G1 check's), and after every step the randomized model rows (mass, CoM, gravity, gains).

``--push-interval S`` sets the interval push's period (UniLab's is 15 s, past a short run) so that pushes happen;
``--episode-seconds`` makes episodes end inside the run. Controls: ``--perturb-kp`` widens the device env's kp range
by 0.05 on both ends (the reset's gains, then the physics, must differ); ``--skip-root-refresh`` leaves the root's
tracked-body sensors a substep behind. The JSON holds the largest difference per quantity, the first step each
exceeded its limit, the counts of terminations, time-outs and pushes, and ``equal``.

``--mode distribution``: the device env with its own torch draws (``TorchDraws``, as in training; the step eager, so
that each push can be read), ``--num-envs`` rows, reset and stepped ``--steps`` times with seeded random actions.
Every randomized quantity is read back from what the env wrote and checked against the ranges of the tree's config
(composed with the run's episode and push timing, without the positional overrides) by
``device_env_distribution``'s checks: the reset's root offsets, orientation and linear and angular velocities
(``reset_root_state_uniform``), kp and kd (``pd_gains``), the base's mass, centre of mass and gravity (model rows),
the velocity command and its resampling time after the reset of every row, and each push's linear velocity kick.
A positional override changes the env's config only (e.g. a wrong kp range): the check must fail. The JSON holds
every check (range, samples, min, max, mean, each criterion), ``failed`` and ``equal``.

Exit 0 when equal, 1 when not, 2 when the device env refuses the config (its one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_env_compare import REWARD_ATOL, SideBySideRecord, max_abs, record_step_outputs  # noqa: E402
from device_env_distribution import (  # noqa: E402
    com_checks, command_checks, gravity_checks, mass_checks, pd_gains_checks, push_checks, root_state_checks)

TASK = "go2_joystick_flat/mjwarp"


def compose_cfg(num_envs: int, seed: int, extra: tuple[str, ...]) -> Any:
    """The tree's Go2 Joystick Flat config on MuJoCo Warp, as UniLab's command line composes it with ``extra``."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path("src/unilab/conf/flashsac").resolve()), version_base="1.3"):
        return compose(config_name="config", overrides=[f"task={TASK}", f"algo.num_envs={num_envs}",
                                                         f"algo.seed={seed}", *extra])


def env_override(num_envs: int, seed: int, extra: tuple[str, ...]) -> dict[str, Any] | None:
    """The env override UniLab's off-policy entry point builds from the composed config (what the collector gets)."""
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    return build_offpolicy_env_cfg_override("flashsac", compose_cfg(num_envs, seed, extra))


def build(num_envs: int, seed: int, extra: tuple[str, ...]) -> tuple[Any, Any]:
    from flashsac_runtime.envs import make_go2_joystick_device_env
    from unilab.base.env_factory import make_registry_env

    override = env_override(num_envs, seed, extra)
    ref = make_registry_env("Go2JoystickFlat", "mjwarp", num_envs, {**(override or {}), "seed": seed})
    dev = make_go2_joystick_device_env(num_envs, torch.device("cpu"), seed, env_cfg_override=override,
                                       numpy_draws=True, graph=False, draws_ahead=False,
                                       reset_only_when_done=False, step_split=False)
    return ref, dev


def model_rows(env: Any) -> dict[str, np.ndarray]:
    import warp as wp

    model = env._backend._device_model  # noqa: SLF001
    return {"body_mass": wp.to_torch(model.body_mass).numpy().copy(),
            "body_ipos": wp.to_torch(model.body_ipos).numpy().copy(),
            "gravity": wp.to_torch(model.opt.gravity).numpy().copy(),
            "gainprm": wp.to_torch(model.actuator_gainprm).numpy()[:, :, :1].copy(),
            "biasprm": wp.to_torch(model.actuator_biasprm).numpy()[:, :, :3].copy()}


def distribution(args: argparse.Namespace, timing: tuple[str, ...]) -> dict[str, Any]:
    """The device env's own torch draws against the tree's ranges (``--mode distribution``)."""
    from flashsac_runtime.envs import make_go2_joystick_device_env

    env_cfg = compose_cfg(args.num_envs, args.seed, timing).env  # the tree's own ranges
    override = env_override(args.num_envs, args.seed, (*timing, *args.override))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = make_go2_joystick_device_env(args.num_envs, device, args.seed, env_cfg_override=override, graph=False)
    dev.reset()
    events = env_cfg.events
    checks = [*root_state_checks(dev, events.reset_root_state_uniform.params),
              *pd_gains_checks(dev, events.pd_gains.params),
              *mass_checks(dev, events.randomize_rigid_body_mass.params),
              *com_checks(dev, events.randomize_rigid_body_com.params),
              *gravity_checks(dev, events.randomize_physics_scene_gravity.params),
              *command_checks(dev, env_cfg.commands.twist)]
    # Each push, read where it happens: the root's linear velocity before and after the env's step events.
    cols = dev._root_qvel_cols[0:3]  # noqa: SLF001
    apply, kicks = dev._apply_events, []  # noqa: SLF001

    def recorded(drawn: Any) -> None:
        before = dev.sim.qvel[:, cols].clone()
        apply(drawn)
        change = dev.sim.qvel[:, cols].double() - before.double()
        if bool((change != 0).any()):
            kicks.append(change.cpu().numpy())

    dev._apply_events = recorded  # noqa: SLF001
    seeded = torch.Generator().manual_seed(args.action_seed)
    actions = torch.rand((args.steps, args.num_envs, dev.action_dim), generator=seeded)
    for t in range(args.steps):
        dev.step((actions[t] * 2 - 1).to(dev.device))
    checks += push_checks(np.concatenate(kicks) if kicks else np.zeros((0, 3)),
                          events.push_by_setting_velocity.params)
    return {"task": TASK, "mode": "distribution", "num_envs": args.num_envs, "steps": args.steps,
            "pushes": len(kicks), "override": list(args.override), "checks": checks,
            "failed": [c["name"] for c in checks if not c["ok"]], "equal": all(c["ok"] for c in checks)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("parity", "distribution"), default="parity")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--action-seed", type=int, default=11)
    parser.add_argument("--episode-seconds", type=float, default=0.5)
    parser.add_argument("--push-interval", type=float, default=0.3)
    parser.add_argument("--perturb-kp", action="store_true")
    parser.add_argument("--skip-root-refresh", action="store_true")
    parser.add_argument("override", nargs="*", help="further Hydra overrides (distribution: of the env only)")
    args = parser.parse_args(argv)
    timing = (f"env.max_episode_seconds={args.episode_seconds}",
              f"env.events.push_by_setting_velocity.interval_range_s=[{args.push_interval},{args.push_interval}]")
    try:
        if args.mode == "distribution":
            result = distribution(args, timing)
            print(json.dumps(result))
            return 0 if result["equal"] else 1
        ref, dev = build(args.num_envs, args.seed, (*timing, *args.override))
    except ValueError as exc:  # a term or event without a device form: the env's one line
        print(f"go2_device_env_check: {exc}", file=sys.stderr)
        return 2
    if args.perturb_kp:
        g = dev._gains  # noqa: SLF001 - negative control
        g._kp_range = (g._kp_range[0] - 0.05, g._kp_range[1] + 0.05)  # noqa: SLF001
    if args.skip_root_refresh:
        dev._after_substeps = lambda: None  # type: ignore[method-assign]  # noqa: SLF001 - negative control
    # The reference resets itself with UniLab's own draws; the device env from the same seed's NumPy draws.
    ref.init_state()
    out = dev.reset()
    actions = np.random.default_rng(args.action_seed).uniform(
        -1.0, 1.0, (args.steps, args.num_envs, dev.action_dim)).astype(np.float32)
    record = SideBySideRecord(("obs", "critic", "final_obs", "final_critic", "qpos", "qvel", "reward", "model"),
                              counts=("pushes",))
    counts = record.counts

    def compare_model(step: int) -> None:
        a, b = model_rows(ref), model_rows(dev.host_env)
        record(step, "model", max(max_abs(a[k], b[k]) for k in a))

    state = ref.state
    record(-1, "obs", max_abs(state.obs["obs"], out.policy_obs))
    record(-1, "critic", max_abs(state.obs["critic"], out.critic_obs))
    compare_model(-1)
    push_index = None
    events = ref.event_manager
    if "interval" in events._mode_term_names:  # noqa: SLF001
        push_index = list(events._mode_term_names["interval"]).index("push_by_setting_velocity")  # noqa: SLF001
    for t in range(args.steps):
        before = None if push_index is None else float(events._interval_term_time_left[push_index][0])  # noqa: SLF001
        state = ref.step(actions[t])
        out = dev.step(torch.from_numpy(actions[t]))
        if before is not None and float(events._interval_term_time_left[push_index][0]) > before:  # noqa: SLF001
            counts["pushes"] += 1
        record_step_outputs(record, t, state, out, dev.device)
        got = ref._backend.get_state(("qpos", "qvel"))  # noqa: SLF001
        record(t, "qpos", max_abs(got["qpos"], dev.sim.qpos))
        record(t, "qvel", max_abs(got["qvel"], dev.sim.qvel))
        record(t, "reward", max_abs(state.reward, out.reward), REWARD_ATOL)
        compare_model(t)
        record.dones(t, state, out)
    print(json.dumps(record.result(task=TASK, num_envs=args.num_envs, steps=args.steps)))
    return 0 if record.equal else 1


if __name__ == "__main__":
    sys.exit(main())
