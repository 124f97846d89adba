"""The trainer's start-up phases, timed from inside it without touching UniLab or uni_rl (installed by the bench hook).

Why: on a fresh machine the first iteration came about 105 s after launch, and which phase took the time (the
learner's construction, the replay transfer's set-up, the warm-up's compile and graph capture, the collector's
start) decides what to fix. Each phase is the first call of one function the runner already makes. A finder on
``sys.meta_path`` wraps that function the moment its module has executed (before anything can import it by name,
and without importing any module earlier than the trainer does), notes when its first call began and ended,
and puts the original back. A learner without the function (unilab-rl 1.3.2 has no warm-up) records no such
phase, and nothing the learner computes changes.

Warp's module loads are timed too, every one of them (``warp_load`` records: which module, whether a launch
loaded it or the mjwarp backend's build workers did, when, for how long): on a fresh machine Warp's kernel
build decides when the MJWarp env can take its first step.

Standard library only: imported before the trainer. Installed by ``flashsac_bench_hook.install``; its records
are read back by ``bench_records.read_phases`` and ``bench_records.read_warp_loads``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.abc
import os
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, NamedTuple


class Phase(NamedTuple):
    """A phase ends when the first call of ``module``'s ``attribute`` returns; ``detail`` names an attribute
    of the called object (``self``) to record with it."""

    name: str
    module: str
    attribute: str
    detail: str = ""


#: In the order a run passes through them: the device collector's env (MJWarp physics built, with its kernel
#: build's record; the device env built; its first reset, which captures the step), then the learner's phases
#: (a host-collector run builds its env in the collector's process and starts no device env). The device env's
#: phases are those of what every task's device env goes through (the factories' shared builder, the base class's
#: reset), so that a run of any task with a device env records them.
PHASES: tuple[Phase, ...] = (
    Phase("env_physics_built", "unisim.backend.mjwarp.backend", "MjwarpBackend.__init__", detail="kernel_build"),
    Phase("device_env_built", "flashsac_runtime.envs", "_make_device_env"),
    Phase("device_env_reset", "flashsac_runtime.envs.base", "DeviceEnvBase.reset"),
    Phase("learner_constructed", "uni_rl.algos.flash_sac.learner", "FlashSACLearner.__init__"),
    Phase("replay_pipeline_ready", "uni_rl.ipc.replay_pipelines.gpu_resident", "GPUResidentReplayPipeline.__init__",
          detail="transfer_manifest"),
    Phase("objectives_compiled", "uni_rl.algos.flash_sac.learner", "FlashSACLearner._whole_cycle_body"),
    Phase("graph_captured", "uni_rl.algos.flash_sac.learner", "FlashSACLearner._capture_whole_cycle_graph"),
    Phase("warm_up_done", "uni_rl.offpolicy.double_buffer_runner", "warm_up_learner"),
    Phase("collector_started", "uni_rl.ipc.async_runner", "AsyncRunner._start_collector"),
    Phase("collector_first_request", "uni_rl.offpolicy.double_buffer_runner",
          "DoubleBufferOffPolicyRunner._wait_for_inference_request"),
)

#: Where Warp (1.16) defines ``Module``, whose ``load`` builds or loads a kernel module.
WARP_CONTEXT = "warp._src.context"

Record = Callable[[dict[str, Any]], None]
Clock = Callable[[], float]
Wrap = Callable[[ModuleType], None]


def install(record: Record, clock: Clock, phases: Sequence[Phase] = PHASES) -> None:
    """Time the first call of every phase's function and every Warp module load: now if the module is loaded,
    else when it is imported."""
    pending: dict[str, list[Wrap]] = {}
    for phase in phases:
        pending.setdefault(phase.module, []).append(
            functools.partial(_wrap_module, phases=[phase], record=record, clock=clock))
    pending.setdefault(WARP_CONTEXT, []).append(functools.partial(_time_warp_loads, record=record, clock=clock))
    for name in [n for n in pending if n in sys.modules]:
        for wrap in pending.pop(name):
            wrap(sys.modules[name])
    if pending:
        sys.meta_path.insert(0, _AfterImport(pending))


def _time_warp_loads(context: ModuleType, record: Record, clock: Clock) -> None:
    """Every ``Module.load`` that loaded a new variant (built it, or read it from Warp's cache) is recorded."""
    owner = getattr(context, "Module", None)
    original = vars(owner).get("load") if owner is not None else None
    if not callable(original):
        return
    main = threading.main_thread()

    @functools.wraps(original)
    def load(self: Any, *args: Any, **kwargs: Any) -> Any:
        before = len(self.execs)
        start = clock()
        result = original(self, *args, **kwargs)
        if len(self.execs) > before:
            try:
                record({"kind": "warp_load", "module": self.name, "launch": threading.current_thread() is main,
                        "pid": os.getpid(), "start_s": start, "end_s": clock()})
            except Exception as exc:  # never break training for a measurement
                print(f"[flashsac_bench_hook] could not record a Warp load: {exc!r}", file=sys.stderr)
        return result

    owner.load = load


def _wrap_module(module: ModuleType, phases: list[Phase], record: Record, clock: Clock) -> None:
    for phase in phases:
        owner: Any = module
        *path, attribute = phase.attribute.split(".")
        for part in path:
            owner = getattr(owner, part, None)
        original = vars(owner).get(attribute) if owner is not None else None
        if callable(original):
            setattr(owner, attribute, _first_call_timer(owner, attribute, original, phase, record, clock))


def _first_call_timer(owner: Any, attribute: str, original: Callable[..., Any], phase: Phase,
                      record: Record, clock: Clock) -> Callable[..., Any]:
    """``original``, whose first call is timed; the owner gets the original back at that call."""
    timed = False

    @functools.wraps(original)
    def first_call(*args: Any, **kwargs: Any) -> Any:
        nonlocal timed
        if timed:  # a name bound before the original went back (``from module import name``)
            return original(*args, **kwargs)
        timed = True
        setattr(owner, attribute, original)
        start = clock()
        result = original(*args, **kwargs)
        entry: dict[str, Any] = {"kind": "phase", "name": phase.name, "pid": os.getpid(),
                                 "start_s": start, "end_s": clock()}
        if phase.detail and args:
            detail = getattr(args[0], phase.detail, None)
            is_record = dataclasses.is_dataclass(detail) and not isinstance(detail, type)
            entry["detail"] = dataclasses.asdict(detail) if is_record else detail
        try:
            record(entry)
        except Exception as exc:  # never break training for a measurement
            print(f"[flashsac_bench_hook] could not record phase {phase.name}: {exc!r}", file=sys.stderr)
        return result

    return first_call


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds a pending module through the other finders and wraps its functions right after it executes."""

    def __init__(self, pending: dict[str, list[Wrap]]) -> None:
        self._pending = pending

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        wraps = self._pending.pop(fullname, None)
        if wraps is None:
            return None
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if finder is not self and hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            for wrap in wraps:
                wrap(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
