"""A worker's configuration, and the study's learner and robustness settings.

The parent writes one ``WorkerConfig`` per worker as JSON; the worker reads it back. Every
field but the first four is off by default, so a configuration names only what it asks for.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import bench_configs
from learner_study import BASE_LEARNER_KWARGS, GPU_HIDDEN_DIMS

#: The CPU-sized learner of the numerics study (the GPU runs override the hidden sizes).
LEARNER_KWARGS: dict[str, Any] = {
    **BASE_LEARNER_KWARGS,
    "actor_hidden_dim": 32,
    "critic_hidden_dim": 64,
    # A short schedule so that the learning rate really changes during the run.
    "learning_rate_init": 1e-4,
    "learning_rate_peak": 3e-4,
    "learning_rate_end": 1.5e-4,
    "learning_rate_warmup_steps": 4,
    "learning_rate_decay_steps": 40,
}
GPU_LEARNER_KWARGS = dict(GPU_HIDDEN_DIMS)

#: The patched configurations of GPU mode, their switches from the one configuration table.
GPU_CONFIGS: dict[str, dict[str, bool | int]] = bench_configs.study_switches(bench_configs.NUMERICS_STUDY)

# Snapshots (``"<update>:<phase>"``, taken before that phase of that update).
# After the first iteration (2 critic, 1 actor, 2 target updates): reported (tier A).
TIER_A_SNAPSHOT = "2:critic"
# Before the first actor update: the state after exactly one critic update (and no
# target update), which the baseline, without the probe, offers for the critic.
FIRST_CRITIC_SNAPSHOT = "0:actor"

# One bad batch, then clean ones (uni_rl 0003), in a run resumed from a CPU learner's
# checkpoint (uni_rl 0005). ``poison``: NaN/Inf in one field of one update's batch, which
# every path reads (the whole-cycle graph takes the batch as the runner hands it): an
# observation at the first update of iteration 2 (skips that iteration's actor and
# temperature steps) and a critic input at the first update of iteration 4 (skips a
# critic step, and the actor step that reads it through the frozen critic). Snapshots
# around iteration 2 show its skipped actor step left the actor bitwise as it was.
ROBUSTNESS_CONFIG: dict[str, Any] = {
    "poison": [{"update": 4, "field": "obs"}, {"update": 8, "field": "critic"}],
    "snapshot_at": ["4:critic", "6:critic"],
    "resume_from_cpu_checkpoint": True,
}
# Which steps a poisoned field skips (see ROBUSTNESS_CONFIG).
POISON_SKIPS = {"obs": ("actor", "temperature"), "critic": ("critic", "actor")}
SKIP_RATE_KEYS = ("critic_skip_rate", "actor_skip_rate", "temperature_skip_rate")


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What one worker runs: the learner, the schedule, and which probes and perturbations.

    ``learner``: keyword arguments on top of ``LEARNER_KWARGS`` (switches, sizes).
    ``inject``: ``{"update", "phase", "field"}`` items, a NaN/Inf batch for one phase of
    one update (per-update paths only). ``poison``: ``{"update", "field"}`` items, a
    NaN/Inf field in one update's batch for every path. ``snapshot_at``: states to save.
    ``audit_updates``: also audit a cycle of this many updates (0: not).
    """

    device: str
    seed: int
    updates_per_step: int
    policy_frequency: int
    learner: dict[str, Any] = dataclasses.field(default_factory=dict)
    fallback_random: bool = False  # Inductor draws eager's random numbers
    compile_on_cpu: bool = False  # lift the learner's CUDA-only compile gate
    warm_up: bool = False
    count_requires_grad_toggles: bool = False
    first_update_probe: bool = False
    one_ulp_rewards: bool = False
    inject: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    poison: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    snapshot_at: list[str] = dataclasses.field(default_factory=list)
    resume_from_cpu_checkpoint: bool = False
    audit: bool = False
    audit_updates: int = 0
    explain: bool = False
    inference_probe: bool = False

    def replace(self, **changes: Any) -> WorkerConfig:
        """This configuration with ``changes`` (unknown names raise ``TypeError``)."""
        return dataclasses.replace(self, **changes)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def read(cls, path: Path) -> WorkerConfig:
        return cls(**json.loads(Path(path).read_text()))
