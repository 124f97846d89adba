#!/usr/bin/env python3
"""Where the learner's device time goes, kernel by kernel, at a bench setting.

At UniLab's defaults (batch 2048, 8/4/4) the learner's iteration is the longer of the device collector's two streams
(``results/2026-12-04-h200-env-step-early/``), and its networks are small: a few hundred small kernels per update,
each short. What would shorten it is fewer or shorter kernels; this says which. It builds the FlashSAC learner as
training does (``flashsac_learner_kwargs`` of the tree's config at ``--setting``, G1 Walk Flat's dimensions from a
one-env CPU MuJoCo env), warms it up as the runner does (on CUDA the whole-iteration graph is captured there),
times ``--iterations`` iterations on random batches already on the device (CUDA events; ``--per-update``: the
per-update path instead of the whole-iteration graph), then runs
``--profiled`` more under torch's profiler and splits the device's kernels per iteration into kinds
(``KINDS``: matrix products, Inductor's Triton kernels, the optimizer's fused steps, copies and fills, other
kernels) with their time, and lists the largest.

Run from a UniLab tree root with the overlay first on ``PYTHONPATH``. On a machine without CUDA it runs on the
CPU and counts the CPU's operations instead (no graph, nothing compiled: a smoke run, not a measurement).
Prints one JSON (``--output`` writes it too).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[0] / "bench"))
from bench_configs import SETTINGS  # noqa: E402
from device_env_build import series_sha256, versions  # noqa: E402
from learner_study import random_batch, runner_schedule, update_iteration, warm_up  # noqa: E402

TASK = "g1_walk_flat/mujoco"
#: The learner switches a flag sets against the tree's config, as a comparison: flag → (the learner's keyword, the
#: value the flag gives it, its help). The JSON records each keyword as the learner holds it.
SWITCH_FLAGS: dict[str, tuple[str, bool, str]] = {
    "--no-aligned-products": ("aligned_products", False,
                              "the networks' matrix products on their own widths, not padded to aligned ones (the "
                              "tree's default, uni_rl 0017): the learner as it was"),
    "--no-combo-kernels": ("combo_kernels", False,
                           "without Inductor's combo kernels (the tree's default, uni_rl 0018): "
                           "the learner as it compiled before"),
}
#: Kernel kinds by name, first match wins: what each kind is made of, and so what would shorten it.
KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("matrix products (cuBLAS/CUTLASS)", re.compile(r"gemm|cutlass|sm\d+_xmma|cublas|nvjet|splitK", re.I)),
    ("Triton kernels Inductor generated", re.compile(r"^triton_")),
    ("optimizer steps (fused or foreach)", re.compile(r"adam|multi_tensor_apply|fused_", re.I)),
    ("copies and fills", re.compile(r"memcpy|memset|copy_kernel|fill_kernel|Memcpy|Memset", re.I)),
)
OTHER = "other kernels (ATen elementwise, reductions, RNG)"


def compose(setting: str, updates_per_step: int | None) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    values = [f"algo.{key}={value}" for key, value in SETTINGS[setting].values]
    if updates_per_step is not None:
        values.append(f"algo.updates_per_step={updates_per_step}")
    with initialize_config_dir(config_dir=str(Path("src/unilab/conf/flashsac").resolve()), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=[f"task={TASK}", *values])


def g1_dims(cfg: Any) -> dict[str, int]:
    """The learner's input sizes as training takes them: from one env of the task (CPU MuJoCo)."""
    from uni_rl.utils.observations import get_obs_dims

    from unilab.base.env_factory import make_registry_env
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    env = make_registry_env(str(cfg.training.task_name), "mujoco", 1,
                            {**(build_offpolicy_env_cfg_override("flashsac", cfg) or {}), "seed": 1})
    try:
        obs_dim, critic_obs_dim = get_obs_dims(dict(env.obs_groups_spec))
        return {"obs_dim": obs_dim, "critic_obs_dim": critic_obs_dim, "action_dim": int(env.action_space.shape[0])}
    finally:
        env.close()


def random_batches(dims: dict[str, int], batch_size: int, count: int, device: torch.device) -> list[dict[str, Any]]:
    generator = torch.Generator().manual_seed(0)
    return [{key: value.to(device) for key, value in random_batch(torch, generator, batch_size, dims).items()}
            for _ in range(count)]


def kind_of(name: str) -> str:
    return next((kind for kind, pattern in KINDS if pattern.search(name)), OTHER)


