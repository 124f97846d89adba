"""The gates of the numerics study: pure functions of the workers' results, each with a ``passed``.

Every entry a mode writes under ``checks`` comes from one of these (``CHECK_GATES``), so
each can be failed on a perturbed input (tests/test_validation_gates.py); what is
measured rather than gated goes under ``measurements``.
"""

from __future__ import annotations

import math
from typing import Any

from .compare import compare_states, flatten
from .config import POISON_SKIPS, ROBUSTNESS_CONFIG, SKIP_RATE_KEYS

#: Graphed vs eager inference forward (same kernels, replayed): relative L2 of mean, std, actions.
INFERENCE_GRAPH_REL_TOL = 1e-6


def metrics_only(metrics: list[dict[str, float]], keys: set[str]) -> list[dict[str, float]]:
    """Each iteration's metrics restricted to ``keys`` (the ones the baseline has)."""
    return [{k: v for k, v in item.items() if k in keys} for item in metrics]


def bitwise_vs_baseline(
    baseline: dict[str, Any], candidate: dict[str, Any], *, require_no_skips: bool = False
) -> dict[str, Any]:
    """Gate: ``candidate``'s final state and iteration metrics bitwise ``baseline``'s.

    Metrics the baseline lacks (the guard's skip rates) are left out of the comparison;
    with ``require_no_skips`` every one of them must be zero.
    """
    baseline_keys = set().union(*(m.keys() for m in baseline["metrics"]))
    state_cmp = compare_states(baseline["state"], candidate["state"])
    metric_cmp = compare_states(
        {"m": baseline["metrics"]}, {"m": metrics_only(candidate["metrics"], baseline_keys)}
    )
    report: dict[str, Any] = {
        "passed": state_cmp["equal"] and metric_cmp["equal"],
        "tolerance": "bitwise",
        "state": state_cmp,
        "metrics": metric_cmp,
    }
    if require_no_skips:
        skip_rates = [m[key] for m in candidate["metrics"] for key in SKIP_RATE_KEYS]
        report["skip_rates_all_zero"] = bool(skip_rates) and not any(skip_rates)
        report["passed"] = report["passed"] and report["skip_rates_all_zero"]
    return report


def frozen_critic_report(
    baseline: dict[str, Any], patched_off: dict[str, Any], patched_on: dict[str, Any]
) -> dict[str, Any]:
    """Gate: the actor update gives no critic gradient and toggles no ``requires_grad``."""
    return {
        "passed": bool(
            patched_off["critic_grads_none_after_actor_update"]
            and patched_off["requires_grad_toggles_in_actor_update"] == 0
            and patched_on["requires_grad_toggles_in_actor_update"] == 0
        ),
        "patched_requires_grad_toggles": patched_off["requires_grad_toggles_in_actor_update"],
        "patched_critic_grads_none": patched_off["critic_grads_none_after_actor_update"],
        "baseline_requires_grad_toggles": baseline["requires_grad_toggles_in_actor_update"],
    }


def _modules_finite(state: dict[str, Any]) -> bool:
    """Every float parameter and buffer (running statistics included) of the modules finite."""
    import torch

    return all(
        bool(torch.isfinite(v).all())
        for _, v in flatten({k: state[k] for k in ("actor", "critic", "target_critic")})
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    )


