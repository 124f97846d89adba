"""Comparisons of saved learner states and of first updates, with the tolerances GPU mode gates on.

Everything here is a pure function of worker results (tensors moved to the CPU), so the
tests feed it real CPU results and perturbed ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

# GPU mode. Compiled code draws eager's random numbers here (Inductor
# ``fallback_random``), so configurations differ by float rounding only: compiled
# objectives fuse and reorder reductions, and bf16 autocast rounds at different points
# when Inductor fuses ops (eager rounds every op output to bf16). What is gated:
#
# (a) The first update (``first_update_probe``): one critic and one actor update, each
#     from the same pre-training state, so nothing earlier can amplify a difference.
#     Losses: |a - b| / max(|a|, GPU_METRIC_ABS_FLOOR). Gradients (the ones the first
#     Adam step consumed): ||a - b|| / ||a|| per tensor. BatchNorm running statistics:
#     see (c). fp32 tolerances (FIRST_UPDATE_FP32_TOL) are measured rounding floors
#     times a margin: full-objective compile vs eager on CPU (Inductor C++, torch 2.8,
#     this learner at batch 64) gave losses <= 9e-8, gradients <= 3.6e-6, BatchNorm
#     batch statistics <= 1.2e-7 (loss-only compile: bitwise). A real defect (a lost,
#     doubled or misplaced BatchNorm update, a different input, a missed restore) moves
#     these by 1e-3..1 (a missed update of a running variance alone: momentum 0.01 times
#     an O(1) batch variance change, i.e. ~1e-2 in (c)'s units). bf16 has no fixed
#     floor: its rounding error depends on the device's kernels, so it is measured in
#     the same run as eager bf16 vs eager fp32 per quantity (the error of rounding to
#     bf16 at all), and a bf16 candidate may differ from eager bf16 by
#     BF16_FLOOR_FACTOR times that: 2 by the triangle inequality if the candidate is no
#     less accurate than eager (it rounds at fewer points), plus 1 for slack.
# (b) After all 12 iterations: this learner amplifies any last-bit difference (the
#     argmin over the two critics and Adam's first steps, g / |g| per component, switch
#     discretely), so the bound is relative to the measured amplification of a one-ulp
#     change: patched vs unpatched eager differ only in the TD projection dividing by
#     the bin width as a device tensor where 1.3.2 divided by a host float (which CUDA
#     turns into a multiplication by its reciprocal). fp32 configurations must stay
#     within TIER_B_FLOOR_FACTOR times that floor (at least TIER_B_MIN_FLOOR); bf16 is
#     reported against it, not gated.
# (c) BatchNorm running statistics are compared in the units of the batch statistics
#     that moved them, not relative to their own norm: the first update takes a running
#     mean from 0 to momentum * batch mean, and where the batch mean is zero by
#     construction (a bias-free linear layer after a zero-bias BatchNorm, e.g.
#     actor.encoder.0.norm1) that norm is rounding noise (~3e-9) and ||a - b|| / ||a||
#     is ~1 for a one-ulp difference. Per channel: |d running_mean| / (momentum *
#     sqrt(batch_var + eps)) and |d running_var| / (momentum * (batch_var + eps)), the
#     batch variance recovered from the running variance before and after the update.
#     A layer that the reference update did not move must stay bitwise unchanged.
#
# Reported, not gated: the whole state after the first iteration (2 critic, 1 actor, 2
# target updates). Adam's first step moves each parameter by about lr * sign(grad), so a
# gradient component at rounding level flips sign and the parameter by 2 * lr: that is
# amplification, not rounding, and (a) gates the gradients themselves.
FIRST_UPDATE_FP32_TOL = {"loss": 1e-5, "gradient": 1e-4, "batchnorm": 1e-5}
BF16_FLOOR_FACTOR = 3.0
# A loss is one number, so its measured bf16 floor is one sample of rounding error and
# can be small by chance (on the H200, eager bf16 and eager fp32 critic losses agreed to
# < 3.6e-6 while compiled bf16 differed from eager bf16 by 1.1e-5). Its bf16 tolerance is
# therefore at least the expected rounding of a batch mean of bf16 terms: unit roundoff
# 2**-9 over sqrt(batch 256) = 1.2e-4, still ten times below what a defect moves (1e-3..1).
BF16_MIN_TOL = {"loss": 2.0**-9 / math.sqrt(256)}
GPU_METRIC_ABS_FLOOR = 1e-4
TIER_A_REPORT_TOL = {"fp32": 1e-3, "bf16": 2e-2}
TIER_B_FLOOR_FACTOR = 5.0
TIER_B_MIN_FLOOR = 1e-3


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from flatten(value[key], f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from flatten(item, f"{prefix}[{index}]")
    else:
        yield prefix, value


def compare_states(
    reference: dict[str, Any],
    candidate: dict[str, Any],
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> dict[str, Any]:
    """Bitwise (rtol = atol = 0) or tolerance comparison of two saved states."""
    import torch

    ref = dict(flatten(reference))
    cand = dict(flatten(candidate))
    mismatches: list[str] = []
    max_abs = 0.0
    compared = 0
    for key in sorted(set(ref) | set(cand)):
        if key not in ref or key not in cand:
            mismatches.append(f"{key}: missing on one side")
            continue
        a, b = ref[key], cand[key]
        compared += 1
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                mismatches.append(f"{key}: shape/dtype {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}")
                continue
            if rtol == 0.0 and atol == 0.0:
                equal = torch.equal(a, b) or (
                    a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                    and torch.equal(a[~a.isnan()], b[~b.isnan()])
                )
            else:
                equal = bool(torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol))
            if a.is_floating_point() and a.numel():
                diff = (a.double() - b.double()).abs()
                finite = diff[torch.isfinite(diff)]
                if finite.numel():
                    max_abs = max(max_abs, float(finite.max()))
            if not equal:
                mismatches.append(key)
        elif isinstance(a, float) and isinstance(b, float):
            if rtol == 0.0 and atol == 0.0:
                equal = a == b or (math.isnan(a) and math.isnan(b))
            else:
                equal = math.isclose(a, b, rel_tol=rtol, abs_tol=atol)
            if math.isfinite(a) and math.isfinite(b):
                max_abs = max(max_abs, abs(a - b))
            if not equal:
                mismatches.append(f"{key}: {a!r} vs {b!r}")
        elif a != b:
            mismatches.append(f"{key}: {a!r} vs {b!r}")
    return {
        "equal": not mismatches,
        "compared_entries": compared,
        "max_abs_diff": max_abs,
        "mismatches": mismatches[:20],
        "mismatch_count": len(mismatches),
    }


def compare_relative(
    reference: dict[str, Any], candidate: dict[str, Any], rel_tol: float
) -> dict[str, Any]:
    """Per tensor ||a - b|| / ||a|| <= rel_tol; per float |a - b| <= rel_tol * max(|a|, floor)."""
    import torch

    ref = dict(flatten(reference))
    cand = dict(flatten(candidate))
    worst: tuple[float, str] = (0.0, "")
    failures: list[str] = []
    for key in sorted(set(ref) | set(cand)):
        if key not in ref or key not in cand:
            failures.append(f"{key}: missing on one side")
            continue
        a, b = ref[key], cand[key]
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            a64, b64 = a.double(), b.double()
            scale = float(a64.norm())
            rel = float((a64 - b64).norm()) / scale if scale > 0 else float((b64).norm())
        elif isinstance(a, float):
            rel = abs(a - b) / max(abs(a), GPU_METRIC_ABS_FLOOR)
        else:
            rel = 0.0 if (a == b if not isinstance(a, torch.Tensor) else torch.equal(a, b)) else 1.0
        if not math.isfinite(rel) or rel > rel_tol:
            failures.append(f"{key}: {rel:.3g}")
        if math.isfinite(rel) and rel > worst[0]:
            worst = (rel, key)
    return {
        "passed": not failures,
        "rel_tol": rel_tol,
        "worst_relative_difference": worst[0],
        "worst_entry": worst[1],
        "failures": failures[:20],
        "failure_count": len(failures),
    }


def _relative_l2(reference: Any, candidate: Any) -> float:
    """||a - b|| / ||a|| in float64 (||b|| when a is all zero)."""
    a64, b64 = reference.double(), candidate.double()
    scale = float(a64.norm())
    return float((a64 - b64).norm()) / scale if scale > 0 else float(b64.norm())


def batchnorm_errors(
    before: dict[str, Any],
    reference: dict[str, Any],
    candidate: dict[str, Any],
    momentum: dict[str, float],
    eps: float = 1e-5,
) -> dict[str, float]:
    """Running-statistic differences in units of the batch statistics of the update.

    ``before`` holds the statistics before the update (the same for both sides),
    ``reference``/``candidate`` after it. The update is ``r <- r + m * (b - r)`` with
    batch mean/variance ``b``, so ``reference``'s batch variance per channel is
    ``(var_after - (1 - m) * var_before) / m``. The errors are the candidate's batch
    mean error in batch standard deviations and its batch variance error relative to
    the batch variance (``eps``: the layers' own, keeps dead channels finite), max over
    channels. A layer the reference update left bitwise unchanged must be bitwise
    unchanged in the candidate too (inf otherwise): an update where none belongs.
    """
    errors: dict[str, float] = {}
    for layer, m in momentum.items():
        mean_key, var_key = f"{layer}.running_mean", f"{layer}.running_var"
        ref_mean, ref_var = reference[mean_key].double(), reference[var_key].double()
        cand_mean, cand_var = candidate[mean_key].double(), candidate[var_key].double()
        old_mean, old_var = before[mean_key].double(), before[var_key].double()
        if bool((ref_mean == old_mean).all()) and bool((ref_var == old_var).all()):
            unchanged = bool((cand_mean == ref_mean).all()) and bool((cand_var == ref_var).all())
            errors[mean_key] = 0.0 if unchanged else math.inf
            errors[var_key] = errors[mean_key]
            continue
        batch_var = ((ref_var - (1.0 - m) * old_var) / m).clamp_min(0.0) + eps
        mean_excess = _beyond_storage_ulps(reference[mean_key], candidate[mean_key])
        var_excess = _beyond_storage_ulps(reference[var_key], candidate[var_key])
        errors[mean_key] = float((mean_excess / (m * batch_var.sqrt())).max())
        errors[var_key] = float((var_excess / (m * batch_var)).max())
    return errors


def _beyond_storage_ulps(reference: Any, candidate: Any, ulps: float = 2.0) -> Any:
    """|a - b| less ``ulps`` units in the last place of a's storage dtype, at least 0.

    A running statistic is stored after every update, so two runs whose batch
    statistics differ by any amount can round to neighbouring values: one ulp of the
    running value (~6e-8 of a running variance near 1 in fp32), which divided by the
    momentum is ~1e-5 in batch units, far above the batch statistics' own rounding.
    Two ulps (one rounding on each side) are that storage floor, not a difference.
    """
    import torch

    magnitude = reference.abs()
    ulp = torch.nextafter(magnitude, torch.full_like(magnitude, math.inf)) - magnitude
    excess = (candidate.double() - reference.double()).abs() - ulps * ulp.double()
    return excess.clamp_min(0.0)


def first_update_errors(
    reference: dict[str, Any],
    candidate: dict[str, Any],
    phases: tuple[str, ...] = ("critic", "actor"),
) -> dict[str, float]:
    """Every first-update quantity's difference, keyed ``phase/kind/name``.

    Both probes must come from the same data and the same pre-training state (the
    same seed); ``reference["batchnorm_before"]`` is that state's statistics.
    """
    errors: dict[str, float] = {}
    for phase in phases:
        ref, cand = reference[phase], candidate[phase]
        for key in sorted(set(ref["metrics"]) | set(cand["metrics"])):
            if key not in ref["metrics"] or key not in cand["metrics"]:
                errors[f"{phase}/loss/{key}"] = math.inf
                continue
            a, b = float(ref["metrics"][key]), float(cand["metrics"][key])
            errors[f"{phase}/loss/{key}"] = abs(a - b) / max(abs(a), GPU_METRIC_ABS_FLOOR)
        for key in sorted(set(ref["gradients"]) | set(cand["gradients"])):
            if key not in ref["gradients"] or key not in cand["gradients"]:
                errors[f"{phase}/gradient/{key}"] = math.inf
                continue
            errors[f"{phase}/gradient/{key}"] = _relative_l2(
                ref["gradients"][key], cand["gradients"][key]
            )
        bn = batchnorm_errors(
            reference["batchnorm_before"],
            ref["batchnorm"],
            cand["batchnorm"],
            reference["batchnorm_momentum"],
        )
        errors.update({f"{phase}/batchnorm/{key}": value for key, value in bn.items()})
    return errors


def compare_first_update(
    reference: dict[str, Any],
    candidate: dict[str, Any],
    *,
    precision_floor: dict[str, float] | None = None,
    phases: tuple[str, ...] = ("critic", "actor"),
) -> dict[str, Any]:
    """Gate the first update of ``candidate`` against ``reference`` (see constants).

    fp32: ``FIRST_UPDATE_FP32_TOL`` per kind. With ``precision_floor`` (bf16: the
    per-quantity errors of eager bf16 against eager fp32), each quantity may differ by
    ``BF16_FLOOR_FACTOR`` times its floor, never less than the fp32 tolerance (losses:
    never less than ``BF16_MIN_TOL``).
    """
    errors = first_update_errors(reference, candidate, phases)
    failures: list[str] = []
    worst: dict[str, tuple[float, str, float]] = {}
    for key, value in errors.items():
        kind = key.split("/")[1]
        tol = FIRST_UPDATE_FP32_TOL[kind]
        if precision_floor is not None:
            floor = precision_floor.get(key, math.inf)
            tol = max(tol, BF16_FLOOR_FACTOR * floor) if math.isfinite(floor) else tol
            tol = max(tol, BF16_MIN_TOL.get(kind, 0.0))
        if not value <= tol:
            failures.append(f"{key}: {value:.3g} > {tol:.3g}")
        ratio = value / tol if tol > 0 else math.inf
        if kind not in worst or ratio > worst[kind][0] or (math.isnan(ratio)):
            worst[kind] = (ratio, key, value)
    return {
        "passed": not failures,
        "tolerance_rule": (
            f"{BF16_FLOOR_FACTOR} x (eager bf16 vs eager fp32), at least {FIRST_UPDATE_FP32_TOL} "
            f"and {BF16_MIN_TOL}"
            if precision_floor is not None
            else f"fp32 rounding floor x margin: {FIRST_UPDATE_FP32_TOL}"
        ),
        "worst_by_kind": {
            kind: {"entry": key, "difference": value, "fraction_of_tolerance": ratio}
            for kind, (ratio, key, value) in worst.items()
        },
        "failures": failures[:20],
        "failure_count": len(failures),
        "compared": len(errors),
    }
