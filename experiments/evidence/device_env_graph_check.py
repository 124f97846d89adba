#!/usr/bin/env python3
"""The device env's CUDA graphs on a GPU: their memory, the draws taken ahead, the reset's condition, a failed capture,
the step's timestamps of its parts, the graphed step against the eager one.

Run on a CUDA host from a UniLab tree root with the overlay first on ``PYTHONPATH`` (``device_evidence.sh
env-graph``); on a machine without CUDA it says so in one line and exits 2. The device env of ``--task`` (G1 Walk
Flat by default) from the tree's config of that task on ``mjwarp`` (``device_env_build.make_device_env``), seeded
uniform actions.

  memory    after the env's first reset (which captures its step), every byte of the cached free memory of
            torch's shared pool on the env's stream is taken by sentinel probes; ``--steps`` graph replays
            follow. The step's graph must write into none of them: its torch temporaries live in pools of its own
            (flashsac_runtime.envs). ``--shared-pool`` captures without the env's own pool (MuJoCo Warp's conditional
            nodes end and resume the capture): the control. On an H200 with torch 2.11 the control's probes came
            through untouched too (``results/2026-12-05-h200-env-draws-sensors/`` in commit 44628292896f): there the check shows no
            temporaries in the shared pool either way, and is no gate.
  draws     two envs taking their draws ahead from one seed, one replaying its graphs (the step's and the
            draws'), one eager: after each of ``--steps`` steps the draws the next step will read must be
            bitwise equal (torch's Philox draws are the same numbers wherever they run, when the generator's
            offsets are right). ``--offset-shifted`` draws once more from the graphed env's generator after its
            reset, so that its later draws come from other offsets: the control, which must differ.
  reset     the env's reset of its done rows as a conditional node of the step's graph (flashsac_runtime.envs): episodes of
            ``--episode-seconds`` (time-outs every few steps, steps without a done row between them); after each
            of ``--steps`` graph replays every done row must have been reset (its episode counter at 0, an
            observation other than its final one), every other row must keep the step's observation, and on a
            step without a done row the reset must not have run (MuJoCo Warp's reset mask still holds the rows of
            the last reset; a reset that runs clears it), with steps of both kinds. Controls, each must fail:
            ``--condition-unset`` never sets the condition in the graph (fails at the first time-out);
            ``--every-step`` runs the reset on every step (the default; the reset is seen to run without a done
            row).
  failed    the step's capture broken on purpose (a host read inside the step): the env must say it stays eager
            and step on, ``--steps`` times, with finite outputs, torch's current stream restored, and the
            allocator's event sweep (``empty_cache``) must pass (flashsac_runtime.envs). ``--leave-open`` skips closing
            what torch leaves open of the failed capture: the control, which on an H200 with torch 2.11 aborted
            the process (the allocator still counted the capture as under way).
  split     the step's timestamps of its parts (flashsac_runtime.envs: physics, terms, reset; the collector's split of the
            env step) inside the replayed step graph, the product's form (reset only when done): each of
            ``--steps`` replays is timed by CUDA events around it, the env's ring is read after it, and its row
            must hold the next step number, three positive parts that fit in the replay's event time (within
            ``SPLIT_CLOCK_SLACK_MS``: the device clock and the events are two clocks), and a physics part of at
            least half the step (at 256 envs it is most of it). ``--misplaced-stamp`` takes the physics' stamp
            before the physics (``device_env_controls.misplace_physics_stamp``): the control, which must fail.
  twin      the step's CUDA graph against the same env stepped eagerly (``_run_twin``), ``--steps`` steps each from
            the same seed and draws: both must end the same episodes until their physics part by more than
            ``TWIN_ATOL`` (MuJoCo Warp's contact order is not fixed from run to run), and their finished episodes'
            mean lengths must agree within ``TWIN_LENGTH_RTOL``; the JSON has both runs' episode counts, mean lengths
            and one-step episodes. Controls, each must fail: ``--condition-unset`` (as in reset);
            ``--rebind-state`` (motion tracking) stores the command's robot and relative state by binding new
            tensors (``terms.motion_tracking._store`` undone), so that the graph's next step reads the storage of
            its capture, stale.

Prints one JSON; exit 0 when the check holds, 1 when it does not, 2 without CUDA.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_env_build import TASKS, make_device_env, seeded_actions, series_sha256, versions  # noqa: E402
from device_env_controls import misplace_physics_stamp, rebind_motion_state  # noqa: E402

SENTINEL = 7.0
#: Probe sizes in float32 elements: above 1 MiB (torch's large pool) then 512 bytes (its small pool).
PROBE_ELEMENTS = ((1 << 18) + 128, 128)
MAX_PROBES = 200_000
#: How far the env's parts may exceed the replay's event time (ms): two clocks of one GPU, each read at its own
#: resolution (``%globaltimer`` updates every microsecond or less).
SPLIT_CLOCK_SLACK_MS = 0.01
#: twin: a step's outputs differing by more than this are two runs whose physics have parted.
TWIN_ATOL = 1e-4
#: twin: how far the graphed env's mean episode length may lie from the eager env's, relative to it.
TWIN_LENGTH_RTOL = 0.1


def fill_cached_memory(dev: Any) -> list[torch.Tensor]:
    """Sentinel tensors on the env's stream until the allocator has to reserve more memory: by then they hold every
    cached free block of torch's shared pool for that stream (a stream's blocks serve only that stream)."""
    probes: list[torch.Tensor] = []
    with torch.cuda.stream(dev.sim.stream):
        for elements in PROBE_ELEMENTS:
            reserved = torch.cuda.memory_reserved(dev.device)
            while len(probes) < MAX_PROBES and torch.cuda.memory_reserved(dev.device) == reserved:
                probes.append(torch.full((elements,), SENTINEL, dtype=torch.float32, device=dev.device))
    torch.cuda.synchronize(dev.device)
    return probes


def memory(args: argparse.Namespace) -> dict[str, Any]:
    if args.shared_pool:  # the control: the capture without the env's own pool
        torch.cuda.use_mem_pool = lambda pool, device=None: contextlib.nullcontext()
    dev = make_device_env(args.num_envs, args.seed, (), numpy_draws=False, task=args.task)
    dev.reset()
    probes = fill_cached_memory(dev)
    actions = seeded_actions(dev, args.steps)
    for t in range(args.steps):
        dev.step(actions[t])
    torch.cuda.synchronize(dev.device)
    overwritten = sum(int(bool((probe != SENTINEL).any())) for probe in probes)
    captured = dev.graph_status == "captured"
    return {"mode": "memory", "shared_pool_control": bool(args.shared_pool), "graph_status": dev.graph_status,
            "probes": len(probes), "probe_mib": sum(p.numel() * 4 for p in probes) / 2**20,
            "probes_overwritten": overwritten, "holds": captured and overwritten == 0}


def next_draws(dev: Any) -> torch.Tensor:
    return dev._drawn._bytes[0].clone()  # noqa: SLF001 - the bytes of the draws the next step reads


def draws(args: argparse.Namespace) -> dict[str, Any]:
    # Each device env makes its own stream Warp's current stream: the graphed env is built last, so that its
    # capture records its own physics (the eager env's physics then runs on the graphed env's stream, unordered
    # with its torch work; the draws compared here do not depend on it).
    eager = make_device_env(args.num_envs, args.seed, (), numpy_draws=False, graph=False, draws_ahead=True,
                            task=args.task)
    graphed = make_device_env(args.num_envs, args.seed, (), numpy_draws=False, draws_ahead=True, task=args.task)
    graphed.reset()  # a reset, one eager step (its next draws taken), the capture (no draw), a reset
    eager.reset()  # the same draws, in the same order
    eager.step(torch.zeros((eager.num_envs, eager.action_dim), device=eager.device))
    eager.reset()
    if args.offset_shifted:  # the control: the graphed env's generator one draw further on
        torch.rand(1, device=graphed.device, generator=graphed.draws.generator)
    first_difference = None
    actions = seeded_actions(graphed, args.steps)
    for t in range(args.steps):
        graphed.step(actions[t])
        eager.step(actions[t])
        if first_difference is None and not torch.equal(next_draws(graphed), next_draws(eager)):
            first_difference = t
    captured = graphed.graph_status == "captured" and graphed._draw_graph is not None  # noqa: SLF001
    return {"mode": "draws", "offset_shifted_control": bool(args.offset_shifted),
            "graph_status": graphed.graph_status, "draws_graph": graphed._draw_graph is not None,  # noqa: SLF001
            "first_difference_step": first_difference, "holds": captured and first_difference is None}


def reset(args: argparse.Namespace) -> dict[str, Any]:
    dev = make_device_env(args.num_envs, args.seed, (f"env.max_episode_seconds={args.episode_seconds}",),
                          numpy_draws=False, draws_ahead=True, reset_only_when_done=not args.every_step,
                          task=args.task)
    if args.condition_unset:  # the control: the reset's condition never set in the step's graph
        when_any = dev.sim.when_any
        dev.sim.when_any = lambda rows, body: when_any(torch.zeros_like(rows), body)
    dev.reset()
    actions = seeded_actions(dev, args.steps)
    done_steps = done_rows = reset_ran_idle = 0
    first_wrong = None
    for t in range(args.steps):
        out = dev.step(actions[t])
        done = out.terminated | out.truncated
        any_done = bool(done.any())
        done_rows += int(done.sum())
        done_steps += any_done
        # A reset that runs writes its rows into MuJoCo Warp's reset mask: all clear after a step without a done row.
        # A skipped one leaves the mask of the last reset (which had rows), so a clear mask there means it ran.
        reset_ran_idle += not any_done and not bool(dev.sim._reset_mask.any())  # noqa: SLF001
        # a done row was reset (episode counter at 0, a new observation); any other row kept the step's observation
        reset_rows = bool((dev.steps[done] == 0).all()) and bool(
            (out.policy_obs[done] != out.final_policy_obs[done]).any(dim=1).all())
        kept_rows = torch.equal(out.policy_obs[~done], out.final_policy_obs[~done])
        if first_wrong is None and not (reset_rows and kept_rows):
            first_wrong = t
    captured = dev.graph_status == "captured"
    return {"mode": "reset", "condition_unset_control": bool(args.condition_unset), "graph_status": dev.graph_status,
            "episode_seconds": args.episode_seconds, "done_steps": done_steps, "idle_steps": args.steps - done_steps,
            "every_step_control": bool(args.every_step), "done_rows": done_rows, "first_wrong_step": first_wrong,
            "idle_steps_the_reset_ran": reset_ran_idle,
            "holds": captured and first_wrong is None and reset_ran_idle == 0 and 0 < done_steps < args.steps}


def failed(args: argparse.Namespace) -> dict[str, Any]:
    dev = make_device_env(args.num_envs, args.seed, (), numpy_draws=False, task=args.task)
    terminate = dev._terminate  # noqa: SLF001

    def with_host_read() -> None:
        terminate()
        float(dev.reward.sum())  # a host read: illegal inside a capture

    dev._terminate = with_host_read  # noqa: SLF001
    if args.leave_open:
        from flashsac_runtime import cuda_capture

        cuda_capture.close_failed_capture = lambda *_: None
    dev.reset()
    actions = seeded_actions(dev, args.steps)
    error, stepped, finite = None, 0, True
    try:
        for t in range(args.steps):
            out = dev.step(actions[t])
            stepped += 1
            finite = finite and bool(torch.isfinite(out.policy_obs).all() and torch.isfinite(out.reward).all())
    except RuntimeError as exc:
        error, finite = str(exc).splitlines()[0], False
    eager = dev.graph_status.startswith("eager (capture failed")
    stream_restored = torch.cuda.current_stream() == torch.cuda.default_stream()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the allocator's event sweep, where a capture left open aborts the process
    return {"mode": "failed", "leave_open_control": bool(args.leave_open), "graph_status": dev.graph_status,
            "steps_taken": stepped, "error": error, "finite": finite, "stream_restored": stream_restored,
            "holds": eager and stepped == args.steps and finite and stream_restored}


def split(args: argparse.Namespace) -> dict[str, Any]:
    dev = make_device_env(args.num_envs, args.seed, (f"env.max_episode_seconds={args.episode_seconds}",),
                          numpy_draws=False, draws_ahead=True, reset_only_when_done=True, task=args.task)
    if args.misplaced_stamp:
        misplace_physics_stamp(dev)
    dev.reset()  # captures the step, stamps included
    stamps = dev.step_stamps
    actions = seeded_actions(dev, args.steps)
    torch.cuda.synchronize(dev.device)
    last = int(stamps.ring[:, 0].max())
    steps: list[dict[str, Any]] = []
    for t in range(args.steps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        dev.step(actions[t])
        end.record()
        torch.cuda.synchronize(dev.device)
        parts, through = stamps.split_ms(stamps.ring.tolist(), last)
        steps.append({"step": through, "new": through - last, "replay_ms": begin.elapsed_time(end), **parts})
        last = through
    good = [s for s in steps if s["new"] == 1 and all(s[p] > 0.0 for p in ("env_physics", "env_terms", "env_reset"))
            and s["env_physics"] + s["env_terms"] + s["env_reset"] <= s["replay_ms"] + SPLIT_CLOCK_SLACK_MS
            and s["env_physics"] >= 0.5 * s["replay_ms"]]
    captured = dev.graph_status == "captured"
    mean = {key: sum(s[key] for s in steps) / len(steps) for key in ("replay_ms", "env_physics", "env_terms",
                                                                     "env_reset")}
    return {"mode": "split", "misplaced_stamp_control": bool(args.misplaced_stamp), "graph_status": dev.graph_status,
            "form": dev.describe(), "episode_seconds": args.episode_seconds, "mean_ms": mean, "steps_checked": steps,
            "steps_holding": len(good), "holds": captured and len(good) == args.steps}


def _run_twin(dev: Any, steps: int) -> dict[str, Any]:
    """``steps`` seeded steps of ``dev``: its outputs on the host, step by step, and its finished episodes' lengths."""
    actions = seeded_actions(dev, steps)
    length = torch.zeros(dev.num_envs, dtype=torch.int64, device=dev.device)
    lengths: list[torch.Tensor] = []
    outputs: list[dict[str, torch.Tensor]] = []
    for t in range(steps):
        out = dev.step(actions[t])
        done = out.terminated | out.truncated
        length += 1
        lengths.append(length[done].cpu())
        length.masked_fill_(done, 0)
        outputs.append({"policy_obs": out.policy_obs.cpu(), "reward": out.reward.cpu(),
                        "terminated": out.terminated.cpu(), "truncated": out.truncated.cpu()})
    ended = torch.cat(lengths).double()
    return {"outputs": outputs, "episodes": {
        "count": int(ended.numel()), "mean_length": float(ended.mean()) if ended.numel() else None,
        "one_step": int((ended == 1).sum())}}