def injection_report(
    guarded: dict[str, Any], unguarded: dict[str, Any], updates_per_step: int
) -> dict[str, Any]:
    """Critic step 9 sees NaN/Inf rewards; actor step 14 sees NaN/Inf critic obs.

    Snapshots are taken before updates, so "before critic 10" is the state right after
    critic step 9 and its target update, and "before critic 15" the state after actor
    step 14. Each poisoned step must leave its side bitwise unchanged: parameters,
    optimizer state and the BatchNorm running statistics its forward moved (uni_rl 0003;
    the scheduler still advances the learning rate). The temperature step sees a finite
    loss and proceeds.
    """
    snaps = guarded["snapshots"]

    def critic_side(state: dict[str, Any]) -> dict[str, Any]:
        return {
            "critic": state["critic"],
            "target_critic": state["target_critic"],
            "critic_optimizer": state["critic_optimizer"]["state"],
        }

    critic_unchanged = compare_states(critic_side(snaps["9:critic"]), critic_side(snaps["10:critic"]))

    actor_unchanged = compare_states(
        _actor_side(snaps["14:actor"]), _actor_side(snaps["15:critic"])
    )
    temperature_moved = not compare_states(
        snaps["14:actor"]["temperature"], snaps["15:critic"]["temperature"]
    )["equal"]

    metrics = guarded["metrics"]
    critic_iteration, actor_iteration = 9 // updates_per_step, 14 // updates_per_step
    expected = {
        (critic_iteration, "critic_skip_rate"): 1.0 / updates_per_step,
        (actor_iteration, "actor_skip_rate"): 1.0,
    }
    skip_rates = {(i, key): m[key] for i, m in enumerate(metrics) for key in SKIP_RATE_KEYS}
    skips_as_expected = all(value == expected.get(key, 0.0) for key, value in skip_rates.items())
    return {
        "passed": bool(
            critic_unchanged["equal"]
            and actor_unchanged["equal"]
            and temperature_moved
            and skips_as_expected
            and _modules_finite(guarded["state"])
        ),
        "critic_params_target_and_optimizer_unchanged_by_skipped_step": critic_unchanged,
        "actor_params_and_optimizer_unchanged_by_skipped_step": actor_unchanged,
        "temperature_step_still_applied": temperature_moved,
        "skip_rates_as_expected": skips_as_expected,
        "nonzero_skip_rates": {f"iter{i}:{k}": v for (i, k), v in skip_rates.items() if v},
        "guarded_final_parameters_finite": _modules_finite(guarded["state"]),
        "unguarded_baseline_final_parameters_finite": _modules_finite(unguarded["state"]),
    }


def _actor_side(state: dict[str, Any]) -> dict[str, Any]:
    """The actor's parameters, running statistics and optimizer state of a saved state."""
    return {"actor": state["actor"], "actor_optimizer": state["actor_optimizer"]["state"]}


def expected_recovery_skips(
    updates_per_step: int, policy_frequency: int
) -> dict[tuple[int, str], float]:
    """Per (iteration, metric): the skip rate ``ROBUSTNESS_CONFIG``'s poison must cause."""
    steps = {
        "critic": updates_per_step,
        "actor": (updates_per_step - 1) // policy_frequency + 1,
        "temperature": (updates_per_step - 1) // policy_frequency + 1,
    }
    expected: dict[tuple[int, str], float] = {}
    for item in ROBUSTNESS_CONFIG["poison"]:
        for kind in POISON_SKIPS[item["field"]]:
            key = (int(item["update"]) // updates_per_step, f"{kind}_skip_rate")
            expected[key] = expected.get(key, 0.0) + 1.0 / steps[kind]
    return expected


def recovery_report(
    results: dict[str, Any], updates_per_step: int, policy_frequency: int = 2
) -> dict[str, Any]:
    """Gate: one bad batch costs only its own steps, on every path run (uni_rl 0003).

    Per run of ``ROBUSTNESS_CONFIG``: the poisoned iterations skip exactly the steps the
    poison reaches and every other iteration skips none (a learner left with NaN running
    statistics skips every later step); the skipped actor step left the actor's
    parameters, running statistics and optimizer state bitwise as they were; the final
    modules (running statistics included) are finite; the collector's inference policy
    answers with finite actions.
    """
    expected = expected_recovery_skips(updates_per_step, policy_frequency)
    before, after = ROBUSTNESS_CONFIG["snapshot_at"]
    configs: dict[str, Any] = {}
    for key, result in results.items():
        skip_rates = {
            (i, name): m.get(name, math.nan)
            for i, m in enumerate(result["metrics"])
            for name in SKIP_RATE_KEYS
        }
        skips_ok = all(v == expected.get(k, 0.0) for k, v in skip_rates.items())
        actor = compare_states(
            _actor_side(result["snapshots"][before]), _actor_side(result["snapshots"][after])
        )
        finite = _modules_finite(result["state"])
        configs[key] = {
            "passed": bool(skips_ok and actor["equal"] and finite and result["explore_finite"]),
            "skip_rates_as_expected": skips_ok,
            "nonzero_skip_rates": {f"iter{i}:{k}": v for (i, k), v in skip_rates.items() if v},
            "skipped_actor_step_left_actor_bitwise": actor,
            "final_modules_finite": finite,
            "explore_finite": result["explore_finite"],
        }
    return {
        "passed": bool(configs) and all(item["passed"] for item in configs.values()),
        "rule": "poisoned batches skip only their own steps; skipped steps leave all state "
        "(running statistics included); training and inference stay finite",
        "expected_skip_rates": {f"iter{i}:{k}": v for (i, k), v in expected.items()},
        "configs": configs,
    }


#: Learning rates are float32 tensors on the graph paths: equal to float64 within this.
RATE_REL_TOL = 1e-6


def _rates_close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=RATE_REL_TOL, abs_tol=0.0) for x, y in zip(a, b)
    )


