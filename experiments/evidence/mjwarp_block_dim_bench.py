#!/usr/bin/env python3
"""Times G1 Walk Flat's MuJoCo Warp substeps with other thread-block widths for MuJoCo Warp's tiled kernels.

MuJoCo Warp launches its constraint solver's per-world kernels (the line search, the Hessian's Cholesky update,
``J^T D J``) as one thread block per world, of the width ``Model.block_dim`` names (MuJoCo Warp's ``BlockDim``, not
a public name): the threads of a block share a world's constraint rows and reduce over them. The width is a launch
setting, not a solver option: the same kernel code, the same iterations and tolerances; what changes is how many
rows each thread takes and the order of the block's float sums (so a step's result may differ in the last bits,
which this bench records). At 256 worlds the line search and the Cholesky update alone are about 30 % of the
physics' GPU time (``results/2026-12-04-h200-device-env-profile``), each a small block per world.

Run from a UniLab tree root with the overlay first on ``PYTHONPATH``. Per ``--num-envs`` it builds the device env
of the tree's ``g1_walk_flat/mjwarp`` config (the product's form), steps it ``--warm-steps`` times with seeded
uniform actions (the robots in contact), keeps that state, and for each variant of ``VARIANTS`` (the tree's widths
with the named fields changed) runs one eager step (its kernels built), one step from the kept state (its result,
compared with the default's: the largest difference of ``qpos``, ``qvel``, ``qacc``; the default also against a
second run of itself: on a GPU MuJoCo Warp's atomic sums make that differ too) and captures the substeps as one
CUDA graph. Then blocks of ``--steps`` replays alternate between the variants for ``--rounds`` rounds, each block
from the kept state; a variant's figure is its median block (ms per env step) and its ratio to the default's.
``--cpu-smoke`` runs the variants eager on Warp's CPU device (no figures: a kernel's block width is one thread
there, so every variant must be bitwise the default). Writes one JSON with the machine and versions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_env_build import machine, make_device_env, series_sha256, versions  # noqa: E402

#: The widths tried, as changes to the tree's ``Model.block_dim`` (its defaults for G1: the line search 32, the
#: blocked Cholesky update 32, ``J^T D J`` 128 threads per world).
VARIANTS: dict[str, dict[str, int]] = {
    "default": {},
    "linesearch-64": {"linesearch_iterative": 64},
    "linesearch-128": {"linesearch_iterative": 128},
    "cholesky-64": {"update_gradient_cholesky_blocked": 64},
    "jtdaj-32": {"update_gradient_JTDAJ_sparse": 32},
}
#: What one physics step reads of the state it starts from (the rest MuJoCo Warp computes again from these).
STATE = ("qpos", "qvel", "qacc_warmstart", "act", "ctrl", "time")
COMPARED = ("qpos", "qvel", "qacc")


def set_widths(block_dim: Any, widths: dict[str, int]) -> None:
    """``block_dim``'s fields set to ``widths`` (in place: the env's models share the one object)."""
    for name, value in widths.items():
        setattr(block_dim, name, value)


def run_size(num_envs: int, args: argparse.Namespace) -> dict[str, Any]:
    import warp as wp

    dev = make_device_env(num_envs, args.seed, (), numpy_draws=False, graph=False, draws_ahead=True,
                          reset_only_when_done=True)
    dev.reset()
    cuda = dev.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    generator = torch.Generator(device=dev.device).manual_seed(args.seed)
    for _ in range(args.warm_steps):
        dev.step(torch.rand((num_envs, dev.action_dim), generator=generator, device=dev.device) * 2 - 1)
    sim, data = dev.sim, dev.sim._data  # noqa: SLF001 - the physics the env steps
    block_dim = sim._model.block_dim  # noqa: SLF001
    tree = dataclasses.asdict(block_dim)
    unknown = sorted({field for name in args.variants for field in VARIANTS[name]} - set(tree))
    if unknown:
        raise ValueError(f"this MuJoCo Warp has no block width {', '.join(unknown)}")
    kept = {name: wp.to_torch(getattr(data, name)).clone() for name in STATE}

    def restore() -> None:
        for name, value in kept.items():
            wp.to_torch(getattr(data, name)).copy_(value)

    def one_step() -> dict[str, torch.Tensor]:
        restore()
        sim.step(dev.substeps)
        sync()
        return {name: wp.to_torch(getattr(data, name)).clone() for name in COMPARED}

    graphs, results, first_step_s = {}, {}, {}
    for name in args.variants:
        set_widths(block_dim, {**tree, **VARIANTS[name]})
        t0 = time.perf_counter()
        one_step()
        first_step_s[name] = time.perf_counter() - t0
        results[name] = one_step()
        if cuda:
            graphs[name] = sim.capture(lambda: sim.step(dev.substeps), ())
    set_widths(block_dim, tree)
    again = one_step()
    reference = results[args.variants[0]]
    differences = {name: {k: float((r[k] - reference[k]).abs().max()) for k in COMPARED} for name, r in results.items()}
    differences["default, run again"] = {k: float((again[k] - reference[k]).abs().max()) for k in COMPARED}
    blocks: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(args.rounds if cuda else 0):
        for name, graph in graphs.items():
            restore()
            sync()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                graph.replay()
            sync()
            blocks[name].append((time.perf_counter() - t0) * 1e3 / args.steps)
    median = {name: statistics.median(values) for name, values in blocks.items()}
    base = median.get(args.variants[0])
    return {"num_envs": num_envs, "device": str(dev.device), "tree_block_dim": tree,
            "nefc_max": int(wp.to_torch(data.nefc).max()), "steps_per_block": args.steps, "rounds": args.rounds,
            "first_step_s": first_step_s, "max_abs_diff_to_default": differences, "blocks_ms_per_step": blocks,
            "median_ms_per_step": median, "ratio_to_default": {k: v / base for k, v in median.items()} if base else {}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm-steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cpu-smoke", action="store_true", help="the variants eager on Warp's CPU device (no figures)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not args.cpu_smoke:
        print("mjwarp_block_dim_bench: no CUDA device; the substeps' graphs are timed on a GPU", file=sys.stderr)
        return 2
    args.variants = ["default", *(name for name in args.variants if name != "default")]  # the reference first
    result: dict[str, Any] = {
        "study": "mjwarp-block-dim", "date": time.strftime("%Y-%m-%d"), "cpu_smoke": bool(args.cpu_smoke),
        "machine": machine(),
        "versions": versions(), "series_sha256": series_sha256(),
        "variants": {name: VARIANTS[name] for name in args.variants}, "runs": []}
    for num_envs in args.num_envs:
        try:
            run = run_size(num_envs, args)
        except ValueError as exc:  # a width this MuJoCo Warp does not have, or a task the device env refuses
            print(f"mjwarp_block_dim_bench: {exc}", file=sys.stderr)
            return 2
        result["runs"].append(run)
        print(json.dumps({k: run[k] for k in ("num_envs", "median_ms_per_step", "ratio_to_default", "nefc_max")}),
              flush=True)
        args.output.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
