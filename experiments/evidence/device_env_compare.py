"""Two device envs, or a device env and UniLab's NumPy env, compared on identical inputs: the tolerance and the
comparisons.

Bitwise where the arithmetic is the same; the rewards, whose exp and sums are float32 rounding away from NumPy's,
within ``REWARD_ATOL``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from device_env_build import seeded_actions
from device_env_counts import WarpLaunches, warp_arrays

#: Largest reward difference allowed per env step (rewards are O(0.1-1) per step; float32 ulp there ~6e-8).
REWARD_ATOL = 1e-6
def _host(x: Any) -> np.ndarray:
    return np.asarray(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float64)


def max_abs(a: Any, b: Any) -> float:
    """The largest absolute difference of two arrays or tensors (0 for empty ones). Equal entries (a NaN on both
    sides, or the same infinity) differ by 0; a NaN on one side only is an infinite difference, so that a state gone
    NaN can never pass for an equal one (NaN compares False with any limit)."""
    x, y = _host(a), _host(b)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    diff = np.nan_to_num(np.where(same, 0.0, np.abs(x - y)), nan=np.inf)
    return float(diff.max()) if diff.size else 0.0


def record_step_outputs(record: Any, step: int, state: Any, out: Any, device: torch.device) -> None:
    """One step of UniLab's env (``state``) beside the device env's (``out``): both observation groups, and on the
    done rows the final observations, each by its key (``obs``, ``critic``, ``final_obs``, ``final_critic``)."""
    record(step, "obs", max_abs(state.obs["obs"], out.policy_obs))
    record(step, "critic", max_abs(state.obs["critic"], out.critic_obs))
    done = state.terminated | state.truncated
    final = state.final_observation or {}
    for key, group, tensor in (("final_obs", "obs", out.final_policy_obs),
                               ("final_critic", "critic", out.final_critic_obs)):
        if done.any():
            record(step, key, max_abs(final[group][done], tensor[torch.from_numpy(done).to(device)]))


class SideBySideRecord:
    """A run of UniLab's env beside a device env on identical inputs: the largest difference of each compared
    quantity, the first step at which each exceeds its limit (none: equal), and the episode counts. Called as
    ``record(step, key, value, limit=0.0)`` (``record_step_outputs`` takes it so)."""

    def __init__(self, keys: tuple[str, ...], counts: tuple[str, ...] = ()) -> None:
        self.worst = dict.fromkeys(keys, 0.0)
        self.first: dict[str, int] = {}
        self.counts = dict.fromkeys(("terminated", "truncated", "done_mismatches", *counts), 0)

    def __call__(self, step: int, key: str, value: float, limit: float = 0.0) -> None:
        self.worst[key] = max(self.worst[key], value)
        if value > limit and key not in self.first:
            self.first[key] = step

    def dones(self, step: int, state: Any, out: Any) -> None:
        """The step's terminations and time-outs, row by row (``dones``: the first step any row differs)."""
        mismatch = int((state.terminated != out.terminated.cpu().numpy()).sum()
                       + (state.truncated != out.truncated.cpu().numpy()).sum())
        self.counts["done_mismatches"] += mismatch
        if mismatch and "dones" not in self.first:
            self.first["dones"] = step
        self.counts["terminated"] += int(state.terminated.sum())
        self.counts["truncated"] += int(state.truncated.sum())

    @property
    def equal(self) -> bool:
        return not self.first

    def result(self, **head: Any) -> dict[str, Any]:
        """The run's JSON record: ``head`` (what was run), then the differences, their first steps and counts."""
        return {**head, "max_abs_diff": self.worst, "reward_atol": REWARD_ATOL, "first_mismatch_step": self.first,
                "counts": self.counts, "equal": self.equal}


def same_array(a: Any, b: Any) -> bool:
    """Two Warp arrays bitwise equal (NaN where the other has NaN counts as equal)."""
    return bool(np.array_equal(a.numpy(), b.numpy(), equal_nan=True))


def step_side_by_side(first: Any, second: Any, steps: int, idle_exempt: frozenset[str] = frozenset(),
                      sensor_columns: torch.Tensor | None = None) -> dict[str, Any]:
    """Two device envs stepped with the same seeded actions after a reset: the first step at which each MuJoCo Warp
    array and env output differs (none: bitwise equal throughout), and each env's Warp launches per step. Arrays
    that differ right after the reset are memory MuJoCo Warp leaves unfilled for the model: zeroed in both, named,
    and compared from then on like the rest. Arrays of ``idle_exempt`` are compared after steps with a done row
    only (``idle_steps``: the steps without one, by the second env's dones). ``sensor_columns``: the ``sensordata``
    columns compared (a boolean mask; None: all)."""
    outputs = ("policy_obs", "critic_obs", "reward", "terminated", "truncated", "final_policy_obs", "final_critic_obs")
    results = [first.reset(), second.reset()]
    arrays = warp_arrays(first), warp_arrays(second)

    def same(name: str) -> bool:
        if name == "sensordata" and sensor_columns is not None:
            return torch.equal(first.sim.sensordata[:, sensor_columns], second.sim.sensordata[:, sensor_columns])
        return same_array(arrays[0][name], arrays[1][name])

    unfilled = sorted(name for name in arrays[0] if not same(name))
    for side in arrays:
        for name in unfilled:
            side[name].zero_()
    actions = seeded_actions(first, steps)
    differ: dict[str, int] = {}
    launches = [0, 0]
    done_rows = idle_steps = 0
    for t in range(steps):
        for index, dev in enumerate((first, second)):
            with WarpLaunches() as counted:
                results[index] = dev.step(actions[t])
            launches[index] += counted.count
        step_done = int((results[1].terminated | results[1].truncated).sum())
        done_rows += step_done
        idle_steps += step_done == 0
        for name in arrays[0]:
            if step_done == 0 and name in idle_exempt:
                continue
            if name not in differ and not same(name):
                differ[name] = t
        for name in outputs:
            if name not in differ and not torch.equal(getattr(results[0], name), getattr(results[1], name)):
                differ[name] = t
    return {"arrays_compared": len(arrays[0]), "outputs_compared": list(outputs), "unfilled_at_reset": unfilled,
            "done_rows": done_rows, "idle_steps": idle_steps, "first_difference_step": differ,
            "launches": [n / steps for n in launches]}
