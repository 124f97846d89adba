"""Training starts at once and compiles behind: eager iterations first, the compiled paths from a later boundary.

Before tick 0 the runners warm the learner up: every compiled and captured path runs once on a dry batch.
On a new machine that is most of the start (about 75 s of Inductor and Triton work on an H200 at the
report's setting, before the first iteration). With ``compile_behind`` the learner instead trains on its
eager objectives (``defer_compiled_paths``: the same math, no compile; on CUDA the whole-iteration graph
captures them, so the eager kernels replay as one graph), while a spawned helper process
builds the learner's twin from the same arguments on the same device, warms it up on dry batches laid out
exactly like the runner's (shapes, strides, storage offsets, dtypes) and writes the compile artifacts and
Inductor's on-disk caches. When the helper has exited, the runner, at the next iteration boundary, puts the
compiled paths back and runs its own warm-up: it now loads what the helper compiled, captures the graphs on
the live learner and restores every piece of its state, so training goes on from the same parameters,
optimizer moments, schedules, statistics and random streams. Dynamo and Inductor are not thread-safe and a
thread would compete with the loop for the GIL: hence a process.

Where the warm-up's compile artifacts are at hand (``make setup OFFLINE=`` puts the wheelhouse's there, and a
run saves its own), nothing compiles behind: the warm-up before tick 0 loads them and is all cache hits.

A helper that fails is reported in one line and the runner then warms up in-process at that boundary, as it
would have before tick 0. The helper ignores the stop signals (the runner stops it) and dies with the runner.

The runner's record (``run_summary.json``'s ``compile_behind``) says when and how the swap came, and what was
compiled graph by graph (``compile_record``): ``helper_frames`` in the helper (cold, where the caches were
empty), ``swap_frames`` at the swap, in the runner (warm: the helper's artifacts serve them).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from flashsac_runtime.learner.compile_record import frame_compiles, now_us

_SPAWN = multiprocessing.get_context("spawn")

#: The line that says a run did not compile behind because its warm-up's compile artifacts loaded.
ARTIFACTS_LOADED = "[compile behind] not needed: the warm-up's compile artifacts loaded"


@dataclass(frozen=True)
class TensorLayout:
    """Where a tensor lies in its storage: a helper rebuilds views with the same strides and offsets.

    Compiled graphs are specialised on their inputs' strides: a dry batch of contiguous tensors, where the
    runner's batch is a set of views into one packed buffer, would compile graphs the runner never uses.
    """

    storage: int  # index into the layout's storage sizes
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


def layout_of(tensors: dict[str, torch.Tensor]) -> tuple[list[int], dict[str, TensorLayout]]:
    """The storages (their sizes in bytes) and each tensor's place in one of them."""
    storages: dict[int, int] = {}
    sizes: list[int] = []
    layout: dict[str, TensorLayout] = {}
    for name, tensor in tensors.items():
        storage = tensor.untyped_storage()
        index = storages.setdefault(storage.data_ptr(), len(sizes))
        if index == len(sizes):
            sizes.append(storage.nbytes())
        layout[name] = TensorLayout(index, tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()),
                                    tensor.storage_offset())
    return sizes, layout


def zeros_like_layout(sizes: list[int], layout: dict[str, TensorLayout], device: torch.device) -> dict[str, torch.Tensor]:
    """Zero tensors laid out as ``layout_of`` recorded them, on fresh storages of the same sizes."""
    bases = [torch.zeros(size, dtype=torch.uint8, device=device) for size in sizes]
    out: dict[str, torch.Tensor] = {}
    for name, place in layout.items():
        view = torch.empty(0, dtype=place.dtype, device=device)
        view.set_(bases[place.storage].untyped_storage(), place.offset, place.size, place.stride)
        out[name] = view
    return out


