#!/usr/bin/env python3
"""Where MuJoCo Warp's kernel modules are built when a G1 Walk Flat ``mjwarp`` env starts (unisim 0004).

Builds the collector's env (the tree's Hydra config, ``g1_walk_flat/mjwarp``, ``--num-envs`` worlds), resets it
and steps it ``--steps`` times with seeded uniform actions, while every ``Module.load`` of Warp is recorded:
the module, the thread that loaded it (the backend's build workers or the launching thread), when, and for
how long. Run from a UniLab tree root with the overlay first on ``PYTHONPATH``; on Warp's CPU device
(``UNISIM_MJWARP_ALLOW_CPU=1``, ``tests/test_mjwarp_kernel_build.py``) or on CUDA (with an empty
``WARP_CACHE_PATH`` every load is a build: the fresh machine's start).

The check holds when the backend built ahead (``kernel_build.workers`` > 0, no failure) and no module was
loaded by a launch: neither a module of ``kernel_build.modules_to_build`` (MuJoCo Warp's core modules and the
backend's own) nor any other (the kernels MuJoCo Warp creates for the model, whose modules the backend builds
from a recorded forward, step and reset). With ``UNISIM_MJWARP_BUILD_WORKERS=0`` (Warp's build at launch; on
Warp's CPU device also when unset) it must fail: the control.

Prints one JSON line (``--output``: also to a file): the device, the versions, the env's build seconds, the steps' seconds, the backend's ``kernel_build``, and the
loads split by who made them (count and seconds); ``--qpos-output`` saves the final qpos for a bitwise
comparison. Exit 0 when the check holds, 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / folder) for folder in ("profile", "bench/hook")]
from collector_profile import action_dim_of, action_sequence, build_env  # noqa: E402
from startup_phases import install as time_loads  # noqa: E402 - the bench hook's Warp load timer


def summary(loads: list[dict[str, Any]], built_ahead: set[str]) -> dict[str, Any]:
    """The loads by who made them: the build workers; a launch that was the first load of a core module (one of
    ``built_ahead``); every other load at a launch (modules of features the build leaves to their launch,
    another block size of a built module, a created kernel the recorded calls did not launch). A load at a
    launch of either kind fails the check."""
    def part(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"count": len(rows), "seconds": round(sum(r["end_s"] - r["start_s"] for r in rows), 3)}

    first: dict[str, dict[str, Any]] = {}
    for row in loads:
        first.setdefault(row["module"], row)
    missed = [r for name, r in first.items() if name in built_ahead and r["launch"]]
    others = [r for r in loads if r["launch"] and not any(r is m for m in missed)]
    return {
        "by_build_workers": part([r for r in loads if not r["launch"]]),
        "built_ahead_modules_first_loaded_at_launch": {**part(missed), "modules": sorted(r["module"] for r in missed)},
        "other_loads_at_launch": part(others),
    }


def table(folder: Path) -> str:
    """The folder's runs (``*.json`` of this script) as a Markdown table, in file order. Runs of the build's first
    form (every module of mujoco_warp and unisim built ahead) counted every package module's load at a launch
    and the created kernels apart: their columns read those counts."""
    lines = ["| run | device · CPUs | worlds | built ahead (workers · modules · s wall) | env build (s) | "
             "built-ahead modules first loaded at a launch (count · s) | other loads at a launch (count · s) | "
             "check |", "|---|---|---|---|---|---|---|---|"]
    for path in sorted(folder.glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        build, loads = run["kernel_build"], run["loads"]
        missed = loads.get("built_ahead_modules_first_loaded_at_launch") or loads["package_modules_at_launch"]
        others = loads.get("other_loads_at_launch") or loads["created_kernels_at_launch"]
        ahead = f"{build['workers']} · {build['modules']} · {build['seconds']:.1f}" if build["workers"] else "none"
        lines.append(f"| {path.name} | {run['device_name']} · {run['usable_cpus']} | {run['num_envs']} | {ahead} | "
                     f"{run['env_build_s']:.1f} | {missed['count']} · {missed['seconds']:.1f} | "
                     f"{others['count']} · {others['seconds']:.1f} | {'holds' if run['holds'] else 'fails'} |")
    return "\n".join(lines)


def physics_table(folder: Path) -> str:
    """PTX against cubin (unisim 0004) beside the physics' own spread: the folder's ``--qpos-output`` files, named
    ``<form>-<run>-<steps>-qpos.npy`` (form ``ptx`` or ``cubin``, run ``a`` or ``b``), each the final qpos of a
    fresh process stepping the same seeded actions. Per step count: two runs of the same cubin against each other,
    and a PTX run against a cubin run."""
    runs: dict[int, dict[str, np.ndarray]] = {}
    for path in sorted(folder.glob("*-qpos.npy")):
        form, run, steps = path.name[: -len("-qpos.npy")].split("-")
        runs.setdefault(int(steps), {})[f"{form}-{run}"] = np.load(path)

    def spread(a: np.ndarray, b: np.ndarray) -> str:
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        return f"{'yes' if np.array_equal(a, b) else 'no'} · {diff.max():.3g} · {int((diff.max(axis=1) > 0).sum())}"

    lines = ["| steps | worlds | cubin vs cubin: bitwise · max abs qpos difference · worlds differing | "
             "PTX vs cubin: bitwise · max abs qpos difference · worlds differing |", "|---|---|---|---|"]
    for steps, found in sorted(runs.items()):
        lines.append(f"| {steps} | {found['cubin-a'].shape[0]} | {spread(found['cubin-a'], found['cubin-b'])} | "
                     f"{spread(found['ptx-a'], found['cubin-a'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--qpos-output", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)

    loads: list[dict[str, Any]] = []
    time_loads(loads.append, time.perf_counter, phases=())  # every Warp module load, none of the phases
    from flashsac_runtime.mjwarp import kernel_build

    start = time.perf_counter()
    env = build_env(args.num_envs, args.seed, task="g1_walk_flat/mjwarp")
    built = time.perf_counter()
    env.init_state()
    actions = action_sequence(args.num_envs, action_dim_of(env), args.steps, action_seed=7)
    for action in actions:
        env.step(action)
    stepped = time.perf_counter()
    backend = env._backend  # noqa: SLF001 - the backend's own record of its build
    build = backend.kernel_build
    if args.qpos_output is not None:
        np.save(args.qpos_output, np.asarray(backend.get_state(("qpos",))["qpos"]))
    parts = summary(loads, {module.name for module in kernel_build.modules_to_build()})
    holds = (build.workers > 0 and not build.failed
             and parts["built_ahead_modules_first_loaded_at_launch"]["count"] == 0
             and parts["other_loads_at_launch"]["count"] == 0)
    import importlib.metadata
    import os

    from warp._src.context import runtime

    versions = {name: importlib.metadata.version(name) for name in ("mujoco", "mujoco-warp", "warp-lang")}
    manifest = Path(kernel_build.__file__).resolve().parents[3] / "MANIFEST.json"  # the overlay's, by make apply
    series = json.loads(manifest.read_text(encoding="utf-8")).get("series_sha256") if manifest.is_file() else None
    report = json.dumps({
        "holds": holds, "num_envs": args.num_envs, "steps": args.steps,
        "device": str(backend._device_data.qpos.device), "device_name": runtime.get_device().name,  # noqa: SLF001
        "usable_cpus": len(os.sched_getaffinity(0)), "versions": versions, "series_sha256": series,
        "warp_build_workers_switch": os.environ.get(kernel_build.BUILD_WORKERS_ENV),
        "env_build_s": round(built - start, 3), "steps_s": round(stepped - built, 3),
        "kernel_build": {"workers": build.workers, "modules": build.modules, "seconds": round(build.seconds, 3),
                         "failed": list(build.failed)},
        "loads": parts,
    })
    print(report)
    if args.output is not None:
        args.output.write_text(report + "\n", encoding="utf-8")
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
