"""The learning-parity check's statistics: curve metrics per run, an equivalence test per candidate arm.

Fixed before any committed parity run was made (and not to be tuned to its results):

* **Metrics per run** (one seed): ``auc``, the area under the reward curve per env step (every iteration
  collects the same number of env steps, so it is the mean of all logged rewards), and ``final``, the mean of
  the last ``final_last`` logged rewards (500 of 3000 iterations: the plateau, not a point on the slope).
* **Margin**: ``MARGIN_FRACTION`` (15 %) of the baseline arm's learning gain, i.e. of (baseline mean final)
  − (baseline mean of its first ``START_WINDOW`` logged rewards). A gain, not a level, because the G1
  reward starts below zero, so a fraction of a level would not scale.
* **Test**: two one-sided tests (TOST) at α = 0.05 on the seed means: the 90 % Welch confidence interval of
  (candidate − baseline) must lie inside ±margin, for both metrics. Learning clearly *better* fails as
  well: the overlay claims the same update math, so any difference beyond the margin is a finding.

With few seeds the interval is wide, so a check like this can also fail an equal learner: that is the price
of a check that can fail. The negative control (bench_configs.NEGATIVE_CONTROL) shows it does fail a learner
that learns worse.

Used by ``bench_parity`` (the verdict of ``make bench-parity``) and by the evidence that compares
learning curves with the same test: ``evidence/time_to_reward.py``, ``evidence/mjwarp_report.py`` and
``evidence/policy_eval_report.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist, fmean, stdev
from typing import Any

MARGIN_FRACTION = 0.15
ALPHA = 0.05
START_WINDOW = 50
METRICS = ("auc", "final")


def rewards_of(run: dict[str, Any]) -> list[float]:
    """The run's logged rewards in iteration order (iterations before learning has a reward are skipped)."""
    return [float(r) for r in run.get("reward") or [] if r is not None]


def curve_metrics(rewards: Sequence[float], *, final_last: int) -> dict[str, float] | None:
    """``auc`` (mean reward per env step over the whole run), ``final`` and ``start`` window means."""
    if not rewards:
        return None
    return {"auc": fmean(rewards), "final": fmean(rewards[-final_last:]), "start": fmean(rewards[:START_WINDOW])}


def t_quantile(p: float, df: float) -> float:
    """Student-t quantile by the Cornish-Fisher expansion, no SciPy needed.

    |error| < 2e-3 for df ≥ 4 (6e-3 at df 3); it errs narrow, so callers floor Welch's df, which widens.
    """
    z = NormalDist().inv_cdf(p)
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


@dataclass(frozen=True)
class Interval:
    """The (1 − 2α) Welch confidence interval of mean(a) − mean(b)."""

    difference: float
    low: float
    high: float
    df: float

    def inside(self, margin: float) -> bool:
        """The equivalence rule: the whole interval lies within ±margin."""
        return -margin <= self.low and self.high <= margin


def welch_interval(a: Sequence[float], b: Sequence[float], *, alpha: float = ALPHA) -> Interval:
    """Welch's interval for the difference of two means with unequal variances (needs ≥ 2 values each)."""
    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    se = math.sqrt(va + vb)
    difference = fmean(a) - fmean(b)
    if se == 0.0:
        return Interval(difference, difference, difference, math.inf)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(1 - alpha, max(math.floor(df), 1)) * se
    return Interval(difference, difference - half, difference + half, df)


def arm_metrics(runs: Sequence[dict[str, Any]], *, final_last: int,
                arm_of: Callable[[dict[str, Any]], str] = lambda run: str(run.get("config"))
                ) -> dict[str, dict[str, dict[str, float]]]:
    """arm (the run's configuration, or what ``arm_of`` names) → seed → metrics, for the completed runs."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for run in runs:
        if run.get("status") != "completed":
            continue
        metrics = curve_metrics(rewards_of(run), final_last=final_last)
        if metrics is not None:
            seed = str((run.get("training_config") or {}).get("seed"))
            out.setdefault(arm_of(run), {})[seed] = metrics
    return out


def verdict(candidate: dict[str, dict[str, float]], baseline: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Equivalence of one candidate arm with the baseline arm, per metric; ``passed`` needs both."""
    if len(candidate) < 2 or len(baseline) < 2:
        return {"passed": False, "reason": f"too few finished seeds ({len(candidate)} vs {len(baseline)}; need ≥ 2)"}
    gain = fmean(m["final"] for m in baseline.values()) - fmean(m["start"] for m in baseline.values())
    margin = MARGIN_FRACTION * abs(gain)
    tests: dict[str, Any] = {}
    for metric in METRICS:
        interval = welch_interval([m[metric] for m in candidate.values()], [m[metric] for m in baseline.values()])
        tests[metric] = {"difference": interval.difference, "ci_low": interval.low, "ci_high": interval.high,
                         "df": interval.df, "equivalent": interval.inside(margin)}
    passed = all(t["equivalent"] for t in tests.values())
    reason = "; ".join(f"{metric}: {t['difference']:+.3f}, {100 * (1 - 2 * ALPHA):.0f}% CI "
                       f"[{t['ci_low']:+.3f}, {t['ci_high']:+.3f}] {'inside' if t['equivalent'] else 'outside'} "
                       f"±{margin:.3f}" for metric, t in tests.items())
    return {"passed": passed, "margin": margin, "baseline_gain": gain, "margin_fraction": MARGIN_FRACTION,
            "alpha": ALPHA, "tests": tests, "reason": reason}
