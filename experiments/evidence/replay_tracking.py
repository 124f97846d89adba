"""Tracking errors of the replay-stability study: one iteration of a graph path against eager.

validate_replay_stability.py loads an eager learner with the graph learner's state before
each iteration, runs both on the same batches and random stream, and gates what this
module measures: the rounding of one iteration, per kind (``TRACKING_TOL``).

Imported by ``validate_replay_stability.py``; the tests gate it on CPU runs.
"""

from __future__ import annotations

import math
from typing import Any

#: One iteration's rounding, graph path vs eager from the same state (tracking_errors),
#: gated at every iteration. The whole step and the Adam moments also move discretely:
#: where the two critics' values of a sample are within rounding of each other, the
#: minimum picks the other critic and that sample's gradient changes path (1 of 256
#: samples: a few 1e-3 of the step); on the H200 ~7 % of iterations showed such a flip,
#: the largest 1.1e-2 (step) and 2.1e-2 (moments), medians 6.5e-5 and 3e-6. So those two
#: are gated per iteration only against a broken iteration (a stale batch or a skipped
#: update moves them by ~1) and, for systematic errors, by their median over the run
#: (TRACKING_MEDIAN_TOL): a stale learning rate shifts every iteration's step by the
#: schedule's per-step change, 1e-3 or more here (5e-3 in the warm-up).
TRACKING_TOL = {"parameters": 1e-3, "batchnorm": 1e-3, "update": 5e-2, "optimizer": 5e-2}
TRACKING_MEDIAN_TOL = {"update": 5e-4, "optimizer": 5e-4}
BN_EPS = 1e-5
PARAM_NORM_FLOOR = 1.0


def parameters_of(learner: Any) -> dict[str, Any]:
    """Every trainable tensor of the learner, detached copies, by a stable name."""
    return {
        f"{module}.{key}": value.detach().float().clone()
        for module in ("actor", "critic", "temperature")
        for key, value in getattr(learner, module).named_parameters()
    }


def tracking_errors(
    torch: Any, before: dict[str, Any], reference: Any, candidate: Any
) -> dict[str, tuple[float, str]]:
    """Worst difference of one iteration, graph path vs eager, per kind (see TRACKING_TOL).

    Both learners start the iteration from the same state (``before`` holds its
    parameters), so every difference is the rounding of that one iteration.
    ``parameters``: per tensor ||a - b|| / max(||a||, 1), modules' parameters and buffers
    except BatchNorm statistics (the floor keeps zero-initialized biases, whose norm is a
    few steps of size lr, from turning rounding into a large ratio).
    ``batchnorm``: running statistics in the units of the batch statistics that move
    them (|d mean| / sqrt(var + eps), |d var| / (var + eps), worst channel): a running
    mean that starts at zero has a rounding-noise norm, so its relative difference is
    ~1 for a one-ulp change (iteration 0 of the first H200 run showed 0.76).
    ``update``: the iteration's whole parameter step, ||d_a - d_b|| / ||d_a|| over all
    parameters: a learning rate off by the schedule's per-step change (~0.5 % here)
    moves it by ~3e-3 while per-tensor parameter differences stay ~1e-5 (CPU check in
    tests/test_whole_cycle_graph.py).
    ``optimizer``: per optimizer, the Adam moments concatenated; per tensor they are not
    comparable, since a bias whose gradient is a batch sum that cancels has relative
    rounding of any size (per-tensor exp_avg differences up to 4e-3 were measured).
    """
    worst: dict[str, tuple[float, str]] = {}

    def note(kind: str, value: float, entry: str) -> None:
        if kind not in worst or value > worst[kind][0] or not math.isfinite(value):
            worst[kind] = (value if math.isfinite(value) else math.inf, entry)

    def rel(a: Any, b: Any) -> float:
        scale = float(torch.linalg.vector_norm(a))
        diff = float(torch.linalg.vector_norm(a - b))
        return diff / scale if scale > 0 else diff

    for module in ("actor", "critic", "target_critic", "temperature"):
        ref_state = getattr(reference, module).state_dict()
        cand_state = getattr(candidate, module).state_dict()
        for key, value in ref_state.items():
            if not value.is_floating_point():
                continue
            a, b = value.float(), cand_state[key].float()
            name = f"{module}.{key}"
            if key.endswith("running_mean"):
                var = ref_state[key[: -len("mean")] + "var"].float()
                note("batchnorm", float(((a - b).abs() / (var + BN_EPS).sqrt()).max()), name)
            elif key.endswith("running_var"):
                note("batchnorm", float(((a - b).abs() / (a + BN_EPS)).max()), name)
            else:
                scale = max(float(torch.linalg.vector_norm(a)), PARAM_NORM_FLOOR)
                note("parameters", float(torch.linalg.vector_norm(a - b)) / scale, name)
    after_ref, after_cand = parameters_of(reference), parameters_of(candidate)
    step_ref = torch.cat([(after_ref[k] - before[k]).flatten() for k in before])
    step_cand = torch.cat([(after_cand[k] - before[k]).flatten() for k in before])
    note("update", rel(step_ref, step_cand), "all parameters")
    for name in ("actor_optimizer", "critic_optimizer", "temperature_optimizer"):
        ref_opt, cand_opt = getattr(reference, name), getattr(candidate, name)
        pairs = zip(ref_opt.param_groups[0]["params"], cand_opt.param_groups[0]["params"], strict=True)
        ref_m, cand_m = [], []
        for p_ref, p_cand in pairs:
            for moment in ("exp_avg", "exp_avg_sq"):
                ref_m.append(ref_opt.state[p_ref][moment].float().flatten())
                cand_m.append(cand_opt.state[p_cand][moment].float().flatten())
        note("optimizer", rel(torch.cat(ref_m), torch.cat(cand_m)), name)
    return worst
