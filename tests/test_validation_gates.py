"""Every gate of the numerics study (experiments/evidence/numerics/gates.py) fails on a perturbed input.

The gates are pure functions of the workers' results, so each is fed a passing input
built to the workers' result layout and then that input with one thing broken, the
thing the gate exists to catch. Measured floors are not gates: they are reported under
``measurements``, and a report's ``checks`` hold only entries that can fail. (The
first-update and drift gates of ``compare_configurations`` are failed on real CPU
worker results in tests/test_learner_patches.py.)
"""

from __future__ import annotations

import copy
import json
import math
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

PROJECT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(PROJECT / "experiments" / folder) for folder in ("evidence", "bench")]
from numerics import config, modes, probes  # noqa: E402
from numerics import gates as vn  # noqa: E402


def _module(g: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        "w": torch.randn(3, 2, generator=g),
        "norm.running_mean": torch.randn(2, generator=g),
        "norm.running_var": torch.rand(2, generator=g) + 0.5,
    }


def _state(seed: int = 0) -> dict[str, Any]:
    """A saved learner state in ``_state_of``'s layout (modules, optimizers, schedulers)."""
    g = torch.Generator().manual_seed(seed)
    state: dict[str, Any] = {name: _module(g) for name in ("actor", "critic", "target_critic")}
    state["temperature"] = {"log_temp": torch.randn(1, generator=g)}
    for name in ("actor_optimizer", "critic_optimizer", "temperature_optimizer"):
        state[name] = {
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(3, 2, generator=g)}},
            "param_groups": [{"lr": 3e-4, "params": [0]}],
        }
    return state


def _skip_metrics(iterations: int, nonzero: dict[tuple[int, str], float]) -> list[dict[str, float]]:
    return [
        {"critic_loss": 1.0 + i, **{k: nonzero.get((i, k), 0.0) for k in config.SKIP_RATE_KEYS}}
        for i in range(iterations)
    ]


def _nan_running_var(state: dict[str, Any]) -> None:
    state["critic"]["norm.running_var"][0] = math.nan


# ---------------------------------------------------------------- inputs per gate


def bitwise_input() -> tuple[Callable[[Any], dict[str, Any]], Any]:
    baseline = {"state": _state(), "metrics": [{"critic_loss": 1.0}, {"critic_loss": 2.0}]}
    candidate = {"state": _state(), "metrics": _skip_metrics(2, {})}
    candidate["metrics"][0]["critic_loss"], candidate["metrics"][1]["critic_loss"] = 1.0, 2.0
    return (lambda c: vn.bitwise_vs_baseline(baseline, c, require_no_skips=True)), candidate


def injection_input() -> tuple[Callable[[Any], dict[str, Any]], Any]:
    before_critic, before_actor = _state(1), _state(2)
    after_actor = copy.deepcopy(before_actor)
    after_actor["temperature"]["log_temp"] += 0.1  # the temperature step proceeds
    guarded = {
        "snapshots": {
            "9:critic": before_critic,
            "10:critic": copy.deepcopy(before_critic),
            "14:actor": before_actor,
            "15:critic": after_actor,
        },
        "metrics": _skip_metrics(12, {(4, "critic_skip_rate"): 0.5, (7, "actor_skip_rate"): 1.0}),
        "state": _state(3),
    }
    unguarded = {"state": _state(4)}
    _nan_running_var(unguarded["state"])
    return (lambda g: vn.injection_report(g, unguarded, 2)), guarded


def recovery_input() -> tuple[Callable[[Any], dict[str, Any]], Any]:
    expected = vn.expected_recovery_skips(2, 2)
    first, second = config.ROBUSTNESS_CONFIG["snapshot_at"]
    after = _state(5)
    after["critic"]["w"] += 1.0  # the critic trained on; the actor step was skipped
    result = {
        "snapshots": {first: _state(5), second: after},
        "metrics": _skip_metrics(12, expected),
        "state": _state(6),
        "explore_finite": True,
    }
    return (lambda r: vn.recovery_report({"x": r}, 2, 2)), result


