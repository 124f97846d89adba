#!/usr/bin/env python3
"""Times the G1 Walk Flat env step on MuJoCo Warp: UniLab's host env against the device-resident env.

Run from a UniLab tree root with the overlay first on ``PYTHONPATH`` and MuJoCo Warp on a CUDA device. For each
``--num-envs`` it builds both envs from the tree's ``g1_walk_flat/mjwarp`` task config (no overrides), then
alternates blocks of ``--steps`` env steps between them for ``--rounds`` rounds (machines are noisy: the two
are compared side by side), with the same seeded uniform actions in [-1, 1]. Per block it records the wall time
per step (host: ``env.step`` returns NumPy arrays, so each step is synchronous; device: ``torch.cuda.synchronize``
once after the block) and, for the device env, the physics alone (the backend's captured substep graph). The
device env's blocks run under ``torch.cuda.set_sync_debug_mode("error")``: a host sync inside its step fails the
run. ``--parity-steps`` first steps the device env with UniLab's own NumPy draws beside the NumPy env on the GPU
and reports the largest differences (GPU contact ordering may differ between the two physics copies, so this is
a report, not a gate; the gate is the CPU trajectory test). ``--profile`` adds, per env count, where a step's
device time goes: the MJWarp substeps alone as one captured graph (the physics floor of a graphed step), and the
kernels of eager steps under torch's profiler (CUPTI sees Warp's launches too), split into MuJoCo Warp's kernels
and torch's, with counts and GPU time per step: a graphed step costs about its kernels' time plus a launch gap
per kernel, so the counts say what fusing the torch terms could save. ``--forms`` instead times the device env's
step alone in the forms named (``FORMS``: the reset on every step or only on a step with a done row, the sensors
without their acceleration stage or, ``-all-sensors``, with it; draws ahead, the product's default, in all), one beside the other:
each form's env is built and reset (its step's graph recorded) before the next is built, then blocks of
``--steps`` graphed steps alternate between the forms for ``--rounds`` rounds with the same seeded actions; with
``--profile`` also the physics floor and kernel split above, of the first form's env (eager, so its reset runs on
every profiled step). With
``--cpu-smoke`` that runs on Warp's CPU device, eager (no figures: a smoke run, so that a GPU's minutes are not lost
to a broken script). Writes one JSON with the machine and versions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "profile"))
from collector_profile import build_env  # noqa: E402
from device_env_build import TASK, machine, make_device_env, series_sha256, versions  # noqa: E402


#: The forms of the device env's step ``--forms`` compares, as factory keywords (beside draws ahead).
FORMS: dict[str, dict[str, bool]] = {
    "torch": {}, "torch-when-done": {"reset_only_when_done": True},
    "torch-when-done-all-sensors": {"reset_only_when_done": True, "acceleration_sensors": True},
}


def device_env(num_envs: int, seed: int, numpy_draws: bool, graph: bool = True) -> Any:
    """The device env from the tree's task config, as the sameness check builds it."""
    return make_device_env(num_envs, seed, (), numpy_draws=numpy_draws, graph=graph)


def gpu_determinism(num_envs: int, steps: int, seed: int) -> dict[str, Any]:
    """UniLab's NumPy env twice, side by side with the same actions: are two MJWarp copies on the GPU bitwise
    alike? The first step at which their observations differ, and the largest difference."""
    actions = np.random.default_rng(7).uniform(-1, 1, (steps, num_envs, 29)).astype(np.float32)
    pairs: dict[str, Any] = {}
    a, b = build_env(num_envs, seed, task=TASK), build_env(num_envs, seed, task=TASK)
    a.init_state(), b.init_state()
    first, worst = None, 0.0
    for t in range(steps):
        diff = float(np.abs(a.step(actions[t]).obs["obs"] - b.step(actions[t]).obs["obs"]).max())
        worst = max(worst, diff)
        first = t if first is None and diff > 0 else first
    pairs["numpy_env_twice"] = {"first_step_differing": first, "max_abs_diff": worst}
    return pairs


def parity(num_envs: int, steps: int, seed: int) -> dict[str, Any]:
    ref = build_env(num_envs, seed, task=TASK)
    dev = device_env(num_envs, seed, numpy_draws=True)
    ref.init_state()
    dev.reset()
    actions = np.random.default_rng(7).uniform(-1, 1, (steps, num_envs, dev.action_dim)).astype(np.float32)
    worst: dict[str, float] = {"policy_obs": 0.0, "critic_obs": 0.0, "reward": 0.0}
    done_mismatch, first_mismatch = 0, None
    for t in range(steps):
        st = ref.step(actions[t])
        out = dev.step(torch.from_numpy(actions[t]).cuda())
        diffs = {"policy_obs": np.abs(st.obs["obs"] - out.policy_obs.cpu().numpy()).max(),
                 "critic_obs": np.abs(st.obs["critic"] - out.critic_obs.cpu().numpy()).max(),
                 "reward": np.abs(st.reward - out.reward.cpu().numpy()).max()}
        for key, value in diffs.items():
            worst[key] = max(worst[key], float(value))
        mismatch = int((st.terminated != out.terminated.cpu().numpy()).sum() + (st.truncated != out.truncated.cpu().numpy()).sum())
        done_mismatch += mismatch
        if first_mismatch is None and (mismatch or max(diffs.values()) > 1e-3):
            first_mismatch = t
    return {"num_envs": num_envs, "steps": steps, "max_abs_diff": worst, "done_mismatches": done_mismatch,
            "first_step_over_1e-3_or_done_mismatch": first_mismatch}


