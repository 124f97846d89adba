#!/usr/bin/env python3
"""The physics floor of a CPU-collector run: what the MuJoCo steps alone must cost on this host.

Why: with the learner at a few ms, the collector sets the pace, and most of its cycle is
``mj_step``. A run's wall time per iteration means little without the floor beside it:
``floor_ms = single-core mj_step cost × substeps × envs / physics workers``. The cost is
measured here, on the host that runs the benchmark, with plain ``mujoco.mj_step`` on one
thread (no pool, no Python beyond the loop), on the task's own scene from its keyframe with
random controls inside the actuators' ranges (a walking policy's contacts, not a robot
standing still), re-starting from the keyframe every ``RESTART_EVERY`` steps so the robot
does not lie on the floor for most of the sample.

``python experiments/bench/physics_floor.py --unilab-root <tree> [--steps N]`` prints the JSON.

``benchmark_flashsac_training.py`` measures it before every CPU MuJoCo run and records it in the run JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

#: Steps from the keyframe before the next restart (1 s of simulated time at the G1's 1/150 s).
RESTART_EVERY = 150
KEYFRAME = "stand"


@dataclass(frozen=True)
class StepCost:
    """Single-core ``mj_step`` cost of one scene on this host."""

    scene: str
    steps: int
    mean_us: float
    median_us: float
    mujoco: str
    host_cpus: int


def measure_step_cost(scene: Path, *, steps: int = 3000, seed: int = 0) -> StepCost:
    """Time ``steps`` single-threaded ``mj_step`` calls of ``scene`` with seeded random controls."""
    import mujoco
    import numpy as np

    model = mujoco.MjModel.from_xml_path(str(scene))
    data = mujoco.MjData(model)
    key = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, KEYFRAME)
    rng = np.random.default_rng(seed)
    low, high = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    controls = rng.uniform(low, high, size=(steps, model.nu))
    per_chunk: list[float] = []
    total_ns = 0
    for start in range(0, steps, RESTART_EVERY):
        if key >= 0:
            mujoco.mj_resetDataKeyframe(model, data, key)
        else:
            mujoco.mj_resetData(model, data)
        chunk = controls[start:start + RESTART_EVERY]
        t0 = time.perf_counter_ns()
        for ctrl in chunk:
            data.ctrl[:] = ctrl
            mujoco.mj_step(model, data)
        elapsed = time.perf_counter_ns() - t0
        total_ns += elapsed
        per_chunk.append(elapsed / 1e3 / len(chunk))
    return StepCost(
        scene=str(scene), steps=steps, mean_us=total_ns / 1e3 / steps, median_us=sorted(per_chunk)[len(per_chunk) // 2],
        mujoco=mujoco.__version__, host_cpus=len(os.sched_getaffinity(0)),
    )


def floor_ms(step_us: float, *, substeps: int, envs: int, workers: int) -> float:
    """Physics time per env step of all ``envs`` if ``workers`` cores did nothing but ``mj_step``."""
    if min(substeps, envs, workers) <= 0:
        raise ValueError(f"substeps, envs and workers must be positive, got {substeps}, {envs}, {workers}")
    return step_us * substeps * envs / workers / 1e3


def physics_workers(envs: int, cpus: int) -> int:
    """unisim-core 1.7.8's MuJoCo pool size without explicit cpu_ids: min(envs, usable CPUs)."""
    return max(1, min(envs, cpus))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unilab-root", type=Path, required=True)
    parser.add_argument("--scene", type=Path, default=Path("src/unilab/assets/robots/g1/scene_flat.xml"),
                        help="relative to --unilab-root (default: the G1 flat scene)")
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args(argv)
    scene = args.unilab_root / args.scene
    if not scene.is_file():
        print(f"physics_floor: error: {scene} does not exist", file=sys.stderr)
        return 1
    print(json.dumps(asdict(measure_step_cost(scene, steps=args.steps)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
