#!/usr/bin/env python3
"""One-step agreement of MuJoCo Warp with CPU MuJoCo on identical G1 states and controls.

MJWarp is another implementation of the same MJCF physics (float32, its own contact and solver kernels), so a
run on it is not bitwise equal to CPU MuJoCo; what must hold is that one control step from the same state with
the same actuator targets lands in the same place, within a tolerance small against the step's own motion.

States: a source G1 Walk Flat env on CPU MuJoCo (the collector's env, Hydra config of the tree in the working
directory) is driven by seeded random actions with autoreset; every ``--every`` steps the state before the step
(qpos, qvel) and the actuator targets the step applied are recorded: standing, falling, on the ground, just
reset. Comparison: two fresh backends of the same task (``g1_walk_flat/mujoco`` and ``g1_walk_flat/mjwarp``,
never reset through the env, so both keep the model's default gains) get the same recorded state in every env
row (``set_state``) and the same targets, and take one control step (the task's substeps); their qpos and qvel
are compared.

Metric per env row: the error of MJWarp's next qpos/qvel against MuJoCo's, divided by the size of MuJoCo's own
one-step change of that quantity (max-norm over its components; a floor keeps a resting robot from dividing by
~0). The check passes when the ``--quantile`` (default 0.99) of that relative error stays under
``--tolerance`` (default 1e-3) for both quantities: MJWarp may differ from MuJoCo by at most 0.1 % of what one
step does, in all but the rarest rows (measured on Warp's CPU device: ~4e-5). Negative controls:
``--perturb-ctrl X`` adds X to one actuator target of every env on the MJWarp side only (a physically small
change: X = 0.01 rad must fail), and
``--mujoco-both`` compares MuJoCo with itself (must give exactly zero).

Run from a UniLab tree root with the overlay and the tree on PYTHONPATH. On a CPU-only machine the MJWarp side
runs on Warp's CPU device (``UNISIM_MJWARP_ALLOW_CPU=1``, unisim 0002); on a GPU host on CUDA.

Run by ``tests/test_mjwarp_agreement.py`` on Warp's CPU device, and on a GPU host for the committed evidence.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "profile"))
from collector_profile import build_env  # noqa: E402  (the collector's env, built as the FlashSAC collector builds it)

#: Smallest one-step change counted as motion (m or rad for qpos, per second for qvel): below it a row's
#: relative error is measured against this floor instead.
MOTION_FLOOR = {"qpos": 1e-4, "qvel": 1e-2}


@dataclass(frozen=True)
class Args:
    """The study's knobs (command line: the same names with dashes)."""

    num_envs: int = 64
    source_steps: int = 120
    every: int = 10
    seed: int = 1
    action_seed: int = 7
    tolerance: float = 1e-3
    quantile: float = 0.99
    perturb_ctrl: float = 0.0
    mujoco_both: bool = False


def sample_states(args: Args) -> dict[str, np.ndarray]:
    """(qpos, qvel) before a step and the actuator targets of that step, every ``args.every`` source steps."""
    env = build_env(args.num_envs, args.seed, "g1_walk_flat/mujoco")
    env.init_state()
    backend = env._backend  # noqa: SLF001 - the physics truth the env steps
    rng = np.random.default_rng(args.action_seed)
    dim = int(env.action_manager.total_action_dim)
    qpos, qvel, ctrl = [], [], []
    for step in range(args.source_steps):
        before = backend.get_state(("qpos", "qvel"))
        env.step(rng.uniform(-1.0, 1.0, size=(args.num_envs, dim)).astype(np.float32))
        if step % args.every == 0:
            qpos.append(before["qpos"])
            qvel.append(before["qvel"])
            ctrl.append(backend.get_state("ctrl")["ctrl"])
    env.close()
    return {"qpos": np.stack(qpos), "qvel": np.stack(qvel), "ctrl": np.stack(ctrl).astype(np.float32)}


def step_from(backend: Any, substeps: int, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray) -> dict[str, np.ndarray]:
    """Put every row in (qpos, qvel), apply ``ctrl`` for one control step, return the next qpos/qvel."""
    rows = np.arange(qpos.shape[0])
    backend.set_state(rows, qpos, qvel)
    backend.step(ctrl, nsteps=substeps)
    return {k: np.asarray(v, dtype=np.float64) for k, v in backend.get_state(("qpos", "qvel")).items()}


