"""The trainer's start-up phases, timed from inside it without touching UniLab or uni_rl (installed by the bench hook).

Why: on a fresh machine the first iteration came about 105 s after launch, and which phase took the time (the
learner's construction, the replay transfer's set-up, the warm-up's compile and graph capture, the collector's
start) decides what to fix. Each phase is the first call of one function the runner already makes. A finder on
``sys.meta_path`` wraps that function the moment its module has executed (before anything can import it by name,
and without importing any module earlier than the trainer does), notes when its first call began and ended,
and puts the original back. A learner without the function (unilab-rl 1.3.2 has no warm-up) records no such
phase, and nothing the learner computes changes.

Standard library only: imported before the trainer. Installed by ``flashsac_bench_hook.install``; its records
are read back by ``bench_records.read_phases``.
"""

from __future__ import annotations

import functools
import importlib.abc
import os
import sys
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


#: In the order a host-collector run passes through them (the device collector starts none).
PHASES: tuple[Phase, ...] = (
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

Record = Callable[[dict[str, Any]], None]
Clock = Callable[[], float]


def install(record: Record, clock: Clock, phases: Sequence[Phase] = PHASES) -> None:
    """Time the first call of every phase's function: now if its module is loaded, else when it is imported."""
    pending: dict[str, list[Phase]] = {}
    for phase in phases:
        pending.setdefault(phase.module, []).append(phase)
    for name in [n for n in pending if n in sys.modules]:
        _wrap_module(sys.modules[name], pending.pop(name), record, clock)
    if pending:
        sys.meta_path.insert(0, _AfterImport(pending, record, clock))


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
            entry["detail"] = getattr(args[0], phase.detail, None)
        try:
            record(entry)
        except Exception as exc:  # never break training for a measurement
            print(f"[flashsac_bench_hook] could not record phase {phase.name}: {exc!r}", file=sys.stderr)
        return result

    return first_call


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds a pending module through the other finders and wraps its phases right after it executes."""

    def __init__(self, pending: dict[str, list[Phase]], record: Record, clock: Clock) -> None:
        self._pending, self._record, self._clock = pending, record, clock

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        phases = self._pending.pop(fullname, None)
        if phases is None:
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
            _wrap_module(module, phases, self._record, self._clock)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
