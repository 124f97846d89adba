"""GPU mode's numerical gates: each configuration against eager, and patched eager against 1.3.2.

Pure functions of worker results (see ``compare`` for the tolerances and their grounds),
so CPU runs (tests/test_learner_patches.py) apply exactly GPU mode's rules.
"""

from __future__ import annotations

from typing import Any

from .compare import (
    TIER_A_REPORT_TOL,
    TIER_B_FLOOR_FACTOR,
    TIER_B_MIN_FLOOR,
    compare_first_update,
    compare_relative,
    first_update_errors,
)
from .config import FIRST_CRITIC_SNAPSHOT, GPU_CONFIGS, TIER_A_SNAPSHOT
from .gates import metrics_only


def first_critic_update_of_schedule(
    result: dict[str, Any], names: list[str], probe: dict[str, Any]
) -> dict[str, Any]:
    """A worker's first critic update read from its ``FIRST_CRITIC_SNAPSHOT``.

    For learners without the probe (the baseline): the state after exactly one critic
    update from the initial state; ``names`` are the critic's parameter names in the
    optimizer's order, ``probe`` supplies the statistics before the update and the
    momenta (the same initial state: same seed and code for BatchNorm).
    """
    state = result["snapshots"][FIRST_CRITIC_SNAPSHOT]
    beta1 = float(state["critic_optimizer"]["param_groups"][0]["betas"][0])
    moments = state["critic_optimizer"]["state"]
    gradients = {
        name: moments[index]["exp_avg"] / (1.0 - beta1) for index, name in enumerate(names)
    }
    batchnorm = {
        f"{prefix}.{key}": value
        for prefix in ("actor", "critic", "target_critic")
        for key, value in state[prefix].items()
        if key.endswith(("running_mean", "running_var"))
    }
    return {
        "critic": {"metrics": {}, "gradients": gradients, "batchnorm": batchnorm},
        "batchnorm_before": probe["batchnorm_before"],
        "batchnorm_momentum": probe["batchnorm_momentum"],
    }


#: The check of patched eager against the baseline (unpatched 1.3.2) eager.
PATCHED_VS_BASELINE_CHECK = "fp32:patched_eager_vs_baseline_eager"


def configuration_check(precision: str, name: str) -> str:
    """The check of configuration ``name`` against eager at ``precision`` ("fp32"/"bf16")."""
    return f"{precision}:{name}_vs_eager"