def checkpoint_input() -> tuple[Callable[[Any], dict[str, Any]], Any]:
    result = {
        "checkpoint": {
            "saved_rates": [1.5e-4] * 3,
            "loaded_rates": [1.5e-4] * 3,
            "final_rates": [2.78e-4, 2.05e-4, 2.78e-4],
            "scheduled_rates": [2.78e-4, 2.05e-4, 2.78e-4],
            "rate_objects_kept": True,
            "device_rates": True,
            "device_rates_expected": True,
        },
        "whole_cycle_graph_active": True,
        "whole_cycle_graph_requested": True,
    }
    return (lambda r: vn.checkpoint_report({"x": r})), result


def frozen_input() -> tuple[Callable[[Any], dict[str, Any]], Any]:
    baseline = {"requires_grad_toggles_in_actor_update": 84}
    off = {"critic_grads_none_after_actor_update": True, "requires_grad_toggles_in_actor_update": 0}
    on = {"requires_grad_toggles_in_actor_update": 0}
    return (lambda o: vn.frozen_critic_report(baseline, o, on)), off


def graph_breaks_input() -> tuple[Callable[[Any], dict[str, Any]], Any]:
    explain = {name: {"graph_count": 1, "graph_break_count": 0} for name in ("critic", "actor")}
    return vn.graph_breaks_report, explain


def host_sync_input() -> tuple[Callable[[Any], dict[str, Any]], Any]:
    audit = {"host_syncs_in_cycle": 0, "host_syncs_in_metrics_read": 1}
    per_config = {
        "patched/fp32/eager": {"audit": dict(audit)},
        "patched/fp32/whole_cycle_graph": {"audit": dict(audit)},
        "baseline/fp32/eager": {"audit": {"host_syncs_in_cycle": 16, "host_syncs_in_metrics_read": 0}},
    }
    return vn.host_sync_report, per_config


def whole_cycle_input() -> tuple[Callable[[Any], dict[str, Any]], Any]:
    results = {"patched/fp32/whole_cycle_graph": {"whole_cycle_graph_active": True}}
    return (lambda r: vn.whole_cycle_kept_report(r, list(r))), results


def inference_input() -> tuple[Callable[[Any], dict[str, Any]], Any]:
    probed = {"patched/fp32/whole_cycle_graph": {"captured": True, "worst_relative_difference": 0.0}}
    return vn.inference_graph_report, probed


def no_compilation_input() -> tuple[Callable[[Any], dict[str, Any]], Any]:
    per_config = {"patched/fp32/full_objective_compile": {"graphs_compiled_after_warm_up": 0}}
    return (lambda p: vn.no_compilation_report(p, list(p))), per_config


def _set(path: tuple[Any, ...], value: Any) -> Callable[[Any], None]:
    def apply(item: Any) -> None:
        for key in path[:-1]:
            item = item[key]
        item[path[-1]] = value

    return apply


def _add(path: tuple[Any, ...], delta: float) -> Callable[[Any], None]:
    def apply(item: Any) -> None:
        for key in path[:-1]:
            item = item[key]
        item[path[-1]] = item[path[-1]] + delta

    return apply


