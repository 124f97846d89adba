"""THE configuration table: a configuration's name → which learner, which switches; settings; schedules.

Every consumer derives from here, so that a name means the same learner and the same switches everywhere:
the Hydra overrides of the single-run script (``--config NAME``) and of ``make bench``, the learner keyword
arguments of the numerics and replay-stability studies (``learner_switches``), the device scripts
(``python3 experiments/bench/bench_configs.py list evidence``) and the tests. To add a configuration, add one
``BenchConfig`` to ``CONFIGS`` (and its name to ``MATRIX_CONFIGS`` if ``make bench`` should run it).
Who steps the env is not a configuration but a run dimension (``COLLECTORS``: the host collector or the
device-resident one, ``make bench COLLECTOR=host,device``), as the physics is (``SIM=``); ``refusal`` says
which configuration × physics × collector cannot run, for the matrix and the single-run script alike.

One name per feature: the learner switch ``use_whole_cycle_cuda_graph`` (uni_rl 0005, one CUDA graph replay
per runner iteration) is the *whole-cycle graph* in configuration names (``whole-cycle-graph``), labels,
study names (``whole_cycle_graph``) and the README. Runs committed before the rename name it
``iteration-graph``: ``canonical_name`` reads them (``LEGACY_NAMES``).

Overrides use Hydra's ``++`` (add or override) because the patched tree has ``compile_full_objectives``
and a pristine tree does not.
"""

from __future__ import annotations

import sys
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

#: Where the learner switches live in UniLab's flashsac config.
ALGO_PARAMS = "algo.algo_params"
#: The patched config's switch for the whole-cycle graph. A configuration that sets it is run only
#: when the UniLab tree's flashsac config.yaml carries this key (the learner patch is in the series).
WHOLE_CYCLE_GRAPH_KEY = f"{ALGO_PARAMS}.use_whole_cycle_cuda_graph"
#: The patched config's switch for the collector's inference through a CUDA graph (uni_rl 0006).
INFERENCE_GRAPH_KEY = f"{ALGO_PARAMS}.use_cuda_graph_inference"
#: The patched config's matrix products on zero-padded aligned widths (uni_rl 0017, unilab 0001).
ALIGNED_PRODUCTS_KEY = f"{ALGO_PARAMS}.aligned_products"
#: The patched config's Inductor combo kernels in the learner's compiled functions (uni_rl 0018, unilab 0001).
COMBO_KERNELS_KEY = f"{ALGO_PARAMS}.combo_kernels"
#: The patched config's choice of who steps the env (unilab 0005): ``host`` or ``device``.
COLLECTOR_KEY = "training.collector"
#: The patched config's start on the eager path while a helper process compiles (unilab 0007:
#: ``auto``, the default, is on with one rank on a CUDA device).
COMPILE_BEHIND_KEY = "training.compile_behind"
#: Configuration names of runs committed before the whole-cycle graph had one name.
LEGACY_NAMES: dict[str, str] = {
    "iteration-graph": "whole-cycle-graph",
    "iteration-graph-inference": "whole-cycle-graph-inference",
}

Switches = tuple[tuple[str, bool | int], ...]

#: The learning-rate schedule of UniLab 1.3.2's flashsac config.yaml (one schedule for actor, critic and
#: temperature; ``actor_lr``/``critic_lr`` are not read by the learner). tests/test_parity.py compares it
#: with the tree's config.
TREE_LEARNING_RATES: tuple[tuple[str, float], ...] = (
    ("learning_rate_init", 3.0e-4), ("learning_rate_peak", 3.0e-4), ("learning_rate_end", 1.5e-4),
)
#: The parity check's negative control (experiments/bench/bench_parity.py): the patched defaults with every learning
#: rate divided by 10, chosen before any run as a learner that should learn measurably worse in 3000 iterations.
NEGATIVE_CONTROL = "negative-control-lr10"


def _switches(compile_: bool, full: bool, manual: bool | None, whole: bool, inference: bool) -> Switches:
    """The learner switches of a patched configuration, in the order its overrides are written.

    The whole-cycle graph and the graphed inference are the patched tree's defaults: the other overlay
    configurations turn them off, so that each one differs from the next by its switch. ``manual`` None:
    the manual per-update graphs are left to the tree (off), as the whole-cycle configurations do.
    """
    out: list[tuple[str, bool]] = [("use_compile", compile_), ("compile_full_objectives", full)]
    if manual is not None:
        out += [("use_cuda_graph_critic", manual), ("use_cuda_graph_actor", manual)]
    return (*out, ("use_whole_cycle_cuda_graph", whole), ("use_cuda_graph_inference", inference))