def profile(learner: Any, batches: list[dict[str, Any]], schedule: Any, iterations: int,
            device: torch.device) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = device.type == "cuda"
    with torch_profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(iterations):
            update_iteration(learner, batches, schedule)
        if cuda:
            torch.cuda.synchronize(device)
    counts: collections.Counter[str] = collections.Counter()
    micros: collections.Counter[str] = collections.Counter()
    for event in prof.events():
        on_device = event.device_type == torch.autograd.DeviceType.CUDA
        if on_device != cuda or (not cuda and event.cpu_parent is not None):
            continue  # on the CPU only top-level operations, as the step would launch them
        counts[event.name] += 1
        micros[event.name] += event.device_time_total if cuda else event.cpu_time_total
    kinds: dict[str, dict[str, float]] = {}
    for name, count in counts.items():
        entry = kinds.setdefault(kind_of(name), {"per_iteration": 0.0, "us_per_iteration": 0.0})
        entry["per_iteration"] += count / iterations
        entry["us_per_iteration"] += micros[name] / iterations
    largest = sorted(counts, key=lambda name: -micros[name])[:15]
    return {"kernels_per_iteration": sum(counts.values()) / iterations,
            "us_per_iteration": sum(micros.values()) / iterations,
            "by_kind": {kind: {k: round(v, 2) for k, v in entry.items()} for kind, entry in sorted(kinds.items())},
            "largest": [{"name": name[:160], "kind": kind_of(name), "per_iteration": counts[name] / iterations,
                         "us_per_iteration": round(micros[name] / iterations, 2)} for name in largest]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="unilab-default")
    parser.add_argument("--updates-per-step", type=int, default=None,
                        help="the schedule (2: 2/1/1, 8: 8/4/4); default: the setting's config")
    parser.add_argument("--iterations", type=int, default=200, help="timed iterations, after the warm-up")
    parser.add_argument("--profiled", type=int, default=20, help="iterations under the profiler")
    parser.add_argument("--per-update", action="store_true",
                        help="the per-update path (compiled objectives, no whole-iteration graph): each update's "
                             "kernels launched one by one, as a comparison")
    for flag, (_, _, text) in SWITCH_FLAGS.items():
        parser.add_argument(flag, action="store_true", help=text)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    from uni_rl.algos.flash_sac.double_buffer import flashsac_learner_kwargs
    from uni_rl.algos.flash_sac.learner import FlashSACLearner

    cfg = compose(args.setting, args.updates_per_step)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dims = g1_dims(cfg)
    torch.manual_seed(int(cfg.algo.seed))
    kwargs = flashsac_learner_kwargs(cfg, **dims)
    if args.per_update:
        kwargs["use_whole_cycle_cuda_graph"] = False
    for flag, (keyword, value, _) in SWITCH_FLAGS.items():
        if getattr(args, flag[2:].replace("-", "_")):
            kwargs[keyword] = value
    learner = FlashSACLearner(device=str(device), **kwargs)
    updates, frequency = int(cfg.algo.updates_per_step), int(cfg.algo.policy_frequency)
    batch_size = int(cfg.algo.batch_size)
    batches = random_batches(dims, batch_size, updates, device)
    schedule = runner_schedule(updates, frequency)
    start = time.perf_counter()
    warm_up(learner, {k: torch.zeros_like(v) for k, v in batches[0].items()}, updates, frequency)
    warm_up_s = time.perf_counter() - start
    timed_ms: list[float] = []
    for _ in range(args.iterations):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            update_iteration(learner, batches, schedule)
            end.record()
            end.synchronize()
            timed_ms.append(begin.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            update_iteration(learner, batches, schedule)
            timed_ms.append((time.perf_counter() - t0) * 1e3)
    timed_ms.sort()
    result = {"setting": args.setting, "schedule": f"{updates} updates, policy frequency {frequency}",
              "batch_size": batch_size, "dims": dims, "device": str(device),
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "whole_iteration_graph": bool(getattr(learner, "use_whole_cycle_cuda_graph", False)),
              **{keyword: bool(getattr(learner, keyword, False)) for keyword, _, _ in SWITCH_FLAGS.values()},
              "warm_up_s": round(warm_up_s, 2), "iterations": args.iterations,
              "iteration_ms_median": round(timed_ms[len(timed_ms) // 2], 3),
              "profiled_iterations": args.profiled,
              "profile": profile(learner, batches, schedule, args.profiled, device),
              "versions": versions(), "series_sha256": series_sha256()}
    text = json.dumps(result)
    if args.output is not None:
        args.output.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
