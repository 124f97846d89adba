"""Replay stability of the patched FlashSAC learner's CUDA graph paths (GPU only).

For each graph path (full-objective compile with Inductor's CUDA graphs; full-objective
compile with the manual CUDA graphs; the whole-cycle CUDA graph, one replay per
iteration) the patched learner runs ``--iterations``
consecutive runner iterations (2 critic updates, 1 actor update, 2 target updates, then
the one deferred-metrics read). Checked at every iteration:

* own-iteration metrics: right after each update the harness takes a device copy of
  the row that update wrote; the values read at the end of the iteration, after all of
  the iteration's later replays, must equal the mean of those copies exactly. Every
  ``DELAYED_READ_EVERY`` iterations the read waits one more iteration, so rows must
  also survive a whole further iteration of replays. A row that aliased graph-owned
  memory would come back with a later update's values. (The whole-cycle graph
  writes all its rows in one replay: they are copied right after it.)
* tracking: an eager patched learner is loaded with the graph learner's full state
  before each iteration, both run the iteration on the same batches and random stream
  (Inductor ``fallback_random``), and their parameters, BatchNorm statistics, whole
  parameter step, Adam moments (``TRACKING_TOL`` per iteration and
  ``TRACKING_MEDIAN_TOL`` over the run, see ``tracking_errors``) and metrics
  (``METRIC_REL_TOL``) must agree to float rounding of one iteration. A
  free-running comparison over 1000 iterations would measure chaos, not correctness:
  this learner amplifies last-bit differences (argmin over the critics, BatchNorm).
  A short learning-rate schedule makes the rate change throughout, so a graph that
  kept a stale rate would fail the ``update`` comparison.
* nothing compiles after the warm-up (dynamo's unique-graph counter does not move) and
  Inductor records no CUDA graph again.

Run by ``make bench`` first (``CHECK_REPLAY``) and by ``device/device_evidence.sh checks``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_configs  # noqa: E402  (the configuration table)
import bench_env  # noqa: E402  (VERSIONS.env, drift: one reader for the whole project)
import learner_study  # noqa: E402  (the learner, batches and update loop shared with validate_numerics)
from replay_tracking import TRACKING_MEDIAN_TOL, TRACKING_TOL, parameters_of, tracking_errors  # noqa: E402

LEARNER_KWARGS: dict[str, Any] = {
    **learner_study.BASE_LEARNER_KWARGS,
    **learner_study.GPU_HIDDEN_DIMS,
    "finite_guard": True,
    "deferred_metrics": True,
    "learning_rate_init": 1e-4,
    "learning_rate_peak": 3e-4,
    "learning_rate_end": 5e-5,
    "learning_rate_warmup_steps": 200,
    "learning_rate_decay_steps": 2000,
}
#: The graph paths, their switches from the one configuration table.
PATHS: dict[str, dict[str, bool]] = bench_configs.study_switches(bench_configs.REPLAY_STUDY)
BATCH_SIZE = 256
UPDATES_PER_STEP = 2
POLICY_FREQUENCY = 2
BATCH_POOL = 16
DELAYED_READ_EVERY = 50
METRIC_REL_TOL = 1e-3
METRIC_ABS_FLOOR = 1e-3


def make_batches(torch: Any, device: str) -> list[dict[str, Any]]:
    """The pool of batches the iterations cycle through (seeded: the same every run)."""
    generator = torch.Generator().manual_seed(99)
    return [
        {k: v.to(device) for k, v in learner_study.random_batch(torch, generator, BATCH_SIZE).items()}
        for _ in range(BATCH_POOL * UPDATES_PER_STEP)
    ]


def iteration_schedule() -> Any:
    """The runner's update schedule of one iteration (imported from the patched root)."""
    return learner_study.runner_schedule(UPDATES_PER_STEP, POLICY_FREQUENCY)


