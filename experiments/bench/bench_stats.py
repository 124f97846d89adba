"""Summary statistics of one benchmark run's per-iteration timings.

Kept free of torch, UniLab and uni_rl so that the numbers every report is built from
can be unit-tested on a CPU-only machine, and so that old and new runs are summarized
by exactly the same code. Field names (``mean_ms``, ``median_ms``, ``p90_ms``, ...,
``rows_all``, ``rows``, ``summary_first_step``) follow the original report's JSON so
that its readers' tools keep working on ours.

Called by ``benchmark_flashsac_training.py`` (a run's summary fields) and by ``bench_report`` and the
evidence reports (which read the same fields back).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from statistics import fmean
from typing import Any

#: Per-iteration timing fields that get a summary block in the run JSON. ``wall_per_iter_ms`` is what a
#: user feels: the wall clock between consecutive iterations (``iter_ms`` is the learner's busy part).
TIMING_FIELDS: tuple[str, ...] = ("learner_train_ms", "collector_cycle_ms", "iter_ms", "wall_per_iter_ms")

#: The collector's phases per cycle, as the run JSON names them -> uni_rl's ``collector_timing_ms`` keys.
#: physics + reset + state refresh make up UniLab's env step; replay write, action wait and the inference
#: request are the collector's work around it.
COLLECTOR_PHASES: dict[str, str] = {
    "env_step": "env_step_ms",
    "physics": "env_step_backend_ms",
    "reset": "env_step_reset_done_ms",
    "state_refresh": "env_step_update_state_ms",
    "replay_write": "replay_write_ms",
    "action_wait": "learner_action_wait_ms",
    "inference_request": "inference_request_ms",
}
#: The device env step by parts where the env stamps them (physics, terms, reset: per env step) and the time the env
#: step beside the learner ran while the learner ran (uni_rl's ``DeviceCollectorRunner.SPLIT``): times within and
#: across the device collector's phases below, not more of them.
DEVICE_ENV_STEP_SPLIT = ("env_physics", "env_terms", "env_reset", "env_step_beside_learner")
#: The device-resident collector's split of one iteration (uni_rl's ``DeviceCollectorRunner.PHASES``, in loop
#: order; ``<phase>_ms`` in its collector timing): its collector and its learner share one process and one
#: loop, so the learner's phases are in the split too; then ``DEVICE_ENV_STEP_SPLIT``.
DEVICE_COLLECTOR_PHASES: dict[str, str] = {
    phase: f"{phase}_ms"
    for phase in ("action_sampling", "env_step", "replay_write", "episode_stats", "reward_stats", "replay_sample",
                  "learner", *DEVICE_ENV_STEP_SPLIT)
}
#: Each collector's phases, by the name the run records (``collector`` in the run JSON).
PHASES_BY_COLLECTOR: dict[str, dict[str, str]] = {"host": COLLECTOR_PHASES, "device-resident": DEVICE_COLLECTOR_PHASES}


def percentile(values: Sequence[float], quantile: float) -> float:
    """Linear-interpolation percentile (numpy's default), without numpy.

    The original report used this definition; using another one would shift p90/p95
    between old and new tables for no physical reason.
    """
    if not values:
        raise ValueError("cannot take a percentile of an empty sequence")
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")
    ordered = sorted(float(v) for v in values)
    position = (len(ordered) - 1) * quantile
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (position - lower) * (ordered[upper] - ordered[lower])


def summarize(values: Iterable[float | None]) -> dict[str, float | int]:
    """Mean, median, p90, p95, min, max and count of the non-missing samples.

    Missing samples (``None``: e.g. the collector cycle before the first collector
    report) are dropped rather than treated as zero, which would bias the mean down.
    """
    samples = [float(v) for v in values if v is not None]
    if not samples:
        raise ValueError("no timing samples to summarize")
    return {
        "count": len(samples),
        "mean_ms": fmean(samples),
        "median_ms": percentile(samples, 0.50),
        "p90_ms": percentile(samples, 0.90),
        "p95_ms": percentile(samples, 0.95),
        "min_ms": min(samples),
        "max_ms": max(samples),
    }


def with_wall_periods(rows_all: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with ``wall_per_iter_ms``: wall ms since the previous logged row, per iteration.

    Divided by the step difference so a gap in the rows (a missed record) still gives a per-iteration
    period; the first row has no predecessor and gets None (it also holds the warm-up).
    """
    out: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for row in rows_all:
        row = dict(row)
        period = None
        if previous is not None and row.get("wall_s") is not None and previous.get("wall_s") is not None:
            steps = row["step"] - previous["step"]
            if steps > 0:
                period = (float(row["wall_s"]) - float(previous["wall_s"])) * 1000.0 / steps
        row["wall_per_iter_ms"] = period
        out.append(row)
        previous = row
    return out


def throughput(wall: dict[str, float | int], *, envs: int, ranks: int = 1) -> dict[str, float]:
    """Environment steps per second: every iteration steps each of ``envs × ranks`` envs once."""
    if envs <= 0 or ranks <= 0:
        raise ValueError(f"envs and ranks must be positive, got {envs}, {ranks}")
    return {
        "mean": envs * ranks * 1000.0 / float(wall["mean_ms"]),
        "median": envs * ranks * 1000.0 / float(wall["median_ms"]),
        "envs": envs,
        "ranks": ranks,
    }


def collector_phases(rows: Sequence[dict[str, Any]], collector: str = "host") -> dict[str, float | None]:
    """Mean ms per cycle of each phase of ``collector`` over ``rows`` (None: the collector never reported it).

    The host collector's phases are per collector cycle, the device-resident collector's per iteration.
    """
    means: dict[str, float | None] = {}
    for name, key in PHASES_BY_COLLECTOR[collector].items():
        values = [float(t[key]) for t in (row.get("collector_timing_ms") or {} for row in rows) if t.get(key) is not None]
        means[name] = fmean(values) if values else None
    return means


def select_summary_rows(
    rows_all: Sequence[dict[str, Any]], *, summary_last: int, skip_first: int = 0
) -> list[dict[str, Any]]:
    """The rows the summary is computed over: the last ``summary_last`` after ``skip_first``.

    Statistics over the tail only keep compile/capture warm-up and replay-buffer
    growth out of the steady-state numbers; those are reported separately.
    """
    if summary_last <= 0:
        raise ValueError("summary_last must be positive")
    if skip_first < 0:
        raise ValueError("skip_first must be non-negative")
    eligible = list(rows_all[skip_first:])
    return eligible[-summary_last:]


def host_syncs(rows: Sequence[dict[str, Any]]) -> float | None:
    """Mean host syncs per iteration over ``rows``, as the runner counted them (None: it counts none).

    The device-resident runner counts every wait for the device and logs the count per iteration
    (``collector/host_syncs_per_iteration``); the host path counts none, and a guess would be no record.
    """
    values = [float(row["host_syncs"]) for row in rows if row.get("host_syncs") is not None]
    return fmean(values) if values else None


def timing_report(
    rows_all: Sequence[dict[str, Any]], *, summary_last: int, skip_first: int = 0, collector: str = "host"
) -> dict[str, Any]:
    """The timing part of a run JSON: all rows, the summarized rows and their statistics."""
    rows_all = with_wall_periods(rows_all)
    rows = select_summary_rows(rows_all, summary_last=summary_last, skip_first=skip_first)
    if not rows:
        raise ValueError(
            f"only {len(rows_all)} iterations were logged; nothing left after skipping {skip_first}"
        )
    report: dict[str, Any] = {
        "num_samples": len(rows),
        "num_samples_all": len(rows_all),
        "skip_first": skip_first,
        "summary_last": summary_last,
        "summary_first_step": rows[0]["step"],
        "summary_last_step": rows[-1]["step"],
        "rows_all": list(rows_all),
        "rows": rows,
    }
    for field in TIMING_FIELDS:
        report[field] = summarize(row.get(field) for row in rows)
    report["collector_phases_ms"] = collector_phases(rows, collector)
    report["host_syncs_per_iteration"] = host_syncs(rows)
    return report


def warmup_report(
    rows_all: Sequence[dict[str, Any]],
    rows: Sequence[dict[str, Any]],
    *,
    first_iteration_wall_s: float | None = None,
    compile_metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Compile/capture warm-up, reported beside (never inside) the summary.

    The first iterations of a compiled or graph-captured learner pay Dynamo/Inductor
    compilation and CUDA-graph capture. ``excess_learner_ms`` is how much longer the
    iterations before the summary window took than the steady-state median, which is
    the cost a user actually waits for; ``dynamo`` carries torch's own compile-time
    counters from the learner process when they were available.
    """
    summarized_steps = {row["step"] for row in rows}
    before = [row for row in rows_all if row["step"] not in summarized_steps]
    steady = summarize(row.get("learner_train_ms") for row in rows)["median_ms"] if rows else None
    learner_before = [float(r["learner_train_ms"]) for r in before if r.get("learner_train_ms") is not None]
    first = rows_all[0] if rows_all else {}
    excess = (
        sum(max(v - float(steady), 0.0) for v in learner_before) if steady is not None else None
    )
    return {
        "iterations_before_summary": len(before),
        "first_iteration_learner_train_ms": first.get("learner_train_ms"),
        "first_iteration_iter_ms": first.get("iter_ms"),
        "learner_train_ms_before_summary_total": sum(learner_before),
        "excess_learner_ms": excess,
        "startup_to_first_iteration_s": first_iteration_wall_s,
        "dynamo": compile_metrics or {},
    }