@dataclass(frozen=True)
class BenchConfig:
    """A named learner configuration.

    ``switches`` are ``algo.algo_params`` learner switches (the keyword arguments of ``FlashSACLearner``
    of the same names); ``training`` are ``training.*`` values; ``hyperparameters`` are other
    ``algo.algo_params`` values (only the negative control sets any: it changes what is learned, every
    other configuration only how fast). ``overrides``, appended to the Hydra command, are derived from them.
    ``environment`` holds variables set for the trainer, for switches that are not in the Hydra config (the
    physics adapter's, read by unisim).
    """

    name: str
    label: str
    source: LearnerSource
    switches: Switches
    reference: Literal["baseline", "upstream", None] = None
    requires_key: str | None = None
    training: tuple[tuple[str, int | str], ...] = ()
    hyperparameters: tuple[tuple[str, float], ...] = ()
    environment: tuple[tuple[str, str], ...] = ()
    #: The physics it runs on (None: any); the others are refused in one line.
    sims: tuple[str, ...] | None = None
    notes: str = field(default="", compare=False)

    @property
    def tree(self) -> TreeKind:
        """The references are what a user has without us: stock learner on the stock UniLab tree."""
        return "pristine" if self.reference else "patched"

    @property
    def overrides(self) -> tuple[str, ...]:
        """The Hydra overrides that select this configuration on top of a tree's config.

        On the patched tree every configuration but the ones that set it compiles before tick 0
        (``training.compile_behind=false``): its per-iteration figures, the last 500 of 1000 iterations, are
        then always of its compiled paths, never of the eager start that the tree's default runs until the
        helper's compile is done (a few seconds to a minute: at a few milliseconds per iteration, the whole run).
        """
        algo = tuple(f"++{ALGO_PARAMS}.{key}={str(value).lower()}" for key, value in self.switches)
        values = tuple(f"{ALGO_PARAMS}.{key}={value:.6g}" for key, value in self.hyperparameters)
        training = dict(self.training)
        if self.tree == "patched":
            training.setdefault("compile_behind", "false")
        return algo + values + tuple(f"training.{key}={value}" for key, value in training.items())

    def learner_switches(self) -> dict[str, bool | int]:
        """The switches as ``FlashSACLearner`` keyword arguments (the studies build learners from them)."""
        return dict(self.switches)