def relative_errors(start: np.ndarray, reference: np.ndarray, candidate: np.ndarray, floor: float) -> np.ndarray:
    """Per row: max |candidate - reference| over max |reference - start| (floored)."""
    motion = np.maximum(np.abs(reference - start).max(axis=-1), floor)
    return np.abs(candidate - reference).max(axis=-1) / motion


def compare(args: Args, states: dict[str, np.ndarray]) -> dict[str, Any]:
    """Step both backends from every sampled state; per-quantity relative-error statistics and the verdict."""
    reference_env = build_env(args.num_envs, args.seed, "g1_walk_flat/mujoco")
    candidate_task = "g1_walk_flat/mujoco" if args.mujoco_both else "g1_walk_flat/mjwarp"
    candidate_env = build_env(args.num_envs, args.seed, candidate_task)
    substeps, candidate_substeps = reference_env.cfg.sim_substeps, candidate_env.cfg.sim_substeps
    if candidate_substeps != substeps:
        raise RuntimeError(f"substeps differ: mujoco {substeps}, {candidate_task} {candidate_substeps}")
    reference, candidate = reference_env._backend, candidate_env._backend  # noqa: SLF001
    errors: dict[str, list[np.ndarray]] = {"qpos": [], "qvel": []}
    absolute: dict[str, float] = {"qpos": 0.0, "qvel": 0.0}
    started = time.perf_counter()
    for qpos, qvel, ctrl in zip(states["qpos"], states["qvel"], states["ctrl"]):
        shifted = ctrl.copy()
        shifted[:, 0] += args.perturb_ctrl
        want = step_from(reference, substeps, qpos, qvel, ctrl)
        got = step_from(candidate, substeps, qpos, qvel, shifted)
        for key, start in (("qpos", qpos), ("qvel", qvel)):
            errors[key].append(relative_errors(start.astype(np.float64), want[key], got[key], MOTION_FLOOR[key]))
            absolute[key] = max(absolute[key], float(np.abs(got[key] - want[key]).max()))
    reference_env.close()
    candidate_env.close()
    stats: dict[str, Any] = {}
    passed = True
    for key, values in errors.items():
        flat = np.concatenate(values)
        at_quantile = float(np.quantile(flat, args.quantile))
        ok = bool(np.isfinite(flat).all() and at_quantile <= args.tolerance)
        passed &= ok
        stats[key] = {"rows": int(flat.size), "median": float(np.median(flat)), f"q{args.quantile}": at_quantile,
                      "max": float(flat.max()), "max_abs_error": absolute[key], "passed": ok}
    return {"passed": passed, "substeps": substeps, "candidate_task": candidate_task,
            "compare_s": time.perf_counter() - started, "relative_error": stats}


def device_facts() -> dict[str, Any]:
    """Warp's device for the MJWarp side and the versions that produced the numbers."""
    from importlib import metadata

    facts: dict[str, Any] = {}
    for dist in ("mujoco", "mujoco-warp", "warp-lang", "unisim-core", "unilab"):
        try:
            facts[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            facts[dist] = None
    try:
        import warp

        facts["warp_device"] = str(warp.get_device())
        facts["warp_device_name"] = warp.get_device().name
    except Exception as exc:  # noqa: BLE001 - recorded, the comparison itself reports the failure
        facts["warp_device"] = f"unavailable: {exc}"
    return facts


def parse_args(argv: list[str] | None) -> tuple[Args, Path]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, value in asdict(Args()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag, type=type(value), default=value)
    p.add_argument("--output", type=Path, required=True)
    ns = p.parse_args(argv)
    output = ns.output
    del ns.output
    args = Args(**vars(ns))
    if args.num_envs <= 0 or args.source_steps <= 0 or args.every <= 0 or not 0 < args.quantile <= 1:
        p.error("--num-envs, --source-steps and --every must be positive and 0 < --quantile <= 1")
    return args, output


def main(argv: list[str] | None = None) -> int:
    args, output = parse_args(argv)
    if not Path("src/unilab/conf/flashsac/config.yaml").is_file():
        print(f"mjwarp_agreement: run from a UniLab tree root (no src/unilab/conf/flashsac/config.yaml in "
              f"{os.getcwd()})", file=sys.stderr)
        return 2
    states = sample_states(args)
    result = {"args": asdict(args), "states": int(states["qpos"].shape[0]), **compare(args, states),
              "versions": device_facts()}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"mjwarp_agreement: {'passed' if result['passed'] else 'FAILED'} "
          + " ".join(f"{k} q{args.quantile}={v[f'q{args.quantile}']:.3g} (max abs {v['max_abs_error']:.3g})"
                     for k, v in result["relative_error"].items()))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