def compare_configurations(
    results: dict[str, Any], iterations: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(gated checks, measurements) of GPU mode over the workers' results (see ``compare``).

    ``results`` maps ``patched/<precision>/<config>`` and ``baseline/fp32/eager`` to
    worker results; patched workers ran ``first_update_probe``. Separate from the
    workers so that CPU runs (tests) apply exactly these rules. The measured floors that
    set tolerances (tier-B amplification, bf16 rounding) are measurements, not checks.
    """
    checks: dict[str, Any] = {}
    measurements: dict[str, Any] = {}
    check, floor = _patched_vs_baseline(results, iterations)
    checks[PATCHED_VS_BASELINE_CHECK] = check
    floor_value = _amplification_floor(results, floor, measurements)
    bf16_floor = _bf16_floor(results, measurements)
    for precision in ("fp32", "bf16"):
        reference = results.get(f"patched/{precision}/eager")
        if reference is None:
            continue
        for name in GPU_CONFIGS:
            key = f"patched/{precision}/{name}"
            if key not in results or name == "eager":
                continue
            checks[configuration_check(precision, name)] = _configuration_vs_eager(
                reference, results[key], precision, iterations, floor_value, bf16_floor
            )
    return checks, measurements


def _patched_vs_baseline(results: dict[str, Any], iterations: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the gate of patched eager's first critic update against the baseline's, the final drift)."""
    base, patched = results["baseline/fp32/eager"], results["patched/fp32/eager"]
    baseline_keys = set().union(*(m.keys() for m in base["metrics"]))
    critic_names = [
        key.split(".", 1)[1]
        for key in patched["first_update"]["critic"]["gradients"]
        if key.startswith("critic.")
    ]
    first_critic = compare_first_update(
        first_critic_update_of_schedule(patched, critic_names, patched["first_update"]),
        first_critic_update_of_schedule(base, critic_names, patched["first_update"]),
        phases=("critic",),
    )
    floor = compare_relative(
        {"state": base["state"], "m": base["metrics"]},
        {"state": patched["state"], "m": metrics_only(patched["metrics"], baseline_keys)},
        float("inf"),
    )
    check = {
        "passed": first_critic["passed"],
        "first_critic_update": first_critic,
        "tier_a_after_first_iteration_reported": compare_relative(
            base["snapshots"][TIER_A_SNAPSHOT],
            patched["snapshots"][TIER_A_SNAPSHOT],
            TIER_A_REPORT_TOL["fp32"],
        ),
        f"tier_b_after_{iterations}_iterations_amplification_floor": floor,
    }
    return check, floor


def _amplification_floor(
    results: dict[str, Any], floor: dict[str, Any], measurements: dict[str, Any]
) -> float:
    """The drift of the smallest possible difference, recorded in ``measurements``.

    On CUDA patched vs baseline eager is one (the TD division); on CPU they are bitwise
    equal, so a one-ulp nudge of the first batch's rewards (``eager_one_ulp``) measures
    the same amplification on any device. The larger measured drift is the floor.
    """
    patched = results["patched/fp32/eager"]
    floors = {"patched_eager_vs_baseline_eager": floor["worst_relative_difference"]}
    one_ulp = results.get("patched/fp32/eager_one_ulp")
    if one_ulp is not None:
        floors["eager_vs_eager_with_one_ulp_rewards"] = compare_relative(
            {"state": patched["state"], "m": patched["metrics"]},
            {"state": one_ulp["state"], "m": one_ulp["metrics"]},
            float("inf"),
        )["worst_relative_difference"]
    floor_value = max(*floors.values(), TIER_B_MIN_FLOOR)
    measurements["tier_b_amplification_floor"] = {
        "measured": floors,
        "minimum": TIER_B_MIN_FLOOR,
        "floor": floor_value,
    }
    return floor_value


def _bf16_floor(results: dict[str, Any], measurements: dict[str, Any]) -> dict[str, float] | None:
    """Eager bf16 against eager fp32 per first-update quantity (None without a bf16 run)."""
    if "patched/bf16/eager" not in results:
        return None
    bf16_floor = first_update_errors(
        results["patched/fp32/eager"]["first_update"], results["patched/bf16/eager"]["first_update"]
    )
    worst_floor = max(bf16_floor.items(), key=lambda item: item[1])
    measurements["bf16:eager_vs_fp32_eager_first_update_floor"] = {
        "note": "measured bf16 rounding floor per quantity (sets the bf16 tolerances)",
        "worst_entry": worst_floor[0],
        "worst_difference": worst_floor[1],
    }
    return bf16_floor


def _configuration_vs_eager(
    reference: dict[str, Any],
    candidate: dict[str, Any],
    precision: str,
    iterations: int,
    floor_value: float,
    bf16_floor: dict[str, float] | None,
) -> dict[str, Any]:
    """Gate: one configuration's first update and (fp32) final drift against eager of its precision."""
    first = compare_first_update(
        reference["first_update"],
        candidate["first_update"],
        precision_floor=bf16_floor if precision == "bf16" else None,
    )
    tier_b_tol = TIER_B_FLOOR_FACTOR * floor_value
    tier_b = compare_relative(
        {"state": reference["state"], "m": reference["metrics"]},
        {"state": candidate["state"], "m": candidate["metrics"]},
        tier_b_tol if precision == "fp32" else float("inf"),
    )
    tier_b["gated"] = precision == "fp32"
    tier_b["tolerance_rule"] = (
        f"{TIER_B_FLOOR_FACTOR} x amplification floor {floor_value:.3g}"
        if precision == "fp32"
        else "reported only"
    )
    return {
        "passed": first["passed"] and tier_b["passed"],
        "first_update": first,
        f"tier_b_after_{iterations}_iterations": tier_b,
        "tier_a_after_first_iteration_reported": compare_relative(
            reference["snapshots"][TIER_A_SNAPSHOT],
            candidate["snapshots"][TIER_A_SNAPSHOT],
            TIER_A_REPORT_TOL[precision],
        ),
    }