def run_updates(learner: Any, batches: list[dict[str, Any]], peeks: list[Any] | None) -> None:
    """One runner iteration's updates through the runner's entry points.

    With ``peeks``, a device copy of each freshly written metrics row is kept.
    """
    buffer = learner._metrics_buffer
    if learner_study.whole_cycle(learner):
        learner_study.run_iteration(learner, batches, POLICY_FREQUENCY, read_metrics=False)
        if peeks is not None:
            schedule = iteration_schedule()
            for group in ("critic", "actor"):
                pending = buffer.pending(group)
                written = sum(update.kind == group for update in schedule)
                for row in range(pending.shape[0] - written, pending.shape[0]):
                    peeks.append((group, pending[row : row + 1]))
        return

    def peek(update_idx: int, group: str) -> None:
        assert peeks is not None
        peeks.append((group, buffer.pending(group)[-1:]))

    learner_study.run_iteration(
        learner, batches, POLICY_FREQUENCY, read_metrics=False, after=peek if peeks is not None else None
    )


def expected_from_peeks(learner: Any, peeks: list[Any]) -> dict[str, float]:
    """The iteration means recomputed from the rows copied right after each update."""
    names = learner._metric_names
    rows: dict[str, list[list[float]]] = {"critic": [], "actor": []}
    for group, row in peeks:
        rows[group].append(row[0].tolist())
    expected: dict[str, float] = {}
    for group, group_rows in rows.items():
        for index, name in enumerate(names[group]):
            if group_rows:
                expected[name] = statistics.mean(r[index] for r in group_rows)
    return expected


@dataclasses.dataclass
class _Tally:
    """What one path's run accumulates over its iterations (the report is made from it)."""

    own_iteration_failures: list[str] = dataclasses.field(default_factory=list)
    tracking_failures: list[str] = dataclasses.field(default_factory=list)
    worst_metric: tuple[float, str] = (0.0, "")
    worst_state: dict[str, tuple[float, str]] = dataclasses.field(default_factory=dict)
    errors_by_kind: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    delayed_reads: int = 0
    iteration_ms: list[float] = dataclasses.field(default_factory=list)
    lrs: list[float] = dataclasses.field(default_factory=list)


def run_path(torch: Any, learner_module: Any, name: str, iterations: int) -> dict[str, Any]:
    """One graph path over ``iterations`` runner iterations, each tracked against eager (module docstring)."""
    from torch._dynamo.utils import counters

    def build(**switches: Any) -> Any:
        return learner_study.build_learner(learner_module, "cuda", 11, dict(LEARNER_KWARGS, **switches))

    learner = build(**PATHS[name])
    reference = build()
    batches = make_batches(torch, "cuda")
    dry = {k: torch.zeros_like(v) for k, v in batches[0].items()}
    warm_start = time.perf_counter()
    learner_study.warm_up(learner, dry, UPDATES_PER_STEP, POLICY_FREQUENCY)
    warm_up_seconds = time.perf_counter() - warm_start
    graphs_after_warm_up = int(counters["stats"]["unique_graphs"])
    inductor_after_warm_up = dict(counters["inductor"])

    reward_generator = torch.Generator(device="cuda").manual_seed(5)
    tally = _Tally()
    iteration = 0
    while iteration < iterations:
        span = 2 if iteration % DELAYED_READ_EVERY == DELAYED_READ_EVERY - 2 else 1
        span = min(span, iterations - iteration)
        _run_span(torch, learner, reference, batches, reward_generator, iteration, span, tally)
        iteration += span

    graphs_compiled_after_warm_up = int(counters["stats"]["unique_graphs"]) - graphs_after_warm_up
    inductor_delta = {
        key: value - inductor_after_warm_up.get(key, 0)
        for key, value in counters["inductor"].items()
        if value != inductor_after_warm_up.get(key, 0)
    }
    # A learner that fell back (one warning, switch off) would pass on the per-update
    # path without its graph ever replaying: the path must still be on at the end.
    graph_kept = bool(
        not PATHS[name].get("use_whole_cycle_cuda_graph") or learner.use_whole_cycle_cuda_graph
    )
    return _path_report(tally, iterations, graph_kept, warm_up_seconds, graphs_compiled_after_warm_up, inductor_delta)