def time_pair(num_envs: int, steps: int, rounds: int, seed: int) -> dict[str, Any]:
    host = build_env(num_envs, seed, task=TASK)
    host.init_state()
    dev = device_env(num_envs, seed, numpy_draws=False)
    dev.reset()
    eager = device_env(num_envs, seed, numpy_draws=False, graph=False)
    eager.reset()
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (steps, num_envs, dev.action_dim)).astype(np.float32)
    actions_dev = torch.from_numpy(actions).cuda()
    for t in range(5):  # warm-up: lazy allocations, kernel loads, the device env's graph capture
        host.step(actions[t])
        dev.step(actions_dev[t])
        eager.step(actions_dev[t])
    torch.cuda.synchronize()
    sync_error = None
    torch.cuda.set_sync_debug_mode("error")
    try:
        for t in range(steps):
            dev.step(actions_dev[t])
    except RuntimeError as exc:  # a host sync inside the device env's step
        sync_error = str(exc).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    dev.reset()
    blocks: dict[str, list[float]] = {"host_env_ms": [], "device_env_ms": [], "device_env_eager_ms": [],
                                      "device_physics_ms": []}
    resets = {"host": 0, "device": 0}
    for _ in range(rounds):
        t0 = time.perf_counter()
        for t in range(steps):
            st = host.step(actions[t])
            resets["host"] += int((st.terminated | st.truncated).sum())
        blocks["host_env_ms"].append((time.perf_counter() - t0) * 1e3 / steps)
        done_count = torch.zeros((), dtype=torch.int64, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for t in range(steps):
            out = dev.step(actions_dev[t])
            done_count += (out.terminated | out.truncated).sum()
        torch.cuda.synchronize()
        blocks["device_env_ms"].append((time.perf_counter() - t0) * 1e3 / steps)
        resets["device"] += int(done_count)
        t0 = time.perf_counter()
        for t in range(steps):
            eager.step(actions_dev[t])
        torch.cuda.synchronize()
        blocks["device_env_eager_ms"].append((time.perf_counter() - t0) * 1e3 / steps)
        t0 = time.perf_counter()
        for _ in range(steps):
            dev.sim.step(dev.substeps)
        torch.cuda.synchronize()
        blocks["device_physics_ms"].append((time.perf_counter() - t0) * 1e3 / steps)
        dev.reset()
    summary = {key: {"median": statistics.median(v), "min": min(v), "max": max(v)} for key, v in blocks.items()}
    host_ms, dev_ms = summary["host_env_ms"]["median"], summary["device_env_ms"]["median"]
    return {"num_envs": num_envs, "steps_per_block": steps, "rounds": rounds, "blocks": blocks, "summary": summary,
            "speedup_device_over_host": host_ms / dev_ms, "device_env_steps_per_s": num_envs * 1e3 / dev_ms,
            "host_env_steps_per_s": num_envs * 1e3 / host_ms, "resets": resets,
            "device_env_graph": dev.graph_status,
            "device_env_host_sync": sync_error or "none (the step ran under torch's sync debug mode 'error')"}


def time_forms(num_envs: int, steps: int, rounds: int, seed: int, forms: list[str]) -> dict[str, Any]:
    """The device env's step alone in each of ``forms``, side by side (see the module docstring): the wall per step
    of each block, each form's median, its ratio to the first form's, the done rows it stepped through, and the
    form each env says it ran (``describe``: its step's graph status and switches).

    Each env makes its own stream Warp's current one, and its capture records Warp's launches there: so each is
    reset (captured) before the next is built, and none is reset again (its eager reset would launch on the last
    env's stream); episodes end and restart inside the step's graph.
    """
    envs = {}
    for form in forms:
        envs[form] = make_device_env(num_envs, seed, (), numpy_draws=False, draws_ahead=True, **FORMS[form])
        envs[form].reset()
    first = envs[forms[0]]
    cuda = first.device.type == "cuda"
    generator = torch.Generator(device=first.device).manual_seed(seed)
    actions = torch.rand((steps, num_envs, first.action_dim), generator=generator, device=first.device) * 2 - 1

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for dev in envs.values():  # warm-up: lazy allocations, kernel loads
        for t in range(min(steps, 5)):
            dev.step(actions[t])
    sync()
    blocks: dict[str, list[float]] = {form: [] for form in forms}
    done_rows = {form: torch.zeros((), dtype=torch.int64, device=first.device) for form in forms}
    for _ in range(rounds):
        for form, dev in envs.items():
            t0 = time.perf_counter()
            for t in range(steps):
                out = dev.step(actions[t])
                done_rows[form] += (out.terminated | out.truncated).sum()
            sync()
            blocks[form].append((time.perf_counter() - t0) * 1e3 / steps)
    median = {form: statistics.median(values) for form, values in blocks.items()}
    return {"num_envs": num_envs, "steps_per_block": steps, "rounds": rounds, "device": str(first.device),
            "blocks_ms_per_step": blocks, "median_ms_per_step": median,
            "ratio_to_first": {form: median[form] / median[forms[0]] for form in forms},
            "done_rows": {form: int(count) for form, count in done_rows.items()},
            "forms": {form: dev.describe() for form, dev in envs.items()}}


def profile_step(num_envs: int, steps: int, seed: int, form: str | None = None) -> dict[str, Any]:
    """The physics floor and the kernel split of one env step (see the module docstring): of the env the pair
    comparison builds, or with ``form`` of that form's env (``FORMS``, draws ahead), as ``--forms`` times it."""
    from torch.profiler import ProfilerActivity, profile

    dev = (device_env(num_envs, seed, numpy_draws=False, graph=False) if form is None else
           make_device_env(num_envs, seed, (), numpy_draws=False, graph=False, draws_ahead=True, **FORMS[form]))
    dev.reset()
    actions = torch.rand(steps, num_envs, dev.action_dim, device="cuda") * 2 - 1
    for t in range(3):
        dev.step(actions[t])
    physics = dev.sim.capture(lambda: dev.sim.step(dev.substeps), ())
    for _ in range(3):
        physics.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        physics.replay()
    torch.cuda.synchronize()
    physics_ms = (time.perf_counter() - t0) * 1e3 / steps
    dev.reset()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for t in range(steps):
            dev.step(actions[t])
        torch.cuda.synchronize()
    kernels: dict[str, dict[str, float]] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA or "memcpy" in event.name.lower():
            continue
        side = "warp" if "cuda_kernel_forward" in event.name else "torch"
        entry = kernels.setdefault(event.name, {"side": side, "count": 0, "us": 0.0})  # type: ignore[dict-item]
        entry["count"] += 1
        entry["us"] += event.device_time_total
    split: dict[str, dict[str, float]] = {}
    for entry in kernels.values():
        part = split.setdefault(str(entry["side"]), {"kernels_per_step": 0.0, "gpu_ms_per_step": 0.0})
        part["kernels_per_step"] += entry["count"] / steps
        part["gpu_ms_per_step"] += entry["us"] / 1e3 / steps
    top = sorted(kernels.items(), key=lambda item: -item[1]["us"])[:25]
    return {"num_envs": num_envs, "steps": steps, "form": form, "physics_graph_ms": physics_ms,
            "eager_step_split": split,
            "top_kernels": [{"name": name[:120], "side": e["side"], "per_step": e["count"] / steps,
                             "gpu_us_per_step": e["us"] / steps} for name, e in top]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--parity-steps", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--forms", nargs="+", choices=sorted(FORMS), default=None,
                        help="time the device env's step alone in these forms, side by side")
    parser.add_argument("--cpu-smoke", action="store_true", help="--forms on Warp's CPU device (no figures)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not (args.cpu_smoke and args.forms):
        print("device_env_bench: no CUDA device; the device env is timed on a GPU", file=sys.stderr)
        return 1
    result: dict[str, Any] = {
        "study": "device-env-step", "task": TASK, "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "versions": versions(), "series_sha256": series_sha256(), "runs": [], "parity": None}
    if args.forms:
        result.update(study="device-env-forms", cpu_smoke=bool(args.cpu_smoke))
        for n in args.num_envs:
            run = time_forms(n, args.steps, args.rounds, args.seed, args.forms)
            if args.profile:
                run["profile"] = profile_step(n, 20, args.seed, form=args.forms[0])
            result["runs"].append(run)
            print(json.dumps({k: run[k] for k in ("num_envs", "median_ms_per_step", "ratio_to_first", "forms")}),
                  flush=True)
            args.output.write_text(json.dumps(result, indent=1) + "\n")
        return 0
    if args.parity_steps:
        result["parity"] = parity(256, args.parity_steps, args.seed)
        print(json.dumps(result["parity"]), flush=True)
        result["determinism"] = gpu_determinism(256, args.parity_steps, args.seed)
        print(json.dumps(result["determinism"]), flush=True)
    for n in args.num_envs:
        run = time_pair(n, args.steps, args.rounds, args.seed)
        result["runs"].append(run)
        print(json.dumps({k: run[k] for k in ("num_envs", "summary", "speedup_device_over_host", "resets",
                                              "device_env_graph", "device_env_host_sync")}), flush=True)
        if args.profile:
            run["profile"] = profile_step(n, 20, args.seed)
            print(json.dumps({k: v for k, v in run["profile"].items() if k != "top_kernels"}), flush=True)
        args.output.write_text(json.dumps(result, indent=1) + "\n")
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