def checkpoint_report(results: dict[str, Any]) -> dict[str, Any]:
    """Gate: a CPU learner's checkpoint (float rates) keeps the graph paths working (uni_rl 0005).

    Per run of ``ROBUSTNESS_CONFIG``: the loaded rates are the checkpoint's; on the graph
    paths they are still the device tensors the graphs read (the same objects), elsewhere
    floats; after training the rates are the schedulers' current ones (the schedule
    reached whatever the updates read); a whole-cycle graph that was asked for still
    ran (no fallback from a failed capture).
    """
    configs: dict[str, Any] = {}
    for key, result in results.items():
        item = result["checkpoint"]
        graph_kept = result["whole_cycle_graph_active"] or not result["whole_cycle_graph_requested"]
        loaded = _rates_close(item["loaded_rates"], item["saved_rates"])
        scheduled = _rates_close(item["final_rates"], item["scheduled_rates"])
        moved = not _rates_close(item["final_rates"], item["loaded_rates"])
        rate_kind = item["device_rates"] == item["device_rates_expected"]
        configs[key] = {
            "passed": bool(
                loaded and item["rate_objects_kept"] and rate_kind and scheduled and moved
                and graph_kept
            ),
            "loaded_rates_are_the_checkpoints": loaded,
            "rate_objects_kept": item["rate_objects_kept"],
            "device_rates": item["device_rates"],
            "device_rates_expected": item["device_rates_expected"],
            "final_rates_are_the_schedulers": scheduled,
            "schedule_moved_the_rates": moved,
            "whole_cycle_graph_kept": graph_kept,
            "rates": {k: item[k] for k in ("saved_rates", "loaded_rates", "final_rates", "scheduled_rates")},
        }
    return {
        "passed": bool(configs) and all(item["passed"] for item in configs.values()),
        "rule": "a float-rate checkpoint loads into the learner's own rates (device tensors on "
        "the graph paths), the schedule reaches them, and the whole-cycle graph stays on",
        "configs": configs,
    }


def graph_breaks_report(explain: dict[str, Any]) -> dict[str, Any]:
    """Gate: each whole objective traces to one graph with no break."""
    return {
        "passed": bool(explain)
        and all(
            item["graph_count"] == 1 and item["graph_break_count"] == 0
            for item in explain.values()
        ),
        "explain": explain,
    }


def host_sync_report(per_config: dict[str, Any]) -> dict[str, Any]:
    """Gate: patched configurations sync the host nowhere in a cycle, once at the metrics read."""
    patched = [k for k in per_config if k.startswith("patched/")]
    return {
        "passed": bool(patched)
        and all(
            per_config[k]["audit"]["host_syncs_in_cycle"] == 0
            and per_config[k]["audit"]["host_syncs_in_metrics_read"] == 1
            for k in patched
        ),
        "rule": "patched: zero host syncs inside one update cycle, one at the metrics read",
        "per_config": per_config,
    }


def whole_cycle_kept_report(results: dict[str, Any], requested: list[str]) -> dict[str, Any]:
    """Gate: the configurations that asked for the whole-cycle graph still ran it."""
    return {
        "passed": bool(requested) and all(results[key]["whole_cycle_graph_active"] for key in requested),
        "rule": "the whole-cycle configurations still ran their graph (no fallback)",
        "configs": requested,
    }


def inference_graph_report(probed: dict[str, Any]) -> dict[str, Any]:
    """Gate: the graphed inference forward was captured and answers as the eager one."""
    return {
        "passed": bool(probed)
        and all(
            item["captured"] and item["worst_relative_difference"] <= INFERENCE_GRAPH_REL_TOL
            for item in probed.values()
        ),
        "rule": f"graphed inference forward captured, and within {INFERENCE_GRAPH_REL_TOL:g} of eager "
        "(mean, std, three consecutive exploration actions) after training moved the weights",
        "configs": probed,
    }


def no_compilation_report(per_config: dict[str, Any], recommended: list[str]) -> dict[str, Any]:
    """Gate: the compiled configurations compiled nothing after their warm-up."""
    return {
        "passed": bool(recommended)
        and all(per_config[k]["graphs_compiled_after_warm_up"] == 0 for k in recommended),
        "configs": recommended,
    }