def _run_span(
    torch: Any,
    learner: Any,
    reference: Any,
    batches: list[dict[str, Any]],
    reward_generator: Any,
    iteration: int,
    span: int,
    tally: _Tally,
) -> None:
    """``span`` iterations from ``iteration`` (2: the read is delayed by one), then the one metrics read."""
    peeks: list[Any] = []
    reference_metrics: list[dict[str, float]] = []
    for offset in range(span):
        slot = (iteration + offset) % BATCH_POOL
        chunk = batches[slot * UPDATES_PER_STEP : (slot + 1) * UPDATES_PER_STEP]
        rewards = torch.randn(2, 64, device="cuda", generator=reward_generator)
        dones = (torch.rand(2, 64, device="cuda", generator=reward_generator) < 0.05).float()
        reference_metrics.append(
            _tracked_iteration(torch, learner, reference, chunk, (rewards, dones), peeks, iteration + offset, tally)
        )
    got = learner.read_deferred_metrics()
    expected = expected_from_peeks(learner, peeks)
    if got != expected:
        tally.own_iteration_failures.append(f"iter {iteration}: read {got} vs rows {expected}")
    if span == 1:
        for key, value in reference_metrics[0].items():
            rel = abs(value - got[key]) / max(abs(value), METRIC_ABS_FLOOR)
            if rel > tally.worst_metric[0] or not math.isfinite(rel):
                tally.worst_metric = (rel, f"iter {iteration} {key}")
            if not rel <= METRIC_REL_TOL:
                tally.tracking_failures.append(f"iter {iteration} {key}: {got[key]} vs {value}")
    tally.delayed_reads += span == 2


def _tracked_iteration(
    torch: Any,
    learner: Any,
    reference: Any,
    chunk: list[dict[str, Any]],
    reward_stats: tuple[Any, Any],
    peeks: list[Any],
    index: int,
    tally: _Tally,
) -> dict[str, float]:
    """Iteration ``index`` on the graph path and, from the same state and random stream, on eager.

    Records the graph path's time and rate and the tracking errors in ``tally``; returns
    eager's metrics of the iteration.
    """
    rewards, dones = reward_stats
    reference.load_state_dict(copy.deepcopy(learner.get_state_dict()))
    before = parameters_of(learner)
    for model in (learner, reference):
        model.update_reward_stats(rewards, dones)
    rng_state = (torch.random.get_rng_state(), torch.cuda.get_rng_state())
    start = time.perf_counter()
    run_updates(learner, chunk, peeks)
    torch.cuda.synchronize()
    tally.iteration_ms.append((time.perf_counter() - start) * 1e3)
    torch.random.set_rng_state(rng_state[0])
    torch.cuda.set_rng_state(rng_state[1])
    run_updates(reference, chunk, None)
    reference_metrics = reference.read_deferred_metrics()
    for kind, (error, entry) in tracking_errors(torch, before, reference, learner).items():
        tally.errors_by_kind.setdefault(kind, []).append(error)
        if kind not in tally.worst_state or error > tally.worst_state[kind][0]:
            tally.worst_state[kind] = (error, f"iter {index} {entry}")
        if not error <= TRACKING_TOL[kind]:
            tally.tracking_failures.append(f"iter {index} {kind} {entry}: {error:.3g}")
    tally.lrs.append(float(learner.critic_optimizer.param_groups[0]["lr"]))
    return reference_metrics


