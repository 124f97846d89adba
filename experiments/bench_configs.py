"""Benchmark configurations (which learner, which switches) and update schedules.

One table, used by the single-run script (``--config NAME``), the matrix driver and
the report, so that a configuration's name means the same Hydra overrides and the
same learner everywhere. Overrides use Hydra's ``++`` (add or override) because the
patched tree has ``compile_full_objectives`` and a pristine tree does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: Where a configuration's ``uni_rl`` comes from:
#: ``overlay``: the patched package of ``make apply`` (overlay/ first on PYTHONPATH);
#: ``baseline``: a folder holding the pristine ``uni_rl`` of the unilab-rl 1.3.2 wheel;
#: ``installed``: the environment's own unilab-rl (1.4.0), with no overlay on the path.
LearnerSource = Literal["overlay", "baseline", "installed"]
#: Which UniLab tree a configuration trains on: ``patched`` (the series applied: collector and config
#: patches) or ``pristine`` (the pinned UniLab 1.3.2 sdist, unchanged).
TreeKind = Literal["patched", "pristine"]

#: The patched config's switch for the whole-iteration graph. The configuration is
#: run only when the UniLab tree's flashsac config.yaml carries this key, i.e. once
#: the learner patch that implements it is in the series.
ITERATION_GRAPH_KEY = "algo.algo_params.use_whole_cycle_cuda_graph"
#: The patched config's switch for the collector's inference through a CUDA graph (patch 0009).
INFERENCE_GRAPH_KEY = "algo.algo_params.use_cuda_graph_inference"

#: The patched config's single-rank CPU split (unilab patch 0002): CPUs kept for the learner.
LEARNER_RESERVED_CPUS_KEY = "training.learner_reserved_cpus"

_P = "++algo.algo_params."
#: The whole-iteration graph and the graphed inference are the patched tree's defaults: the
#: other overlay configurations turn them off, so that each one differs from the next by its switch.
_NO_ITERATION_GRAPH = f"++{ITERATION_GRAPH_KEY}=false"
_NO_INFERENCE_GRAPH = f"++{INFERENCE_GRAPH_KEY}=false"


@dataclass(frozen=True)
class BenchConfig:
    """A named learner configuration; ``overrides`` are appended to the Hydra command."""

    name: str
    label: str
    source: LearnerSource
    overrides: tuple[str, ...]
    reference: Literal["baseline", "upstream", None] = None
    requires_key: str | None = None
    notes: str = field(default="", compare=False)

    @property
    def tree(self) -> TreeKind:
        """The references are what a user has without us: stock learner on the stock UniLab tree."""
        return "pristine" if self.reference else "patched"


CONFIGS: dict[str, BenchConfig] = {
    c.name: c
    for c in (
        BenchConfig(
            "eager",
            "deferred eager",
            "overlay",
            (f"{_P}use_compile=false", f"{_P}compile_full_objectives=false",
             f"{_P}use_cuda_graph_critic=false", f"{_P}use_cuda_graph_actor=false", _NO_ITERATION_GRAPH,
             _NO_INFERENCE_GRAPH),
        ),
        BenchConfig(
            "compile",
            "full-objective compile",
            "overlay",
            (f"{_P}use_compile=true", f"{_P}compile_full_objectives=true",
             f"{_P}use_cuda_graph_critic=false", f"{_P}use_cuda_graph_actor=false", _NO_ITERATION_GRAPH,
             _NO_INFERENCE_GRAPH),
        ),
        BenchConfig(
            "compile-graphs",
            "full compile + manual graphs",
            "overlay",
            (f"{_P}use_compile=true", f"{_P}compile_full_objectives=true",
             f"{_P}use_cuda_graph_critic=true", f"{_P}use_cuda_graph_actor=true", _NO_ITERATION_GRAPH,
             _NO_INFERENCE_GRAPH),
        ),
        BenchConfig(
            "iteration-graph",
            "whole-iteration graph",
            "overlay",
            (f"{_P}use_compile=true", f"{_P}compile_full_objectives=true",
             f"++{ITERATION_GRAPH_KEY}=true", _NO_INFERENCE_GRAPH),
            requires_key=ITERATION_GRAPH_KEY,
        ),
        BenchConfig(
            "iteration-graph-inference",
            "whole-iteration graph + graphed inference",
            "overlay",
            (f"{_P}use_compile=true", f"{_P}compile_full_objectives=true",
             f"++{ITERATION_GRAPH_KEY}=true", f"++{INFERENCE_GRAPH_KEY}=true"),
            requires_key=INFERENCE_GRAPH_KEY,
        ),
        BenchConfig(
            "baseline-1.3.2",
            "unpatched unilab-rl 1.3.2 (eager)",
            "baseline",
            (f"{_P}use_compile=false", f"{_P}use_cuda_graph_critic=false",
             f"{_P}use_cuda_graph_actor=false"),
            reference="baseline",
        ),
        BenchConfig(
            "upstream-1.4.0",
            "upstream unilab-rl 1.4.0 compile_full_objectives",
            "installed",
            (f"{_P}use_compile=true", f"{_P}compile_full_objectives=true"),
            reference="upstream",
        ),
        BenchConfig(
            "collector-pinned",
            "patched defaults + collector pinned (1 CPU kept for the learner)",
            "overlay",
            (f"{LEARNER_RESERVED_CPUS_KEY}=1",),
            requires_key=LEARNER_RESERVED_CPUS_KEY,
            notes="the collector's MuJoCo pool pinned to all usable CPUs but the first (unilab 0002)",
        ),
        BenchConfig(
            "patched-default",
            "patched defaults (tree config)",
            "overlay",
            (),
            notes="no switch overrides: what a user of the applied tree gets",
        ),
    )
}

#: The matrix of `make bench`, in the order runs alternate within a round.
MATRIX_CONFIGS: tuple[str, ...] = (
    "baseline-1.3.2", "eager", "compile", "compile-graphs", "iteration-graph", "iteration-graph-inference",
    "upstream-1.4.0",
)


@dataclass(frozen=True)
class Schedule:
    """Updates per iteration: ``updates_per_step`` critic updates, actor every ``policy_frequency``."""

    updates_per_step: int
    policy_frequency: int = 2

    @property
    def actor_updates(self) -> int:
        """The runner updates the actor when ``update_idx % policy_frequency == 0``."""
        return (self.updates_per_step - 1) // self.policy_frequency + 1

    @property
    def label(self) -> str:
        """critic / actor / temperature updates per iteration, as the original report writes it."""
        return f"{self.updates_per_step}/{self.actor_updates}/{self.actor_updates}"


#: The original report's two schedules: 2/1/1 and 8/4/4.
SCHEDULES: tuple[Schedule, ...] = (Schedule(2), Schedule(8))


def config_for_compile_flag(compile_flag: bool) -> BenchConfig:
    """The named configuration the original command line's ``--compile``/``--no-compile`` means.

    ``--compile`` is the report's full-objective compile (``compile``), ``--no-compile`` its
    eager learner (``eager``); the report predates the whole-iteration graph and the graphed
    inference, so both are off, exactly as in those named configurations.
    """
    return CONFIGS["compile" if compile_flag else "eager"]


def config_overrides_for_compile_flag(compile_flag: bool | None) -> tuple[str, ...]:
    """The Hydra overrides of ``--compile``/``--no-compile``: those of the named configuration.

    Without either flag the tree's defaults apply (on the patched tree: the graphs).
    """
    if compile_flag is None:
        return ()
    return config_for_compile_flag(compile_flag).overrides


@dataclass(frozen=True)
class Setting:
    """A named training setting: the Hydra values it sets and the schedules a matrix runs it at.

    ``schedules`` lists ``updates_per_step`` values; ``None`` means the tree's own value (no override).
    """

    name: str
    label: str
    values: tuple[tuple[str, int], ...]
    schedules: tuple[int | None, ...]

    def value(self, key: str) -> int | None:
        """The setting's value for an ``algo.<key>``, or None where the tree's config decides."""
        return dict(self.values).get(key)


#: The two settings every speed claim is measured at: the original report's, and UniLab's own G1 MuJoCo
#: task defaults (``conf/flashsac/task/g1_walk_flat/mujoco.yaml``: 4096 envs, batch 2048, 8/4/4,
#: replay_buffer_n 256), which take no overrides at all.
SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "report",
            "the original report's: 256 envs, batch 256, replay_buffer_n 32, learning_starts 8",
            (("num_envs", 256), ("batch_size", 256), ("replay_buffer_n", 32), ("learning_starts", 8),
             ("policy_frequency", 2)),
            tuple(s.updates_per_step for s in SCHEDULES),
        ),
        Setting("unilab-default", "UniLab's own G1 MuJoCo task defaults (no overrides)", (), (None,)),
    )
}
