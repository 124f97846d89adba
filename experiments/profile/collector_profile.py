#!/usr/bin/env python3
"""Step the real G1 Walk Flat MuJoCo env on the CPU with a fixed seeded action sequence.

The env is built the way the FlashSAC collector builds it: Hydra composes the tree's
`conf/flashsac/config.yaml` (task `g1_walk_flat/mujoco`), `build_offpolicy_env_cfg_override` turns it into the
env override, and `make_registry_env` (the collector's `env_factory`) constructs the env. The tree under test is
whatever `unilab` is importable (run with `PYTHONPATH=<tree>/src`, from the tree root: the scene path is
root-relative). Two modes:

  profile:    per-phase times from the env's own `info["timing"]` (`step_core_ms`, `update_state_ms`,
              `reset_done_ms`, ...) over the timed steps, written as JSON.
  trajectory: qpos, qvel, every observation group, rewards, terminated/truncated of every step (after the
              autoreset, as the collector sees them) written to an .npz for a bitwise comparison of two trees.

Actions: uniform in [-1, 1] from `numpy.random.default_rng(action_seed)`, drawn per step, so both sides of a
comparison see the same sequence; random joint targets make the G1 fall, so episodes end and envs reset.

Called by hand for the profiles in results/ (``--mode profile``), by ``tests/test_collector_trajectory.py``
and ``tests/test_mjwarp_row_reset.py`` (``--mode trajectory``); its ``build_env`` is the one env builder of
``collector_setconst_probe.py``, the device-env and MJWarp evidence (``evidence/``) and the device collector's
test harness.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def build_env(num_envs: int, seed: int, task: str = "g1_walk_flat/mujoco", extra: tuple[str, ...] = ()) -> Any:
    """The collector's env: Hydra config of the tree in the working directory, the registry env factory.

    ``task`` picks the physics owner (``g1_walk_flat/mjwarp``: MuJoCo Warp on the GPU); ``extra`` are further
    Hydra overrides (diagnostics only, e.g. a randomization term switched off to price it).
    """
    from hydra import compose, initialize_config_dir

    from unilab.base.env_factory import make_registry_env
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    conf_dir = Path("src/unilab/conf/flashsac").resolve()
    overrides = [f"task={task}", f"algo.num_envs={num_envs}", f"algo.seed={seed}", *extra]
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    env_cfg_override = build_offpolicy_env_cfg_override("flashsac", cfg)
    np.random.seed(seed)  # the collector's apply_training_seed: init_state draws episode offsets from it
    return make_registry_env(str(cfg.training.task_name), str(cfg.training.sim_backend), num_envs,
                             {**(env_cfg_override or {}), "seed": seed})


def action_sequence(num_envs: int, action_dim: int, steps: int, action_seed: int) -> np.ndarray:
    rng = np.random.default_rng(action_seed)
    return rng.uniform(-1.0, 1.0, size=(steps, num_envs, action_dim)).astype(np.float32)


def action_dim_of(env: Any) -> int:
    return int(env.action_manager.total_action_dim)


def mjwarp_reset_route(env: Any) -> str | None:
    """How the mjwarp adapter commits resets: "rows" (unisim 0003) or "whole-array"; None on MuJoCo."""
    backend = env._backend  # noqa: SLF001 - the route is the backend's own state
    if type(backend).__name__ != "MjwarpBackend":
        return None
    return "rows" if getattr(backend, "_row_reset_enabled", False) else "whole-array"


def run_profile(env: Any, actions: np.ndarray, warmup: int) -> dict[str, Any]:
    """Step through `actions`; per-phase mean/median over the steps after `warmup`."""
    samples: dict[str, list[float]] = {}
    resets = 0
    t0 = time.perf_counter()
    for i, a in enumerate(actions):
        if i == warmup:
            t0 = time.perf_counter()
        state = env.step(a)
        if i < warmup:
            continue
        timing = state.info["timing"]
        resets += int(timing.get("reset_done_count", 0.0))
        for key, value in timing.items():
            if isinstance(value, float):
                samples.setdefault(key, []).append(value)
    wall = time.perf_counter() - t0
    timed = len(actions) - warmup
    return {
        "timed_steps": timed,
        "wall_ms_per_step": wall * 1000.0 / timed,
        "resets": resets,
        "mean_ms": {k: float(np.mean(v)) for k, v in sorted(samples.items())},
        "median_ms": {k: float(np.median(v)) for k, v in sorted(samples.items())},
    }


def run_trajectory(env: Any, actions: np.ndarray) -> dict[str, np.ndarray]:
    """Every step's physics state, observations, rewards and dones, copied out after the autoreset."""
    rec: dict[str, list[np.ndarray]] = {}

    def put(key: str, value: np.ndarray) -> None:
        rec.setdefault(key, []).append(np.array(value, copy=True))

    for a in actions:
        state = env.step(a)
        phys = env._backend.get_state(("qpos", "qvel"))  # noqa: SLF001 - the backend is the physics truth
        put("qpos", phys["qpos"])
        put("qvel", phys["qvel"])
        for group, value in state.obs.items():
            put(f"obs/{group}", value)
        reset_rows = state.info["_final_observation"][:, None]
        final = state.final_observation or {}
        for group, value in state.obs.items():  # rows of envs not reset this step are zero
            put(f"final_obs/{group}", np.where(reset_rows, final.get(group, np.zeros_like(value)), 0).astype(value.dtype))
        put("reward", state.reward)
        put("terminated", state.terminated)
        put("truncated", state.truncated)
        put("reset_mask", state.info["_final_observation"])
        put("steps", state.info["steps"])
    return {k: np.stack(v) for k, v in rec.items()}