# (gate input factory, perturbation name, perturbation)
PERTURBATIONS: list[tuple[Callable[[], Any], str, Callable[[Any], None]]] = [
    (bitwise_input, "one parameter one ulp off", lambda c: c["state"]["actor"]["w"].view(-1).__setitem__(
        0, torch.nextafter(c["state"]["actor"]["w"].view(-1)[0], torch.tensor(math.inf)))),
    (bitwise_input, "a running statistic moved", _add(("state", "critic", "norm.running_mean"), 1e-3)),
    (bitwise_input, "an iteration metric differs", _set(("metrics", 1, "critic_loss"), 2.5)),
    (bitwise_input, "a finite step counted as skipped", _set(("metrics", 0, "actor_skip_rate"), 0.5)),
    (injection_input, "skipped critic step moved a running statistic",
     _add(("snapshots", "10:critic", "target_critic", "norm.running_var"), 1e-3)),
    (injection_input, "skipped critic step moved the optimizer",
     _add(("snapshots", "10:critic", "critic_optimizer", "state", 0, "exp_avg"), 1e-3)),
    (injection_input, "skipped actor step moved the actor",
     _add(("snapshots", "15:critic", "actor", "norm.running_mean"), 1e-3)),
    (injection_input, "temperature step not applied",
     lambda g: g["snapshots"]["15:critic"].__setitem__(
         "temperature", copy.deepcopy(g["snapshots"]["14:actor"]["temperature"]))),
    (injection_input, "skip not counted", _set(("metrics", 4, "critic_skip_rate"), 0.0)),
    (injection_input, "final state not finite", lambda g: _nan_running_var(g["state"])),
    (recovery_input, "stuck: every later actor step skipped", lambda r: [
        m.__setitem__("actor_skip_rate", 1.0) for m in r["metrics"][5:]]),
    (recovery_input, "skipped actor step left other running statistics",
     _add(("snapshots", "6:critic", "actor", "norm.running_var"), 1e-3)),
    (recovery_input, "skipped actor step moved the actor optimizer",
     _add(("snapshots", "6:critic", "actor_optimizer", "state", 0, "exp_avg"), 1e-3)),
    (recovery_input, "NaN running statistics at the end", lambda r: _nan_running_var(r["state"])),
    (recovery_input, "collector's actions NaN", _set(("explore_finite",), False)),
    (recovery_input, "poison not skipped", _set(("metrics", 2, "actor_skip_rate"), 0.0)),
    (checkpoint_input, "rate tensors replaced", _set(("checkpoint", "rate_objects_kept"), False)),
    (checkpoint_input, "loaded rates are not the checkpoint's",
     _set(("checkpoint", "loaded_rates"), [3e-4] * 3)),
    (checkpoint_input, "schedule did not reach the rates",
     _set(("checkpoint", "final_rates"), [1.5e-4] * 3)),
    (checkpoint_input, "rates off the schedule", _set(("checkpoint", "final_rates"), [2.78e-4, 2.06e-4, 2.78e-4])),
    (checkpoint_input, "graph path without device rates", _set(("checkpoint", "device_rates"), False)),
    (checkpoint_input, "whole-iteration graph fell back", _set(("whole_cycle_graph_active",), False)),
    (frozen_input, "requires_grad toggled", _set(("requires_grad_toggles_in_actor_update",), 2)),
    (frozen_input, "critic got gradients", _set(("critic_grads_none_after_actor_update",), False)),
    (graph_breaks_input, "a graph break", _set(("actor", "graph_break_count"), 1)),
    (graph_breaks_input, "two graphs", _set(("critic", "graph_count"), 2)),
    (graph_breaks_input, "nothing explained", lambda e: e.clear()),
    (host_sync_input, "a sync inside the cycle", _set(("patched/fp32/eager", "audit", "host_syncs_in_cycle"), 1)),
    (host_sync_input, "metrics read without its sync",
     _set(("patched/fp32/whole_cycle_graph", "audit", "host_syncs_in_metrics_read"), 2)),
    (whole_cycle_input, "graph fell back", _set(("patched/fp32/whole_cycle_graph", "whole_cycle_graph_active"), False)),
    (whole_cycle_input, "nothing requested", lambda r: r.clear()),
    (inference_input, "not captured", _set(("patched/fp32/whole_cycle_graph", "captured"), False)),
    (inference_input, "answers differ", _set(("patched/fp32/whole_cycle_graph", "worst_relative_difference"), 1e-4)),
    (no_compilation_input, "a compilation after warm-up",
     _set(("patched/fp32/full_objective_compile", "graphs_compiled_after_warm_up"), 1)),
]


