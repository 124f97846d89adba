"""Two device envs, or two forms of one env's step, compared on identical inputs: the tolerances and the comparisons.

Bitwise where the arithmetic is the same; where it must differ (a fused kernel's float32 rounding, MuJoCo Warp's
atomic sums on a GPU) within the stated tolerances below, each a fact of one place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from device_env_build import seeded_actions
from device_env_counts import WarpLaunches, warp_arrays

#: Largest reward difference allowed per env step (rewards are O(0.1-1) per step; float32 ulp there ~6e-8).
REWARD_ATOL = 1e-6
#: Largest observation difference allowed between the fused step and the torch step, relative to the value's
#: magnitude (at least 1): float32 rounding of a fused multiply-add or another ``exp``, not a changed term.
FUSED_OBS_RTOL = 1e-6
#: The curriculum's float64 state, and how far the fused reset's may be from the torch reset's (relative): a GPU
#: compiler may contract its weighted average into a fused multiply-add.
FUSED_CURRICULUM = ("penalty_scale", "average_length")
FUSED_CURRICULUM_RTOL = 1e-12
#: How far, relative to the value's magnitude (at least 1), a MuJoCo Warp data array after the fused reset may be
#: from the torch reset's on CUDA: both run the same MuJoCo Warp kinematics, whose subtree sums
#: (``smooth._subtree_com_acc``, then ``cinert``, ``cdof``, ``cvel``, the sensors) add a body's children into it
#: with ``wp.atomic_add`` in no fixed order on a GPU, so the torch reset run twice from one state differs from
#: itself there in the last bits (``torch_run_to_run``). On the CPU Warp runs a kernel's threads in order: bitwise.
MJWARP_CUDA_RTOL = 1e-5
#: What the step's work between the physics and the reset writes (``G1WalkDeviceEnv._after_physics``): the fused
#: step must leave each as the torch step does; the rewards within ``REWARD_ATOL``, the observations within
#: ``FUSED_OBS_RTOL``, the rest bitwise.
FUSED_OUTPUTS = ("steps", "episode_length", "terminated", "truncated", "done", "gait_phase", "reward", "time_left",
                 "command", "is_standing", "policy_obs", "critic_obs", "final_policy_obs", "final_critic_obs")


def max_abs(a: np.ndarray, b: torch.Tensor) -> float:
    diff = np.abs(np.asarray(a, dtype=np.float64) - b.detach().cpu().numpy().astype(np.float64))
    return float(diff.max()) if diff.size else 0.0


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


def fused_tensors(dev: Any) -> dict[str, torch.Tensor]:
    """The env's tensors of ``FUSED_OUTPUTS``, by name."""
    s = dev.state
    own = {"episode_length": s.episode_length, "gait_phase": s.gait_phase, "command": s.command,
           "done": dev._done}  # noqa: SLF001
    return {name: own[name] if name in own else getattr(dev, name) for name in FUSED_OUTPUTS}


def reset_tensors(dev: Any) -> dict[str, torch.Tensor]:
    """What the reset of the done rows may write: the env's state, the curriculum, the per-world gains, MuJoCo
    Warp's reset mask and every MuJoCo Warp data array (as torch views), by name."""
    import warp as wp

    s, sim = dev.state, dev.sim
    out = {"time_left": dev.time_left, "command": s.command, "is_standing": dev.is_standing,
           "gait_phase": s.gait_phase, "action": s.action, "prev_action": s.prev_action, "steps": dev.steps,
           "policy_obs": dev.policy_obs, "critic_obs": dev.critic_obs, "penalty_scale": dev._scale,  # noqa: SLF001
           "average_length": dev._average_length, "gainprm": sim.gainprm, "biasprm": sim.biasprm,  # noqa: SLF001
           "reset_mask": sim._reset_mask}  # noqa: SLF001
    out.update({f"mjwarp.{name}": wp.to_torch(array) for name, array in warp_arrays(dev).items()})
    return out