def compare_trajectories(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray]) -> list[str]:
    """Every way `candidate` differs from `reference` bitwise (keys, shape, dtype, bytes); empty when equal.

    A differing array is reported with its first differing step and the number of differing elements.
    """
    problems = [f"{k}: missing" for k in sorted(set(reference) - set(candidate))]
    problems += [f"{k}: unexpected" for k in sorted(set(candidate) - set(reference))]
    for key in sorted(set(reference) & set(candidate)):
        a, b = reference[key], candidate[key]
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"{key}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
        elif a.tobytes() != b.tobytes():
            differs = (a.view(np.uint8) != b.view(np.uint8)).reshape(a.shape[0], -1)
            steps = np.flatnonzero(differs.any(axis=1))
            problems.append(f"{key}: {int(differs.sum())} differing bytes, first at step {int(steps[0])}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("profile", "trajectory"), required=True)
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20, help="profile: untimed first steps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--action-seed", type=int, default=7)
    p.add_argument("--perturb-step", type=int, default=-1,
                   help="trajectory: negate env 0's first action component at this step (a negative control)")
    p.add_argument("--task", default="g1_walk_flat/mujoco",
                   help="the task's physics owner (g1_walk_flat/mujoco, or g1_walk_flat/mjwarp on a GPU)")
    p.add_argument("--override", action="append", default=[], help="a further Hydra override (diagnostics)")
    p.add_argument("--output", type=Path, required=True)
    args = p.parse_args(argv)
    if args.num_envs <= 0 or args.steps <= 0 or not 0 <= args.warmup < args.steps:
        print("collector_profile: --num-envs and --steps must be positive and 0 <= --warmup < --steps",
              file=sys.stderr)
        return 2
    if not Path("src/unilab/conf/flashsac/config.yaml").is_file():
        print(f"collector_profile: run from a UniLab tree root (no src/unilab/conf/flashsac/config.yaml in "
              f"{os.getcwd()})", file=sys.stderr)
        return 2

    env = build_env(args.num_envs, args.seed, args.task, tuple(args.override))
    actions = action_sequence(args.num_envs, action_dim_of(env), args.steps, args.action_seed)
    if 0 <= args.perturb_step < args.steps:
        actions[args.perturb_step, 0, 0] = -actions[args.perturb_step, 0, 0]
    env.init_state()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    if args.mode == "profile":
        result = run_profile(env, actions, args.warmup)
        result.update(num_envs=args.num_envs, steps=args.steps, warmup=args.warmup, seed=args.seed, task=args.task,
                      overrides=args.override, mjwarp_reset_route=mjwarp_reset_route(env),
                      unilab_file=__import__("unilab").__file__)
        args.output.write_text(json.dumps(result, indent=1) + "\n")
    else:
        np.savez(args.output, **run_trajectory(env, actions))
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