CONFIGS: dict[str, BenchConfig] = {
    c.name: c
    for c in (
        BenchConfig("eager", "deferred eager", "overlay", _switches(False, False, False, False, False)),
        BenchConfig("loss-only-compile", "loss-only compile", "overlay", _switches(True, False, False, False, False),
                    notes="the original report's compile of the losses alone (not in the bench matrix)"),
        BenchConfig("compile", "full-objective compile", "overlay", _switches(True, True, False, False, False)),
        BenchConfig("compile-graphs", "full compile + manual graphs", "overlay",
                    _switches(True, True, True, False, False)),
        BenchConfig("whole-cycle-graph", "whole-cycle graph", "overlay", _switches(True, True, None, True, False),
                    requires_key=WHOLE_CYCLE_GRAPH_KEY),
        BenchConfig("whole-cycle-graph-inference", "whole-cycle graph + graphed inference", "overlay",
                    _switches(True, True, None, True, True), requires_key=INFERENCE_GRAPH_KEY),
        BenchConfig("baseline-1.3.2", "unpatched unilab-rl 1.3.2 (eager)", "baseline",
                    (("use_compile", False), ("use_cuda_graph_critic", False), ("use_cuda_graph_actor", False)),
                    reference="baseline"),
        BenchConfig("upstream-1.4.0", "upstream unilab-rl 1.4.0 compile_full_objectives", "installed",
                    (("use_compile", True), ("compile_full_objectives", True)), reference="upstream"),
        BenchConfig("compile-behind", "patched defaults, compiled behind", "overlay", (),
                    requires_key=COMPILE_BEHIND_KEY, training=(("compile_behind", "true"),),
                    notes="eager iterations while a helper process compiles, the compiled paths from a later "
                          "boundary (uni_rl 0014): the tree's default with one rank on a CUDA device; compare "
                          "launch to first iteration and to the end with patched-default"),
        BenchConfig("aligned-products", "patched defaults + the networks' matrix products on aligned widths",
                    "overlay", (("aligned_products", True),), requires_key=ALIGNED_PRODUCTS_KEY,
                    notes="the actor's and critics' products on operands padded with zeros to widths of a multiple "
                          "of 8 (uni_rl 0017: the same math, sums in another order), set explicitly: the tree's "
                          "default (unilab 0001), named for the numerics study's learner switch and the runs "
                          "made before it was the default"),
        BenchConfig("no-aligned-products", "patched defaults without the networks' matrix products on aligned widths",
                    "overlay", (("aligned_products", False),), requires_key=ALIGNED_PRODUCTS_KEY,
                    notes="the actor's and critics' products on their own widths (the learner without "
                          "them): compare with patched-default for what cuBLAS's aligned kernels gain"),
        BenchConfig("combo-kernels", "patched defaults + Inductor's combo kernels in the learner",
                    "overlay", (("combo_kernels", True),), requires_key=COMBO_KERNELS_KEY,
                    notes="every function the learner compiles with Inductor's combo kernels (uni_rl 0018: "
                          "independent kernels of a graph launched as one; a fused reduction may be tiled "
                          "otherwise), set explicitly: the tree's default (unilab 0001), named for the "
                          "numerics study's learner switch and the runs made before it was the default"),
        BenchConfig("no-combo-kernels", "patched defaults without Inductor's combo kernels in the learner",
                    "overlay", (("combo_kernels", False),), requires_key=COMBO_KERNELS_KEY,
                    notes="every function the learner compiles without Inductor's combo kernels (the learner "
                          "without them): compare with patched-default for what fewer, larger Triton "
                          "kernels gain"),
        BenchConfig("warp-lazy-build", "patched defaults + MuJoCo Warp's kernels built at their launch", "overlay",
                    (), environment=(("UNISIM_MJWARP_BUILD_WORKERS", "0"),), sims=("mjwarp",),
                    notes="Warp builds each module at its first launch, one after the other (unisim-core "
                          "1.7.8's): the arm beside warp-build-ahead, both with an empty Warp kernel cache"),
        BenchConfig("warp-build-ahead", "patched defaults + MuJoCo Warp's kernels built ahead", "overlay",
                    (), environment=(("UNISIM_MJWARP_BUILD_WORKERS", "auto"),), sims=("mjwarp",),
                    notes="the physics' modules (the core ones and the kernels created for the model, found by a "
                          "recorded forward, step and reset) built on one worker per usable CPU before the first "
                          "launch (unisim 0004, the default on CUDA): compare launch to first iteration with "
                          "warp-lazy-build"),
        BenchConfig("logging-off", "patched defaults, no TensorBoard (training.logger=no_print)", "overlay", (),
                    training=(("logger", "no_print"),),
                    notes="the loop without its TensorBoard scalars: compare with patched-default for what the "
                          "loggers' writing still costs per iteration"),
        BenchConfig("patched-default", "patched defaults, compiled before tick 0", "overlay", (),
                    notes="no switch overrides but the bench's own (training.compile_behind=false, as every "
                          "configuration but compile-behind): the tree's learner and collector, compiled before "
                          "tick 0"),
        BenchConfig(NEGATIVE_CONTROL, "negative control: patched defaults, learning rates ÷10", "overlay", (),
                    hyperparameters=tuple((key, value / 10) for key, value in TREE_LEARNING_RATES),
                    notes="a learner that must learn measurably worse: the parity check has to FAIL it"),
    )
}

#: The matrix of `make bench`, in the order runs alternate within a round.
MATRIX_CONFIGS: tuple[str, ...] = (
    "baseline-1.3.2", "eager", "compile", "compile-graphs", "whole-cycle-graph", "whole-cycle-graph-inference",
    "upstream-1.4.0",
)
#: The timing matrix of ``device_evidence.sh bench``: the references first, so that a run cut off by the
#: device call's time limit still leaves the rows every ratio needs.
EVIDENCE_CONFIGS: tuple[str, ...] = (
    "baseline-1.3.2", "upstream-1.4.0", "whole-cycle-graph", "whole-cycle-graph-inference", "compile",
    "compile-graphs", "eager",
)
#: The numerics study's configurations (validate_numerics.py --mode gpu): its name (a key of its JSON
#: report, kept for committed reports) → the configuration(s) whose switches its patched learner runs (several:
#: their switches together, a later one's on top).
NUMERICS_STUDY: dict[str, str | tuple[str, ...]] = {
    "eager": "eager",
    "loss_only_compile": "loss-only-compile",
    "full_objective_compile": "compile",
    "full_objective_compile_manual_graphs": "compile-graphs",
    "whole_cycle_graph": "whole-cycle-graph-inference",
    # The learner switches the tree's config sets, each on the default whole-iteration graph: aligned products
    # and combo kernels (the tree's defaults, unilab 0001); the learner's own defaults are off.
    "whole_cycle_graph_aligned_products": ("whole-cycle-graph-inference", "aligned-products"),
    "whole_cycle_graph_combo_kernels": ("whole-cycle-graph-inference", "combo-kernels"),
}
#: The replay-stability study's graph paths (validate_replay_stability.py --paths; keys of its report).
REPLAY_STUDY: dict[str, str] = {
    "inductor_cudagraphs": "compile",
    "manual_cudagraphs": "compile-graphs",
    "whole_cycle_graph": "whole-cycle-graph",
}