class FusedComparison:
    """The fused step's outputs against the torch step's, name by name: whether bitwise, the largest differences,
    and the first step outside the tolerance (rewards within ``REWARD_ATOL``, observations within
    ``FUSED_OBS_RTOL``, the curriculum's float64 state within ``FUSED_CURRICULUM_RTOL``, the rest bitwise)."""

    def __init__(self, names: Any = FUSED_OUTPUTS) -> None:
        self.names = list(names)
        self.steps = 0
        self.first_difference_step: dict[str, int] = {}
        self.bitwise = dict.fromkeys(self.names, True)
        self.max_abs_diff = dict.fromkeys(self.names, 0.0)
        self.max_rel_diff = dict.fromkeys(self.names, 0.0)

    def compare(self, name: str, fused: torch.Tensor, reference: torch.Tensor) -> None:
        if torch.equal(fused, reference) or (fused.is_floating_point() and torch.equal(fused.isnan(), reference.isnan())
                                             and torch.equal(fused.nan_to_num(), reference.nan_to_num())):
            return
        self.bitwise[name] = False
        ok = False
        if fused.is_floating_point():
            diff = (fused.double() - reference.double()).abs()
            rel = diff / reference.double().abs().clamp_min(1.0)
            self.max_abs_diff[name] = max(self.max_abs_diff[name], float(diff.max()))
            self.max_rel_diff[name] = max(self.max_rel_diff[name], float(rel.max()))
            if name == "reward":
                ok = float(diff.max()) <= REWARD_ATOL
            elif name.endswith("obs"):
                ok = float(rel.max()) <= FUSED_OBS_RTOL
            elif name in FUSED_CURRICULUM:
                ok = float(rel.max()) <= FUSED_CURRICULUM_RTOL
            elif name.startswith("mjwarp.") and fused.is_cuda:
                ok = float(rel.max()) <= MJWARP_CUDA_RTOL
        if not ok:
            self.first_difference_step.setdefault(name, self.steps)

    def result(self) -> dict[str, Any]:
        return {"outputs_compared": self.names, "bitwise": self.bitwise, "max_abs_diff": self.max_abs_diff,
                "max_rel_diff": self.max_rel_diff,
                "tolerance": {"reward_abs": REWARD_ATOL, "observations_rel": FUSED_OBS_RTOL,
                              "curriculum_rel": FUSED_CURRICULUM_RTOL, "mjwarp_cuda_rel": MJWARP_CUDA_RTOL,
                              "others": "bitwise"},
                "first_difference_step": self.first_difference_step, "steps_compared": self.steps}


class FusedWitness(FusedComparison):
    """Before each fused launch of ``dev`` (the work after the physics, the reset of the done rows), runs the torch
    form from the same state (the same physics, the same draws), keeps what it wrote, puts the state back, then runs
    the fused form and compares: so the two forms are compared on identical inputs at every step, on any device
    (eager). ``reset`` holds the reset's comparison (every MuJoCo Warp data array among what it compares);
    ``run_to_run`` the torch reset run a second time from the same state against its first run, bitwise: where the
    two runs of one form differ, nothing in the fused form's code is the cause."""

    def __init__(self, dev: Any) -> None:
        super().__init__()
        self.dev, fused = dev, dev._fused  # noqa: SLF001
        self._after_physics, self._reset = fused.after_physics, fused.reset_done_rows
        dev._fused = self  # noqa: SLF001 - the env calls the witness's two methods in the fused step's place
        self.reset = FusedComparison(reset_tensors(dev))
        self.run_to_run = FusedComparison(reset_tensors(dev))

    @staticmethod
    def _twice(tensors: dict[str, torch.Tensor], torch_form: Any, fused_form: Any,
               again: FusedComparison | None = None) -> dict[str, torch.Tensor]:
        """Runs the torch form, keeps what it left, puts the state back, runs the fused form; the torch form's.
        With ``again``, the torch form runs a second time from the same state first, compared with its first run."""
        before = {name: t.clone() for name, t in tensors.items()}
        torch_form()
        reference = {name: t.clone() for name, t in tensors.items()}
        if again is not None:
            for name, t in tensors.items():
                t.copy_(before[name])
            torch_form()
            for name, t in tensors.items():
                again.compare(name, t, reference[name])
            again.steps += 1
        for name, t in tensors.items():
            t.copy_(before[name])
        fused_form()
        return reference

    def after_physics(self) -> None:
        dev = self.dev
        tensors = fused_tensors(dev)
        reference = self._twice(tensors, lambda: dev._after_physics(dev._drawn.current), self._after_physics)  # noqa: SLF001
        for name, t in tensors.items():
            self.compare(name, t, reference[name])
        self.steps += 1

    def reset_done_rows(self) -> None:
        dev = self.dev
        ahead = dev._drawn.current  # noqa: SLF001
        tensors = reset_tensors(dev)
        reference = self._twice(tensors, lambda: dev._reset_rows(dev._done, update_curriculum=True,  # noqa: SLF001
                                                                 drawn=ahead.reset, noise=ahead.reset_noise),
                                self._reset, again=self.run_to_run)
        for name, t in tensors.items():
            self.reset.compare(name, t, reference[name])
        self.reset.steps += 1
