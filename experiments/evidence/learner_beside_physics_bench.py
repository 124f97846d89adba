#!/usr/bin/env python3
"""How much the learner's graph beside it slows MuJoCo Warp's physics, and whether a learner kept off some SMs helps.

In training the device collector steps the env on its own stream while the learner's whole-iteration graph runs on
torch's stream, and the env step's own timestamps show the physics part stretched there: at the report's setting
4.93 ms against 3.97 ms alone, at UniLab's defaults 14.21 against 8.60 ms (``results/2026-12-06-h100-env-step-split``,
an H100). That stretch, not the env step alone, is what keeps the report's setting above 5 ms per iteration. One
suspect is the learner's matrix products: cuBLAS's kernels on Hopper may be persistent (one block per SM, each
taking several tiles), so while one runs no SM is free for the physics' small kernels, whatever the streams'
priorities. torch can ask cuBLASLt to leave SMs free (``torch._C._set_sm_carveout_experimental``: the products'
kernels are chosen for that many fewer SMs); the choice is made when a product is called, so for a CUDA graph when
it is captured: this bench sets it around each learner's warm-up (``products_leaving``). The series has no such
switch: on a lent H100 no carveout shortened training at UniLab's defaults
(results/2026-12-06-h100-learner-beside-physics).

This bench builds, at ``--setting`` (the report's at its 2/1/1 schedule), the learner as training does
(``learner_kernel_profile``'s builder: the tree's config, G1 Walk Flat's dimensions, the whole-iteration graph
captured at its warm-up), once per ``--carveouts`` value (0: none, torch's default), and the
device env of the tree's ``g1_walk_flat/mjwarp`` config at the setting's env count in the product's form, whose
MuJoCo Warp substeps it captures as one graph. Then for ``--rounds`` rounds, blocks of ``--steps`` iterations
alternate between: the physics alone (one replay per iteration, on the env's stream), and per carveout the learner
alone (one iteration) and both together, started together each iteration as in training (each stream waits for the
other's previous iteration), the physics on the env's stream and the learner on torch's; every other round runs them
in the reverse order. CUDA events time each stream's span per iteration; a block's figure is its mean, an arm's its
median block. The JSON gives, per carveout, the physics' stretch beside the learner (together minus alone), the
learner's time alone and together, and the iteration (the later of the two streams' ends). The learner learns on
random batches and the physics steps from where the env's warm-up left it: times, not training.

Run from a UniLab tree root with the overlay first on ``PYTHONPATH``, on a CUDA device. ``--cpu-smoke`` builds
both on the CPU and runs each arm eagerly once (no streams, no graphs, no figures: a smoke run, so that a GPU's
minutes are not lost to a broken script). Writes one JSON with the machine and versions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "bench"))
from bench_configs import SETTINGS  # noqa: E402
from device_env_build import machine, make_device_env, series_sha256, versions  # noqa: E402
from learner_kernel_profile import compose, g1_dims, random_batches  # noqa: E402
from learner_study import runner_schedule, update_iteration, warm_up  # noqa: E402


@contextlib.contextmanager
def products_leaving(sms: int) -> Iterator[None]:
    """cuBLAS products called inside leave ``sms`` SMs free (0: torch's choice, nothing set); the carveout set
    before is set again on the way out, also when the body raises."""
    if not sms:
        yield
        return
    before = torch._C._get_sm_carveout_experimental()  # noqa: SLF001 - torch's only handle on cuBLASLt's SM count
    torch._C._set_sm_carveout_experimental(sms)  # noqa: SLF001
    try:
        yield
    finally:
        torch._C._set_sm_carveout_experimental(before)  # noqa: SLF001


def build_learner(cfg: Any, dims: dict[str, int], device: torch.device, carveout: int) -> Callable[[], None]:
    """The learner of ``cfg`` warmed up (its graph captured) with its products leaving ``carveout`` SMs free (0:
    torch's default), and one iteration of it on random batches already on the device."""
    from uni_rl.algos.flash_sac.double_buffer import flashsac_learner_kwargs
    from uni_rl.algos.flash_sac.learner import FlashSACLearner

    torch.manual_seed(int(cfg.algo.seed))
    learner = FlashSACLearner(device=str(device), **flashsac_learner_kwargs(cfg, **dims))
    updates, frequency = int(cfg.algo.updates_per_step), int(cfg.algo.policy_frequency)
    batches = random_batches(dims, int(cfg.algo.batch_size), updates, device)
    schedule = runner_schedule(updates, frequency)
    with products_leaving(carveout):
        warm_up(learner, {k: torch.zeros_like(v) for k, v in batches[0].items()}, updates, frequency)
    return lambda: update_iteration(learner, batches, schedule)


class Spans:
    """Per-iteration CUDA event pairs on one stream; their mean span in ms once the device is synchronized."""

    def __init__(self) -> None:
        self.pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def run(self, work: Callable[[], None], stream: torch.cuda.Stream) -> torch.cuda.Event:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            begin.record()
            work()
            end.record()
        self.pairs.append((begin, end))
        return end

    def mean_ms(self) -> float:
        return statistics.fmean(begin.elapsed_time(end) for begin, end in self.pairs)


def together(physics: Callable[[], None], learner: Callable[[], None], env_stream: torch.cuda.Stream,
             steps: int) -> dict[str, float]:
    """``steps`` iterations of both streams started together, as in training: the physics' span, the learner's and
    the iteration's (from the earlier start to the later end), means in ms."""
    main = torch.cuda.current_stream()
    physics_spans, learner_spans = Spans(), Spans()
    iterations: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    for _ in range(steps):
        start = torch.cuda.Event(enable_timing=True)
        env_stream.wait_stream(main)
        main.wait_stream(env_stream)
        start.record(main)
        env_stream.wait_event(start)
        env_end = physics_spans.run(physics, env_stream)
        learner_spans.run(learner, main)
        main.wait_event(env_end)
        end = torch.cuda.Event(enable_timing=True)
        end.record(main)
        iterations.append((start, end))
    torch.cuda.synchronize()
    return {"physics_ms": physics_spans.mean_ms(), "learner_ms": learner_spans.mean_ms(),
            "iteration_ms": statistics.fmean(a.elapsed_time(b) for a, b in iterations)}


def alone(work: Callable[[], None], stream: torch.cuda.Stream, steps: int) -> float:
    spans = Spans()
    for _ in range(steps):
        spans.run(work, stream)
    torch.cuda.synchronize()
    return spans.mean_ms()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--setting", choices=("report", "unilab-default"), default="report")
    parser.add_argument("--updates-per-step", type=int, default=None,
                        help="the schedule (the report's setting: 2, its 2/1/1, unless given; UniLab's defaults: "
                             "the tree's 8/4/4)")
    parser.add_argument("--carveouts", type=int, nargs="+", default=[0, 16, 32],
                        help="SMs the learner's matrix products leave to others (0: torch's default)")
    parser.add_argument("--steps", type=int, default=50, help="iterations per block")
    parser.add_argument("--rounds", type=int, default=4, help="an even count: each order as often")
    parser.add_argument("--warm-steps", type=int, default=20, help="env steps before the physics is captured")
    parser.add_argument("--cpu-smoke", action="store_true", help="both built on the CPU, each arm once (no figures)")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_smoke:
        print("learner_beside_physics_bench: needs a CUDA device (two streams of CUDA graphs)", file=sys.stderr)
        return 2
    if 0 not in args.carveouts:
        args.carveouts.insert(0, 0)
    device = torch.device("cuda" if cuda else "cpu")
    cfg = compose(args.setting, args.updates_per_step or SETTINGS[args.setting].schedules[0])
    dims = g1_dims(cfg)
    num_envs = 8 if args.cpu_smoke else int(cfg.algo.num_envs)
    dev = make_device_env(num_envs, int(cfg.algo.seed), (), numpy_draws=False, graph=False, draws_ahead=True,
                          reset_only_when_done=True)
    dev.reset()
    generator = torch.Generator(device=dev.device).manual_seed(int(cfg.algo.seed))
    for _ in range(2 if args.cpu_smoke else args.warm_steps):
        dev.step(torch.rand((num_envs, dev.action_dim), generator=generator, device=dev.device) * 2 - 1)
    learners = {carveout: build_learner(cfg, dims, device, carveout) for carveout in args.carveouts}
    result: dict[str, Any] = {
        "study": "learner-beside-physics", "setting": args.setting, "num_envs": num_envs,
        "updates_per_step": int(cfg.algo.updates_per_step), "policy_frequency": int(cfg.algo.policy_frequency),
        "batch_size": int(cfg.algo.batch_size),
        "carveouts": args.carveouts, "steps_per_block": args.steps, "rounds": args.rounds, "cpu_smoke": args.cpu_smoke,
        "device": str(device), "machine": machine(),
        "versions": versions(), "series_sha256": series_sha256()}
    if args.cpu_smoke:
        dev.sim.step(dev.substeps)
        ran = {}
        for carveout, learner in learners.items():
            t0 = time.perf_counter()
            learner()
            ran[str(carveout)] = time.perf_counter() - t0
        result.update(learner_iteration_s=ran)
        args.output.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result))
        return 0
    physics = dev.sim.capture(lambda: dev.sim.step(dev.substeps), ())
    env_stream, main_stream = dev.sim.stream, torch.cuda.current_stream()
    blocks: dict[str, list[Any]] = {"physics alone": []}
    for carveout in args.carveouts:
        blocks[f"learner alone, carveout {carveout}"] = []
        blocks[f"together, carveout {carveout}"] = []
    for round_index in range(args.rounds):
        # Every other round in the reverse order: over an even count of rounds a steady drift of the GPU's pace
        # favours no arm.
        order = list(learners.items())[::-1 if round_index % 2 else 1]
        if not round_index % 2:
            blocks["physics alone"].append(alone(physics.replay, env_stream, args.steps))
        for carveout, learner in order:
            blocks[f"learner alone, carveout {carveout}"].append(alone(learner, main_stream, args.steps))
            blocks[f"together, carveout {carveout}"].append(together(physics.replay, learner, env_stream, args.steps))
        if round_index % 2:
            blocks["physics alone"].append(alone(physics.replay, env_stream, args.steps))
    physics_alone = statistics.median(blocks["physics alone"])
    arms = {}
    for carveout in args.carveouts:
        both = blocks[f"together, carveout {carveout}"]
        medians = {key: statistics.median(block[key] for block in both) for key in both[0]}
        arms[str(carveout)] = {"learner_alone_ms": statistics.median(blocks[f"learner alone, carveout {carveout}"]),
                               **{f"together_{key}": value for key, value in medians.items()},
                               "physics_stretch_ms": medians["physics_ms"] - physics_alone}
    result.update(physics_alone_ms=physics_alone, arms=arms, blocks=blocks)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("setting", "num_envs", "physics_alone_ms", "arms")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