@dataclass(frozen=True)
class Collector:
    """Who steps the env in a run: a dimension of ``make bench`` (``COLLECTOR=``), like the physics (``SIM=``).

    A dimension rather than a configuration, so that any learner configuration can be timed with either
    collector and the report keys its rows on what each run recorded (``collector`` in the run JSON), never
    on a name. ``name`` is the value of ``training.collector`` (and of ``COLLECTOR=``/``--collector``);
    ``recorded`` is how the run's own records name it; ``sims`` the physics it can step (None: any).
    """

    name: str
    recorded: str
    label: str
    sims: tuple[str, ...] | None = None

    def overrides_on(self, tree: TreeKind) -> tuple[str, ...]:
        """The Hydra override on a tree: the patched tree's config has the switch and every run names its
        collector (the MuJoCo Warp owner defaults to the device one, unilab 0005); the pristine tree has no key
        and only the host collector."""
        return (f"{COLLECTOR_KEY}={self.name}",) if tree == "patched" else ()

    @property
    def requires_key(self) -> str | None:
        """A collector other than UniLab 1.3.2's own needs the switch in the tree's flashsac config (unilab 0005)."""
        return COLLECTOR_KEY if self.name != "host" else None


#: The collectors: the host path (a spawned process stepping UniLab's NumPy env; the host runners name no
#: collector in their records) and the device-resident one (uni_rl 0010): the learner's process steps
#: the task's device env, which UniLab has for G1 Walk Flat on MuJoCo Warp only (flashsac_runtime.envs,
#: ``DEVICE_ENV_FACTORIES``).
COLLECTORS: dict[str, Collector] = {
    c.name: c
    for c in (
        Collector("host", "host", "host collector"),
        Collector("device", "device-resident", "device-resident collector", sims=("mjwarp",)),
    )
}
#: The run records' names of the collectors -> the table's entry.
RECORDED_COLLECTORS: dict[str, Collector] = {c.recorded: c for c in COLLECTORS.values()}


@dataclass(frozen=True)
class BenchTask:
    """A FlashSAC task of UniLab 1.3.2 the bench trains (``make bench TASK=``): ``task=<name>/<sim>``.

    ``sims``: the owners (``conf/flashsac/task/<name>/<sim>.yaml``) of the physics the bench runs; ``scene``: the
    MuJoCo scene the task loads, relative to the tree's root (its meshes are checked before any run, its single-core
    step cost is the CPU physics floor); ``device_env``: whether the patched tree has a device env for it (the
    device-resident collector, on the physics that collector runs: ``COLLECTORS``); ``motion_clip``: the clip the task tracks, relative to ``src/unilab/assets``.
    """

    name: str
    label: str
    robot: str
    sims: tuple[str, ...]
    scene: str
    device_env: bool = False
    motion_clip: str | None = None

    @property
    def study(self) -> str:
        """The default <study> of its ``make bench`` results folder (``study_of("bench")``)."""
        return self.study_of("bench")

    def study_of(self, kind: str) -> str:
        """The default <study> of its results folder for a study ``kind`` (``bench``, ``parity``): the kind itself for
        G1 Walk Flat, ``<kind>-<task>`` otherwise, so that runs of two tasks never share a folder (and never pool in
        one table)."""
        return kind if self.name == DEFAULT_TASK else f"{kind}-{self.name.replace('_', '-')}"


