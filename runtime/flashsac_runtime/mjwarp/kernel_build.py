"""MuJoCo Warp's kernel modules built in parallel before the mjwarp backend launches them (FlashSAC overlay).

Why: Warp builds a kernel module the first time one of its kernels launches, on the launching thread, one
module after the other. With an empty Warp kernel cache (a freshly started cloud machine, a new container)
that serial build was most of the minute an ``mjwarp`` run waited before its first step: on a lent H200,
33-40 s of G1 Walk Flat's 59-90 s env build went to the physics' core modules, and 16-41 s more to the
kernels MuJoCo Warp creates for the model at their first call (results/2026-12-03-h200-kernel-build).

What is built (``build_ahead``, called by the backend once its model and data are final and before its first
forward, with nothing else touching Warp meanwhile, so no launch races a build of its module), on worker
threads, in one pool:

- the modules of every kernel a forward, a step and a reset of the model launch. The kernels MuJoCo Warp
  creates for a model (its ``cache_kernel`` factories) do not exist before their first call, so the backend
  makes these calls on a scratch ``Data`` of the training data's shapes with Warp's launches recorded, not
  run (``_launches_recorded``), and each recorded module is built at the block sizes its launches asked for.
  The factories key their kernels on the model and on the sizes of the arrays they are given, so the training
  data's launches find the same kernels. The scratch data is dropped afterwards and the training data is
  never touched: every world's first step is what it was;
- the modules of ``CORE_MODULES`` and this backend's own (``OWN_PACKAGES``): what the env launches outside
  those three calls (the device env's kinematics and sensors at a reset; the backend's row commits).

Not every Warp module: building all of mujoco_warp's took 91-104 s with 16 workers on that H200, because the
modules of features G1 does not use (flex and SDF collisions, rays, rendering, islands, sleeping) build slowly
(``collision_flex`` alone 91-104 s). Same kernels, same physics either way: a built module is the module its
launch would have built (same source, same options, the launch's block size; on Warp's CPU device one
thread per block, as a CPU launch uses).

``UNISIM_MJWARP_BUILD_WORKERS``: unset or ``auto`` builds with one worker per usable CPU on CUDA (on Warp's CPU
device, tests only with ``UNISIM_MJWARP_ALLOW_CPU=1``, unset builds at launch); a positive number builds with
that many workers; ``0`` builds at launch, unisim-core 1.7.8's behaviour. On Warp's CPU device one worker
builds, whatever the number: its loader is not safe for concurrent loads (a test run found a loaded module
without the kernel its launch looked up).
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

#: Workers that build MuJoCo Warp's kernel modules as an env starts: unset or ``auto``, one per usable CPU on CUDA;
#: a positive number, that many; ``0``, each module built at its first launch (unisim-core 1.7.8's behaviour).
BUILD_WORKERS_ENV = "UNISIM_MJWARP_BUILD_WORKERS"
#: The form Warp builds this backend's CUDA modules in. Why cubin: Warp's own choice, where the driver is at
#: least as new as its CUDA toolkit, is PTX, which the driver compiles to the GPU's code again at every module load
#: of a process whose driver cache lacks it; on a freshly started H200 those loads took turns, about 25 s with every
#: G1 module already in Warp's kernel cache (results/2026-12-04-h200-warp-kernel-cache). A cubin is the GPU's code
#: itself, built by Warp's compiler from the same source with the same options, and loads at once; the physics of
#: the two forms was compared bitwise on a GPU in that study.
CUDA_OUTPUT = "cubin"
#: MuJoCo Warp's modules that its forward and step launch for every model.
CORE_MODULES = tuple(f"mujoco_warp._src.{name}" for name in (
    "smooth", "sensor", "passive", "solver", "forward", "derivative", "support", "constraint"))
#: The packages whose every Warp module is built too: this backend's own kernels (unisim's, and the row-wise
#: reset's of this package).
OWN_PACKAGES = ("unisim", "flashsac_runtime.mjwarp")
#: A Warp module and the block sizes it is built for.
Build = tuple[Any, tuple[int, ...]]


@dataclass(frozen=True)
class KernelBuild:
    """What the build ahead did: ``modules`` built in ``seconds`` (wall, the recording pass included) on
    ``workers`` threads (``workers`` 0: nothing, modules build at their launch); ``failed`` names the modules
    whose build raised (each then builds again, and fails clearly, at its launch)."""

    workers: int
    modules: int
    seconds: float
    failed: tuple[str, ...] = ()
    cuda_output: str | None = None  # the form CUDA modules were built in (None: a CPU device)


def build_workers(is_cuda: bool, environ: Mapping[str, str] = os.environ) -> int:
    """The number of build workers the switch asks for on a CUDA (``is_cuda``) or CPU device (0: at launch;
    at most 1 on the CPU device); a malformed switch is one clear error."""
    raw = environ.get(BUILD_WORKERS_ENV, "").strip()
    if raw == "auto" or (not raw and is_cuda):
        workers = len(os.sched_getaffinity(0))
    else:
        try:
            workers = int(raw or "0")
        except ValueError:
            workers = -1
        if workers < 0:
            raise ValueError(f"{BUILD_WORKERS_ENV} must be auto or a number of workers >= 0, got {raw!r}")
    return workers if is_cuda else min(workers, 1)


def modules_to_build() -> list[Any]:
    """The Warp modules built whatever the calls launch: ``CORE_MODULES`` and those of ``OWN_PACKAGES``."""
    from warp._src.context import user_modules

    return [module for name, module in list(user_modules.items())
            if name in CORE_MODULES or any(name == p or name.startswith(f"{p}.") for p in OWN_PACKAGES)]


def _build(device: Any, builds: list[Build], workers: int) -> tuple[str, ...]:
    """Load every module of ``builds`` at its block sizes on ``workers`` threads, one module per task (no module
    is loaded by two threads at once): the builds that failed, each warned of."""
    def build(item: Build) -> str | None:
        module, block_dims = item
        try:
            for block_dim in block_dims:
                module.load(device, block_dim=block_dim)
        except Exception as exc:  # noqa: BLE001 - reported; the module's launch raises it again
            return f"{module.name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(builds))), thread_name_prefix="mjwarp-build") as pool:
        failed = tuple(message for message in pool.map(build, builds) if message)
    for message in failed:
        warnings.warn(f"mjwarp: building Warp module {message}", RuntimeWarning, stacklevel=3)
    return failed


@contextlib.contextmanager
def _launches_recorded(wp: Any, device: Any) -> Iterator[dict[int, Build]]:
    """While open, Warp's launches record their kernel's module and block size instead of running, and the
    bodies of conditional launches (``capture_while``, ``capture_if``) run once each: every kernel the calls
    would launch is created and recorded, and no kernel runs.

    What still runs is what is not a launch: Warp's copies and fills and its native scans and sorts, on the
    arrays the calls were given (the scratch data). A generic kernel records the overload its launch would
    add, as Warp's ``launch`` does.
    """
    recorded: dict[int, Build] = {}
    saved = wp.launch, wp.launch_tiled, wp.capture_while, wp.capture_if

    def launch(kernel: Any, dim: Any = None, inputs: Sequence[Any] = (), outputs: Sequence[Any] = (),
               *args: Any, block_dim: int = 256, **kwargs: Any) -> None:
        if kernel.is_generic:
            kernel = kernel.add_overload(kernel.infer_argument_types([*inputs, *outputs]))
        _add(recorded, kernel.module, block_dim if device.is_cuda else 1)

    def launch_tiled(kernel: Any, *args: Any, block_dim: int, **kwargs: Any) -> None:
        launch(kernel, *args, block_dim=block_dim, **kwargs)

    def capture_while(condition: Any, while_body: Callable[..., None], stream: Any = None, **kwargs: Any) -> None:
        while_body(**kwargs)

    def capture_if(condition: Any, on_true: Callable[..., None] | None = None,
                   on_false: Callable[..., None] | None = None, stream: Any = None, **kwargs: Any) -> None:
        for body in (on_true, on_false):
            if body is not None:
                body(**kwargs)

    wp.launch, wp.launch_tiled, wp.capture_while, wp.capture_if = launch, launch_tiled, capture_while, capture_if
    try:
        yield recorded
    finally:
        wp.launch, wp.launch_tiled, wp.capture_while, wp.capture_if = saved


def _add(builds: dict[int, Build], module: Any, block_dim: int) -> None:
    """``module`` at ``block_dim`` added to ``builds`` (one entry per module)."""
    _, sizes = builds.get(id(module), (module, ()))
    builds[id(module)] = (module, sizes if block_dim in sizes else (*sizes, block_dim))


def build_ahead(wp: Any, device: Any, calls: Callable[[], None]) -> KernelBuild:
    """Build, with ``build_workers`` threads, the modules of every kernel ``calls`` would launch and those of
    ``modules_to_build``, and say what was done.

    ``calls`` runs once with Warp's launches recorded, not run (``_launches_recorded``); it must touch only
    arrays made for it (the backend passes a scratch ``Data``).
    """
    output = CUDA_OUTPUT if device.is_cuda else None
    if device.is_cuda:
        wp.config.cuda_output = output  # before the first module of the physics is built or loaded
    workers = build_workers(bool(device.is_cuda))
    if workers == 0:
        return KernelBuild(0, 0, 0.0, cuda_output=output)
    start = time.perf_counter()
    with _launches_recorded(wp, device) as builds:
        calls()
    for module in modules_to_build():
        _add(builds, module, module.options["block_dim"] if device.is_cuda else 1)
    failed = _build(device, list(builds.values()), workers)
    return KernelBuild(workers, len(builds), time.perf_counter() - start, failed, cuda_output=output)