@pytest.mark.parametrize(
    ("factory", "name", "perturb"), PERTURBATIONS, ids=[f"{f.__name__}:{n}" for f, n, _ in PERTURBATIONS]
)
def test_gate_passes_then_fails_on_perturbed_input(
    factory: Callable[[], Any], name: str, perturb: Callable[[Any], None]
) -> None:
    gate, good = factory()
    assert gate(copy.deepcopy(good))["passed"] is True, name
    bad = copy.deepcopy(good)
    perturb(bad)
    assert gate(bad)["passed"] is False, name


# Every check a mode writes under ``checks`` (numerics.modes.CHECK_GATES), and the input
# factory above whose gate computes it. The ``compare_configurations`` gates (patched vs
# baseline eager, each configuration vs eager) are failed on real worker results in
# tests/test_learner_patches.py::test_full_objective_compile_matches_eager_on_cpu.
CHECK_GATES: dict[str, Callable[[], Any]] = {
    "eager_switches_off_vs_baseline": bitwise_input,
    "eager_warm_up_guard_deferred_vs_baseline": bitwise_input,
    "frozen_critic_actor_update": frozen_input,
    "finite_guard_injection": injection_input,
    "finite_guard_recovery": recovery_input,
    "checkpoint_resume_keeps_graphs": checkpoint_input,
    "full_objective_graph_breaks": graph_breaks_input,
    "host_sync_audit": host_sync_input,
    "whole_cycle_graph_kept": whole_cycle_input,
    "inference_graph_matches_eager": inference_input,
    "no_compilation_after_warm_up": no_compilation_input,
}


def test_every_check_has_a_failing_test() -> None:
    """A check declared without a gate test here fails this test; an undeclared one fails the run."""
    from numerics.configurations import compare_configurations

    declared = {name for name, gate in modes.CHECK_GATES.items() if gate is not compare_configurations}
    assert declared == set(CHECK_GATES)
    assert {factory for factory, _, _ in PERTURBATIONS} == set(CHECK_GATES.values())
    # The report writer refuses a check nobody declared (negative control).
    assert modes.undeclared_checks({"eager_switches_off_vs_baseline": {}, "a_new_check": {}}) == ["a_new_check"]


def test_latest_gpu_report_writes_only_declared_checks() -> None:
    """The newest committed GPU report (a real --mode gpu run) holds exactly declared checks."""
    reports = sorted(
        PROJECT.glob("results/*/checks/validate_numerics_gpu.json"),
        key=lambda path: re.search(r"\d{4}-\d{2}-\d{2}.*", path.parts[-3]).group(0),
    )
    assert reports, "no committed GPU numerics report under results/"
    checks = json.loads(reports[-1].read_text())["checks"]
    assert modes.undeclared_checks(checks) == []
    assert any(name.startswith(("fp32:", "bf16:")) for name in checks)


def test_the_sync_audit_counts_event_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit's count (``probes._count_syncs``) takes the warnings of torch's sync debug mode and the event
    waits, at which that mode does not warn: the metrics read is staged (pinned copy, event wait), and the
    host-sync gate wants exactly one wait there. Its control is a real GPU report: counted by warnings alone, the
    staged read gave 0 waits and the gate failed (results/2026-12-05-h100-default-env-parity-learner-levers/checks/).
    """
    waits: list[object] = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)  # no CUDA on the test machine
    monkeypatch.setattr(torch.cuda.Event, "synchronize", lambda self: waits.append(self))
    plain = torch.cuda.Event.synchronize

    def staged_read() -> None:
        torch.cuda.Event.synchronize(object())

    def blocking_copy() -> None:
        warnings.warn("called a synchronizing CUDA operation")

    assert probes._count_syncs(staged_read) == 1 and len(waits) == 1
    assert probes._count_syncs(blocking_copy) == 1
    assert probes._count_syncs(lambda: None) == 0
    assert torch.cuda.Event.synchronize is plain  # the wrapper is gone after the count