DEFAULT_TASK = "g1_walk_flat"
G1_SCENE = "src/unilab/assets/robots/g1/scene_flat.xml"
#: UniLab 1.3.2's FlashSAC tasks on the physics the bench runs (CPU MuJoCo, MuJoCo Warp).
TASKS: dict[str, BenchTask] = {
    t.name: t
    for t in (
        BenchTask("g1_walk_flat", "G1 Walk Flat", "G1", ("mujoco", "mjwarp"), G1_SCENE, device_env=True),
        BenchTask("g1_motion_tracking", "G1 motion tracking", "G1", ("mujoco", "mjwarp"), G1_SCENE, device_env=True,
                  motion_clip="motions/g1/dance1_subject2_part.npz"),
        BenchTask("go2_joystick_flat", "Go2 joystick flat", "Go2", ("mujoco", "mjwarp"),
                  "src/unilab/assets/robots/go2/scene_flat.xml", device_env=True),
    )
}


def task_refusal(task: str, sim: str | None = None, collector: str = "host") -> str | None:
    """Why the bench cannot train ``task`` on this physics with this collector (one line), or None."""
    entry = TASKS.get(task)
    if entry is None:
        return f"unknown task {task!r}; known: {', '.join(TASKS)}"
    if sim is not None and sim not in entry.sims:
        return (f"task {task} has no {sim} owner in UniLab 1.3.2: it runs on {' or '.join(entry.sims)} "
                f"(SIM={entry.sims[0]})")
    if collector != "host" and not entry.device_env:
        return (f"task {task} has no device env ({COLLECTOR_KEY}={collector}): it trains with the host collector "
                f"(COLLECTOR=host)")
    return None


def refusal(config: str, sim: str, collector: str = "host", task: str = DEFAULT_TASK) -> str | None:
    """Why a configuration cannot run on this physics with this collector for this task (one line), or None.

    The references are what users have without us: the stock learner on the stock tree, stepping CPU MuJoCo
    with UniLab 1.3.2's only collector, the host one. An unknown configuration name is its caller's to refuse.
    """
    reason = task_refusal(task, sim, collector)
    if reason is not None:
        return reason
    chosen, entry = COLLECTORS[collector], CONFIGS.get(config)
    reference = entry is not None and entry.reference is not None
    if reference and sim != "mujoco":
        return f"{config} is a reference: it runs on CPU MuJoCo only (SIM=mujoco)"
    if reference and chosen.name != "host":
        return f"{config} is a reference: the pristine tree has only the host collector (COLLECTOR=host)"
    if entry is not None and entry.sims is not None and sim not in entry.sims:
        return f"{config} changes how MuJoCo Warp starts: it runs on {' or '.join(entry.sims)} only (SIM={entry.sims[0]})"
    if chosen.sims is not None and sim not in chosen.sims:
        return (f"the {chosen.label} ({COLLECTOR_KEY}={chosen.name}) runs on {', '.join(chosen.sims)} only: "
                f"{TASKS[task].label}'s device env steps {' or '.join(chosen.sims)} (SIM={chosen.sims[0]}), "
                f"not on {sim}")
    return None


def canonical_name(name: str) -> str:
    """A configuration name as the table spells it (committed runs may carry a legacy name)."""
    return LEGACY_NAMES.get(name, name)


def study_switches(study: dict[str, str] | dict[str, str | tuple[str, ...]]) -> dict[str, dict[str, bool | int]]:
    """A study's learner switches per study name, from the table (``NUMERICS_STUDY``, ``REPLAY_STUDY``); a name
    with several configurations takes their switches together."""
    return {name: {key: value for config in ((configs,) if isinstance(configs, str) else configs)
                   for key, value in CONFIGS[config].learner_switches().items()}
            for name, configs in study.items()}


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
    eager learner (``eager``); the report predates the whole-cycle graph and the graphed
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

#: The lists the device scripts read (``bench_configs.py list NAME``), comma-separated.
LISTS: dict[str, tuple[str, ...]] = {
    "matrix": MATRIX_CONFIGS,
    "evidence": EVIDENCE_CONFIGS,
    "replay-paths": tuple(REPLAY_STUDY),
    "collectors": tuple(COLLECTORS),
}


def main(argv: list[str]) -> int:
    """``bench_configs.py list matrix|evidence|replay-paths|collectors``: one of the table's lists, for scripts."""
    if len(argv) != 2 or argv[0] != "list" or argv[1] not in LISTS:
        print(f"usage: bench_configs.py list {'|'.join(LISTS)}", file=sys.stderr)
        return 2
    print(",".join(LISTS[argv[1]]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