@dataclass(frozen=True)
class HelperSpec:
    """Everything the helper needs to compile what the runner's warm-up will: picklable, no tensors."""

    learner_class: tuple[str, str]  # module, qualified name
    learner_kwargs: dict[str, Any]
    batch: tuple[list[int], dict[str, TensorLayout]]
    inference_obs: tuple[list[int], dict[str, TensorLayout]]
    warm_up: dict[str, int]  # num_envs, batch_size, updates_per_step, policy_frequency
    numerics: dict[str, Any] = field(default_factory=dict)  # matmul precision and TF32 flags
    frames_path: str | None = None  # where the helper writes what it compiled, graph by graph


#: The process-wide numerics switches Inductor's and AOTAutograd's cache keys include, in the order they are set:
#: the legacy TF32 switches, then (torch 2.9 on) the newer ``fp32_precision`` settings, which the keys hold.
_NUMERICS_SWITCHES: tuple[tuple[str, Any, str], ...] = (
    ("cuda_matmul_allow_tf32", torch.backends.cuda.matmul, "allow_tf32"),
    ("cudnn_allow_tf32", torch.backends.cudnn, "allow_tf32"),
    ("fp32_precision", torch.backends, "fp32_precision"),
    ("cuda_matmul_fp32_precision", torch.backends.cuda.matmul, "fp32_precision"),
    ("cudnn_fp32_precision", torch.backends.cudnn, "fp32_precision"),
)


def _numerics() -> dict[str, Any]:
    """The process-wide settings Inductor's cache keys include: the helper compiles under the same."""
    numerics: dict[str, Any] = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    for name, owner, attribute in _NUMERICS_SWITCHES:
        if hasattr(owner, attribute):
            numerics[name] = getattr(owner, attribute)
    return numerics


def _set_numerics(numerics: dict[str, Any]) -> None:
    """Take the runner's numerics, setting only what differs from this fresh process's own.

    Setting a value the process already has is not a no-op from torch 2.9 on: through the legacy switches it
    turns the newer ``fp32_precision`` from ``none`` into an explicit ``ieee``, and the cache keys hold that.
    A helper that set every switch compiled under other keys than the runner's, so the swap on an H200
    (torch 2.11) missed every entry the helper wrote and compiled again: a 21-29 s pause.
    """
    if torch.get_float32_matmul_precision() != numerics["float32_matmul_precision"]:
        torch.set_float32_matmul_precision(numerics["float32_matmul_precision"])
    for name, owner, attribute in _NUMERICS_SWITCHES:
        if name in numerics and hasattr(owner, attribute) and getattr(owner, attribute) != numerics[name]:
            setattr(owner, attribute, numerics[name])


class _Status:
    """The warm-up's status line, on the helper's stderr."""

    @staticmethod
    def log_status(message: str) -> None:
        print(f"[compile behind] helper: {message}", file=sys.stderr, flush=True)


def _helper_main(spec: HelperSpec) -> None:
    """The helper process: the learner's twin warmed up on the runner's layouts (compiles, writes caches)."""
    from uni_rl.offpolicy.double_buffer_runner import warm_up_learner
    from flashsac_runtime.preemption import install_collector_safeguards

    install_collector_safeguards()
    _set_numerics(spec.numerics)
    module, name = spec.learner_class
    cls = getattr(__import__(module, fromlist=[name]), name)
    learner = cls(**spec.learner_kwargs)
    device = torch.device(learner.device)
    batch = zeros_like_layout(*spec.batch, device)
    obs = zeros_like_layout(*spec.inference_obs, device)["obs"]
    warm_up_learner(learner, lambda: batch, obs, logger=_Status(), **spec.warm_up)
    if spec.frames_path:
        Path(spec.frames_path).write_text(json.dumps(frame_compiles()), encoding="utf-8")


