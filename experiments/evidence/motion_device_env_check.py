"""G1 motion tracking's device env against UniLab's own motion tracking env on MuJoCo Warp, fed the same draws.

Run from the applied tree's root (``work/unilab-1.3.2``) with the overlay first on ``PYTHONPATH`` and a motion clip
in the tree (``scripts/offline/motion_clip.py`` writes the synthetic one); on the CPU with
``UNISIM_MJWARP_ALLOW_CPU=1`` (Warp's CPU device). Both envs are built from ``task=g1_motion_tracking/mjwarp`` with
the same overrides and seed; the device env takes UniLab's NumPy draws (``NumpyDraws`` seeded like ``env.rng``) and
both step the same seeded random actions. Each step compares the observations of both groups, the final
observations of the done rows, qpos and qvel, terminations and time-outs bitwise and the rewards within
``REWARD_ATOL`` (the G1 check's), and the motion command's state: each row's frame, and the adaptive sampler's
failure statistics.

``--episode-seconds`` makes episodes end inside the run. Controls: ``--perturb-pose`` widens the device env's root
pose range by 0.01 on both ends (its resets' root states, then the physics, must differ); ``--skip-body-refresh``
leaves the tracked bodies' sensors a substep behind (the rewards must differ).

``--host-reads``: instead, the device env as training builds it (its own torch draws, draws ahead, the reset only
on a step with a done row) steps ``--steps`` times after a warm-up step under a torch function mode that records
every host read a CUDA capture forbids (``device_env_counts.HostReads``); none may occur. And every tensor of the
env's state must keep its storage across the steps (``device_env_counts.held_storage``): the step's CUDA graph
reads the addresses of its capture. Controls: ``--broken-index`` reads the clip's end through a 0-d tensor index
in the clip-end termination; ``--rebind-state`` stores the command's robot and relative state by binding new
tensors.

Prints one JSON line: the largest difference per quantity, the first step each exceeded its limit, the counts of
terminations, time-outs and clip ends, the finished episodes' lengths (``episodes``: how many, their mean, how many
ended after one step), and ``equal``. Exit 0 when equal, 1 when not, 2 when the device env refuses
the config (its one line on stderr).
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
from device_env_build import step_under  # noqa: E402
from device_env_compare import REWARD_ATOL, SideBySideRecord, max_abs, record_step_outputs  # noqa: E402
from device_env_controls import rebind_motion_state  # noqa: E402
from device_env_counts import HostReads, held_storage, rebound  # noqa: E402

TASK = "g1_motion_tracking/mjwarp"


def build(num_envs: int, seed: int, extra: tuple[str, ...]) -> tuple[Any, Any]:
    from hydra import compose, initialize_config_dir

    from flashsac_runtime.envs import make_g1_motion_tracking_device_env
    from unilab.base.env_factory import make_registry_env
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    with initialize_config_dir(config_dir=str(Path("src/unilab/conf/flashsac").resolve()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"task={TASK}", f"algo.num_envs={num_envs}",
                                                        f"algo.seed={seed}", *extra])
    override = build_offpolicy_env_cfg_override("flashsac", cfg)
    ref = make_registry_env("G1MotionTrackingSAC", "mjwarp", num_envs, {**(override or {}), "seed": seed})
    dev = make_g1_motion_tracking_device_env(num_envs, torch.device("cpu"), seed, env_cfg_override=override,
                                             numpy_draws=True, graph=False, draws_ahead=False,
                                             reset_only_when_done=False, step_split=False)
    return ref, dev


def host_reads(num_envs: int, seed: int, steps: int, extra: tuple[str, ...], broken_index: bool,
               rebind_state: bool = False) -> dict[str, Any]:
    """The host reads of the training form's steps and the state's tensors whose storage they changed (neither may
    occur), with a control if asked."""
    from hydra import compose, initialize_config_dir

    from flashsac_runtime.envs import make_g1_motion_tracking_device_env
    from flashsac_runtime.envs.terms import motion_tracking
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    with initialize_config_dir(config_dir=str(Path("src/unilab/conf/flashsac").resolve()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"task={TASK}", f"algo.num_envs={num_envs}",
                                                        f"algo.seed={seed}", *extra])
    override = build_offpolicy_env_cfg_override("flashsac", cfg)
    dev = make_g1_motion_tracking_device_env(num_envs, torch.device("cpu"), seed, env_cfg_override=override,
                                             graph=False)
    if broken_index:
        def clip_end(s: Any, command_name: str) -> torch.Tensor:
            del command_name
            m = s.motion
            return m.time_steps >= m.clip_end_frames[m.time_steps.argmax()]  # a 0-d tensor index: a host read

        dev._terminations = [(clip_end if twin is motion_tracking.motion_clip_end else twin, params, time_out)  # noqa: SLF001
                             for twin, params, time_out in dev._terminations]  # noqa: SLF001
    if rebind_state:
        rebind_motion_state()
    mode = HostReads()
    held: dict[str, int] = {}
    step_under(dev, mode, steps, lambda: held.update(held_storage(dev.state)))
    found = sorted(set(mode.found))
    moved = rebound(held, held_storage(dev.state))
    return {"task": TASK, "mode": "host-reads", "steps": steps, "describe": dev.describe(), "host_reads": found,
            "calls": len(mode.found), "rebound": moved, "equal": not found and not moved}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--action-seed", type=int, default=11)
    parser.add_argument("--episode-seconds", type=float, default=0.6)
    parser.add_argument("--perturb-pose", action="store_true")
    parser.add_argument("--skip-body-refresh", action="store_true")
    parser.add_argument("--host-reads", action="store_true")
    parser.add_argument("--broken-index", action="store_true", help="--host-reads: a negative control")
    parser.add_argument("--rebind-state", action="store_true", help="--host-reads: a negative control")
    parser.add_argument("override", nargs="*", help="further Hydra overrides")
    args = parser.parse_args(argv)
    extra = (f"env.max_episode_seconds={args.episode_seconds}", *args.override)
    if args.host_reads:
        result = host_reads(args.num_envs, args.seed, args.steps, extra, args.broken_index, args.rebind_state)
        print(json.dumps(result))
        return 0 if result["equal"] else 1
    try:
        ref, dev = build(args.num_envs, args.seed, extra)
    except ValueError as exc:  # a term, event or command without a device form: the env's one line
        print(f"motion_device_env_check: {exc}", file=sys.stderr)
        return 2
    if args.perturb_pose:
        dev._pose_range = dev._pose_range + np.array([-0.01, 0.01])  # noqa: SLF001 - negative control
    if args.skip_body_refresh:
        from flashsac_runtime.envs.terms.motion_tracking import read_robot_bodies

        # negative control: the tracked bodies' sensors left as the last substep computed them
        dev._after_substeps = lambda: read_robot_bodies(dev.state)  # type: ignore[method-assign]  # noqa: SLF001
    ref.init_state()
    out = dev.reset()
    command = ref.command_manager.get_term("motion")
    motion = dev.state.motion
    actions = np.random.default_rng(args.action_seed).uniform(
        -1.0, 1.0, (args.steps, args.num_envs, dev.action_dim)).astype(np.float32)
    record = SideBySideRecord(("obs", "critic", "final_obs", "final_critic", "qpos", "qvel", "reward", "frames",
                               "bin_failed"), counts=("clip_ends", "frames_reached"))
    counts = record.counts

    def compare_command(step: int) -> None:
        record(step, "frames", max_abs(command.time_steps, motion.time_steps))
        record(step, "bin_failed", max_abs(command.sampler.bin_failed_count, dev._bin_failed))  # noqa: SLF001

    state = ref.state
    record(-1, "obs", max_abs(state.obs["obs"], out.policy_obs))
    record(-1, "critic", max_abs(state.obs["critic"], out.critic_obs))
    compare_command(-1)
    running = torch.zeros(args.num_envs, dtype=torch.int64)
    lengths: list[int] = []  # the device env's finished episodes, in steps (UniLab's env ends the same: compared)
    for t in range(args.steps):
        clip_end = command.time_steps >= command.sampler.current_clip_end_frames
        state = ref.step(actions[t])
        out = dev.step(torch.from_numpy(actions[t]))
        running += 1
        ended = (out.terminated | out.truncated).cpu()
        lengths += running[ended].tolist()
        running[ended] = 0
        record_step_outputs(record, t, state, out, dev.device)
        got = ref._backend.get_state(("qpos", "qvel"))  # noqa: SLF001
        record(t, "qpos", max_abs(got["qpos"], dev.sim.qpos))
        record(t, "qvel", max_abs(got["qvel"], dev.sim.qvel))
        record(t, "reward", max_abs(state.reward, out.reward), REWARD_ATOL)
        compare_command(t)
        record.dones(t, state, out)
        counts["clip_ends"] += int(clip_end.sum())
        counts["frames_reached"] = max(counts["frames_reached"], int(command.time_steps.max()))
    episodes = {"finished": len(lengths), "mean_length": sum(lengths) / len(lengths) if lengths else None,
                "of_length_1": lengths.count(1), "shortest": min(lengths, default=None)}
    print(json.dumps(record.result(task=TASK, num_envs=args.num_envs, steps=args.steps, episodes=episodes)))
    return 0 if record.equal else 1


if __name__ == "__main__":
    sys.exit(main())