def twin(args: argparse.Namespace) -> dict[str, Any]:
    """The step's CUDA graph (the training form: draws ahead, the reset only on a step with a done row) against the
    same env stepped eagerly from the same seed, one after the other: the same draws (the eager env resets, takes
    one step of zero actions and resets again, as the graphed env does around its capture), the same seeded
    actions."""
    if args.rebind_state:  # the control: the motion state stored by binding new tensors, not into the held ones
        rebind_motion_state()
    graphed = make_device_env(args.num_envs, args.seed, (), numpy_draws=False, draws_ahead=True,
                              reset_only_when_done=True, task=args.task)
    if args.condition_unset:  # the control: the reset's condition never set in the step's graph
        when_any = graphed.sim.when_any
        graphed.sim.when_any = lambda rows, body: when_any(torch.zeros_like(rows), body)
    graphed.reset()
    status = graphed.graph_status
    by_graph = _run_twin(graphed, args.steps)
    del graphed
    torch.cuda.synchronize()
    eager = make_device_env(args.num_envs, args.seed, (), numpy_draws=False, graph=False, draws_ahead=True,
                            reset_only_when_done=True, task=args.task)
    eager.reset()
    if status != "off":  # the graphed env's step before its capture, and its reset after it
        eager.step(torch.zeros((eager.num_envs, eager.action_dim), device=eager.device))
        eager.reset()
    by_eager = _run_twin(eager, args.steps)
    first_diverged = first_done_differs = None
    largest = 0.0
    for t, (g, e) in enumerate(zip(by_graph["outputs"], by_eager["outputs"])):
        diff = max(float((g[k].double() - e[k].double()).abs().max()) for k in ("policy_obs", "reward"))
        largest = max(largest, diff)
        if first_diverged is None and diff > TWIN_ATOL:
            first_diverged = t
        if first_done_differs is None and not (torch.equal(g["terminated"], e["terminated"])
                                               and torch.equal(g["truncated"], e["truncated"])):
            first_done_differs = t
    # Until the two runs' physics part (MuJoCo Warp's contact order is not fixed from run to run), they end the same
    # episodes; after it, their episode lengths must still agree in the mean.
    g_mean, e_mean = by_graph["episodes"]["mean_length"], by_eager["episodes"]["mean_length"]
    same_until_diverged = first_done_differs is None or (first_diverged is not None
                                                          and first_done_differs >= first_diverged)
    lengths_agree = g_mean is not None and e_mean is not None and abs(g_mean - e_mean) <= TWIN_LENGTH_RTOL * e_mean
    return {"mode": "twin", "task": args.task, "condition_unset_control": bool(args.condition_unset),
            "rebind_state_control": bool(args.rebind_state),
            "graph_status": status, "first_step_diverged": first_diverged,
            "first_step_dones_differ": first_done_differs, "largest_difference": largest,
            "episodes_graph": by_graph["episodes"], "episodes_eager": by_eager["episodes"],
            "holds": status == "captured" and same_until_diverged and lengths_agree}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("memory", "draws", "reset", "failed", "split", "twin"), required=True)
    parser.add_argument("--task", choices=sorted(TASKS), default="g1_walk_flat")
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shared-pool", action="store_true", help="memory: the negative control")
    parser.add_argument("--offset-shifted", action="store_true", help="draws: the negative control")
    parser.add_argument("--episode-seconds", type=float, default=0.2,
                        help="reset, split: the episode length (time-outs)")
    parser.add_argument("--condition-unset", action="store_true", help="reset, twin: a negative control")
    parser.add_argument("--every-step", action="store_true", help="reset: a negative control")
    parser.add_argument("--rebind-state", action="store_true", help="twin (motion tracking): a negative control")
    parser.add_argument("--leave-open", action="store_true",
                        help="failed: the negative control (torch's half-open capture not closed)")
    parser.add_argument("--misplaced-stamp", action="store_true", help="split: the negative control")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("device_env_graph_check: needs a CUDA device (the env's CUDA graphs)", file=sys.stderr)
        return 2
    result = {"memory": memory, "draws": draws, "reset": reset, "failed": failed, "split": split,
              "twin": twin}[args.mode](args)
    result.update(num_envs=args.num_envs, steps=args.steps, device=torch.cuda.get_device_name(),
                  versions=versions(), series_sha256=series_sha256())
    print(json.dumps(result))
    return 0 if result["holds"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