class CompileBehind:
    """The runner's side: defer the learner's compiled paths, run the helper, swap at a boundary."""

    def __init__(self, learner: Any, spec: HelperSpec, warm_up: Callable[[], None]) -> None:
        self.learner = learner
        self._warm_up = warm_up
        self._frames_path = spec.frames_path
        self.started = time.monotonic()
        self.process = _SPAWN.Process(target=_helper_main, args=(spec,), name="flashsac-compile-behind",
                                      daemon=True)
        self.process.start()
        self.record: dict[str, Any] = {"helper_pid": self.process.pid}

    @classmethod
    def start(
        cls,
        learner: Any,
        dry_large_batch: Callable[[], dict[str, torch.Tensor]],
        inference_obs: torch.Tensor,
        *,
        warm_up: Callable[[], None],
        **warm_up_args: int,
    ) -> CompileBehind | None:
        """Defer the learner's compiled paths and start the helper; None when nothing would compile, or when the
        warm-up's compile artifacts (this GPU's and torch's, for these shapes) load: then every compile of the
        warm-up before tick 0 is a cache hit, about as long as a swap's own warm-up, and a helper would only
        delay the compiled learner: with a helper it served from 43.2 s after launch on an H200, from the first
        iteration without one, 14.7 s after launch on an H100 (UniLab's default G1 run with its artifacts)."""
        from uni_rl.algos.common.compile import load_compile_artifacts
        from uni_rl.offpolicy.double_buffer_runner import warm_up_cache_file

        kwargs = getattr(learner, "init_kwargs", None)
        defer = getattr(learner, "defer_compiled_paths", None)
        if kwargs is None or defer is None:
            return None
        artifacts = warm_up_cache_file(learner, obs_dim=inference_obs.shape[1], **warm_up_args)
        if load_compile_artifacts(artifacts):
            print(f"{ARTIFACTS_LOADED} ({artifacts}): the learner compiles before the first iteration, from "
                  "them, in this process", file=sys.stderr, flush=True)
            return None
        if not defer():
            return None
        handle, frames_path = tempfile.mkstemp(prefix="flashsac-compile-behind-", suffix=".json")
        os.close(handle)
        spec = HelperSpec(
            learner_class=(type(learner).__module__, type(learner).__qualname__),
            learner_kwargs=dict(kwargs),
            batch=layout_of(dry_large_batch()),
            inference_obs=layout_of({"obs": inference_obs}),
            warm_up=dict(warm_up_args),
            numerics=_numerics(),
            frames_path=frames_path,
        )
        return cls(learner, spec, warm_up)

    @property
    def swap_due(self) -> bool:
        """The helper is done and the swap not made yet: the next ``poll`` swaps."""
        return not self.process.is_alive() and "swap_iteration" not in self.record

    def poll(self, iteration: int) -> bool:
        """At an iteration boundary: swap to the compiled paths once the helper is done; whether it did now."""
        if not self.swap_due:
            return False
        self.process.join()
        helper_s = time.monotonic() - self.started
        code = self.process.exitcode
        if code != 0:
            print(f"[compile behind] the compile helper (pid {self.process.pid}) exited {code} after "
                  f"{helper_s:.1f} s: warming up in this process now", file=sys.stderr, flush=True)
        start, since = time.monotonic(), now_us()
        self.record["before_swap"] = getattr(self.learner, "deferred_path", None)
        self.learner.restore_compiled_paths()
        self._warm_up()
        self.record.update(helper_exit_code=code, helper_s=round(helper_s, 3), swap_iteration=int(iteration),
                           swap_pause_s=round(time.monotonic() - start, 3),
                           swap_after_start_s=round(time.monotonic() - self.started, 3),
                           helper_frames=self._helper_frames(), swap_frames=frame_compiles(since))
        return True

    def _helper_frames(self) -> list[dict[str, Any]] | None:
        """What the helper compiled, graph by graph (``compile_record``); None when it wrote nothing."""
        path, self._frames_path = self._frames_path, None
        if path is None:
            return None
        try:
            text = Path(path).read_text(encoding="utf-8")
            return json.loads(text) if text else None
        finally:
            Path(path).unlink(missing_ok=True)

    def close(self) -> None:
        """Stop a helper still compiling (the run ended or stopped before the swap)."""
        if self.process.is_alive():  # it ignores SIGTERM (the runner's stop is the runner's to handle)
            self.process.kill()
            self.process.join()
            self.record.setdefault("helper_exit_code", self.process.exitcode)
        self.record.setdefault("helper_frames", self._helper_frames())  # a helper done, no swap yet