def _path_report(
    tally: _Tally,
    iterations: int,
    graph_kept: bool,
    warm_up_seconds: float,
    graphs_compiled_after_warm_up: int,
    inductor_delta: dict[str, int],
) -> dict[str, Any]:
    """One path's entry of the report: its gate (``passed``) and what it measured."""
    errors_by_kind = tally.errors_by_kind
    median_failures = [
        f"median {kind} {statistics.median(errors_by_kind[kind]):.3g} > {tol:g}"
        for kind, tol in TRACKING_MEDIAN_TOL.items()
        if not statistics.median(errors_by_kind[kind]) <= tol
    ]
    rerecorded = sum(v for k, v in inductor_delta.items() if "cudagraph" in k and "record" in k)
    return {
        "passed": bool(
            not tally.own_iteration_failures
            and not tally.tracking_failures
            and not median_failures
            and graphs_compiled_after_warm_up == 0
            and rerecorded == 0
            and graph_kept
        ),
        "whole_cycle_graph_kept": graph_kept,
        "iterations": iterations,
        "delayed_reads": tally.delayed_reads,
        "own_iteration_metric_mismatches": tally.own_iteration_failures[:10],
        "own_iteration_metric_mismatch_count": len(tally.own_iteration_failures),
        "tracking_failures": tally.tracking_failures[:20],
        "tracking_failure_count": len(tally.tracking_failures),
        "tracking_tol": TRACKING_TOL,
        "tracking_median_tol": TRACKING_MEDIAN_TOL,
        "tracking_median_failures": median_failures,
        "worst_tracking_error_by_kind": {
            kind: {"error": error, "entry": entry} for kind, (error, entry) in tally.worst_state.items()
        },
        "tracking_error_quantiles_by_kind": {
            kind: {
                "first_iterations": [round(e, 9) for e in errors[:10]],
                "iterations_above_1e-3": sum(e > 1e-3 for e in errors),
                "median": statistics.median(errors),
                "p99": sorted(errors)[int(0.99 * (len(errors) - 1))],
                "max": max(errors),
            }
            for kind, errors in errors_by_kind.items()
        },
        "metric_rel_tol": METRIC_REL_TOL,
        "worst_metric_relative_difference": tally.worst_metric[0],
        "worst_metric_entry": tally.worst_metric[1],
        "critic_lr_first_last": [tally.lrs[0], tally.lrs[-1]],
        "warm_up_seconds": warm_up_seconds,
        "median_iteration_ms_graph_path_with_peeks": statistics.median(tally.iteration_ms),
        "graphs_compiled_after_warm_up": graphs_compiled_after_warm_up,
        "inductor_counter_changes_after_warm_up": inductor_delta,
        "cudagraph_rerecords_after_warm_up": rerecorded,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patched-root", type=Path, required=True)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument(
        "--paths",
        type=lambda text: [x.strip() for x in text.split(",") if x.strip()],
        default=list(PATHS),
        help=f"comma-separated subset of {','.join(PATHS)} (separate processes can share a GPU)",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.paths) - set(PATHS))
    if unknown or not args.paths:
        parser.error(f"unknown or empty --paths {unknown}; known: {','.join(PATHS)}")

    sys.path.insert(0, str(args.patched_root.resolve()))
    import torch
    import torch._inductor.config as inductor_config
    from uni_rl.algos.flash_sac import learner as learner_module

    if args.patched_root.resolve() not in Path(learner_module.__file__).resolve().parents:
        raise RuntimeError(f"uni_rl imported from {learner_module.__file__}")
    if not torch.cuda.is_available():
        raise RuntimeError("validate_replay_stability.py needs a CUDA device")
    inductor_config.fallback_random = True

    versions = bench_env.PINS
    started = time.perf_counter()
    paths = {name: run_path(torch, learner_module, name, args.iterations) for name in args.paths}
    device = torch.cuda.get_device_name(0)
    report = {
        "passed": all(item["passed"] for item in paths.values()),
        "device": device,
        "machine": {"platform": platform.platform()},
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "pinned": {k: versions.get(k) for k in ("TORCH_VERSION", "UNILAB_RL_BASE_VERSION")},
        "drift": bench_env.runtime_drift(versions, torch.__version__, device),
        "patched_root": str(args.patched_root),
        "seconds": round(time.perf_counter() - started, 1),
        "paths": paths,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(json.dumps({"passed": report["passed"], "output": str(args.output)}))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
