"""MuJoCo Warp's CUDA kernels for the task owners of ``TASKS`` (G1 Walk Flat, Go2 Joystick Flat and G1 motion
tracking on ``mjwarp``),
built by `make wheelhouse` (no GPU needed) and put into the GPU host's Warp kernel cache by `make setup OFFLINE=`.

Why: on a machine whose Warp kernel cache is empty (a freshly started cloud GPU, a new container) the mjwarp env
builds its physics' kernels before its first step. On freshly started H200s that took 31-33 s of a 40 s env
build, and a training run's first iteration came 49.5-72.3 s after launch even with the compile left behind;
with this cache seeded (cubin, unisim 0004) the env was built in 10-12 s and the first iteration came 20.3 s
(report's setting) and 22.2 s (UniLab's defaults) after launch (results/2026-12-04-h200-warp-kernel-cache).
Go2 Joystick Flat's run (1024 worlds, its default) had Warp compile 25 modules for Go2's model on a fresh H200,
its first iteration 50.3 s after launch (G1's: 14.2 s, results/2026-12-07-h200-whole-run-go2): each task's
model makes its own kernels, so each task owner is planned.

Build (``build``): a child Python per task in a copy of the applied UniLab tree (the asset archives unpacked into
it: G1's and Go2's meshes; motion tracking's synthetic clip where the tree has no clip), the overlay first on its
path, builds the task owner's ``mjwarp`` env on Warp's CPU device
(unisim 0002's opt-in) for each world count, up to the backend's build ahead (unisim 0004). There it records the
launches of a forward, a step and a reset as a CUDA device would make them (their block sizes), and of the forward
the backend runs in its bounded reset scratch, and for an owner whose device env recomputes ``set_const``'s rows in
its reset (Go2's) ``set_const``'s calls too; adds MuJoCo Warp's core modules and the backend's own, each module
also at its default block size, compiles every module ahead of time as cubin for each CUDA architecture into
Warp's cache layout (``<warp version>/wp_<module>_<hash>/``), and stops the env build: nothing is launched. The
record lists the tasks and their world counts, and for each module what it was planned for (``<task>:<worlds>``).
Warp names each module's folder by a hash of its kernels' source and build options, so a seeded module is used
only where the host would build exactly that module; any other is built there as before. Kernels MuJoCo Warp
creates for a model are keyed on array sizes: the world counts given (the report's 256 and UniLab's 4096 by
default) and each owner's own default ``algo.num_envs`` (read from its composed config: Go2's 1024) are the
ones covered.

The device env's own kernel, its step's timestamp (``step_stamps``), holds no world count: it is planned once, from
its module, without building the env.

Install (``seed``): each module folder the host's cache lacks is copied in; what the cache holds is never
overwritten, and a cache of another Warp version is left alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import OfflineError

#: The wheelhouse folder: Warp's kernel-cache layout under it (``<warp version>/wp_*``).
FOLDER = "warp-kernels"
#: The task owners whose kernels are built (FlashSAC's Hydra ``task=``; their scenes' meshes come from the asset
#: archives given to ``build``), each with whether its device env recomputes MuJoCo Warp's ``set_const`` rows in its
#: reset (Go2's randomizes mass and centre of mass): those kernels are planned too (``_record_set_const``).
TASKS: dict[str, bool] = {"g1_walk_flat/mjwarp": False, "go2_joystick_flat/mjwarp": True,
                           "g1_motion_tracking/mjwarp": False}
#: The task whose env loads a motion clip at its build: the tree's copy gets the synthetic one where it has none.
MOTION = "g1_motion_tracking/mjwarp"
#: The default world counts (the report's setting and UniLab's G1 default) and CUDA architecture (H100/H200);
#: each owner's own default world count is added to them.
WORLDS = (256, 4096)
ARCHS = (90,)


class _Recorded(Exception):
    """Raised by the child's stand-in build ahead once the modules are compiled: the env build stops there."""


def _child_env(tree: Path, overlay: Path, cache: Path) -> dict[str, str]:
    scripts = Path(__file__).resolve().parents[1]
    path = [str(scripts), str(overlay), str(tree / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "WARP_CACHE_PATH": str(cache),
            "UNISIM_MJWARP_ALLOW_CPU": "1", "CUDA_VISIBLE_DEVICES": "", "MUJOCO_GL": "disable",
            "HF_HUB_OFFLINE": "1"}


def build(dest: Path, tree: Path, overlay: Path, assets_archives: Sequence[Path], *,
          tasks: Sequence[str] = tuple(TASKS), worlds: Sequence[int] = WORLDS, archs: Sequence[int] = ARCHS,
          jobs: int | None = None, only: str | None = None) -> dict[str, Any]:
    """Compile the task owners' Warp modules into ``dest`` (Warp's cache layout); returns the child's record.

    ``tree`` is the applied UniLab tree and ``overlay`` its overlay (``make apply``); the tree is copied, with
    each of ``assets_archives`` unpacked into its assets (the tasks' meshes), so the checkout stays as the
    applier left it. Each task is planned at ``worlds`` and its own default world count; the record's ``tasks``
    says which counts. ``only``: compile only the modules whose name starts with it (the others are planned, not
    compiled; for tests).
    """
    unknown = [task for task in tasks if task not in TASKS]
    if unknown:
        raise OfflineError(f"no Warp kernels are planned for {', '.join(unknown)}: the task owners are "
                           f"{', '.join(TASKS)}")
    jobs = jobs or len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="warp-kernels-") as tmp:
        copy = Path(tmp) / "unilab"
        shutil.copytree(tree, copy, ignore=shutil.ignore_patterns(".git", "__pycache__"), symlinks=True)
        for assets_archive in assets_archives:
            with tarfile.open(assets_archive) as archive:
                archive.extractall(copy / "src" / "unilab" / "assets", filter="data")
        if MOTION in tasks:  # its env loads a clip at its build; the physics' kernels do not depend on it
            from .motion_clip import SCENE_REL, task_clip, write_clip

            write_clip(task_clip(copy), copy / SCENE_REL)
        records = []
        for task in tasks:  # one child each: see ``merged``
            args = [sys.executable, "-m", "offline.warp_kernels", "--tasks", task, "--worlds", *map(str, worlds),
                    "--archs", *map(str, archs), "--jobs", str(jobs), *(["--only", only] if only else [])]
            proc = subprocess.run(args, cwd=copy, env=_child_env(copy, overlay, dest), capture_output=True,
                                  text=True, check=False)
            lines = proc.stdout.strip().splitlines()
            if proc.returncode != 0 or not lines or not lines[-1].startswith("{"):
                last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise OfflineError(f"building MuJoCo Warp's kernels for {task} failed "
                                   f"(exit {proc.returncode}): {last}")
            records.append(json.loads(lines[-1]))
    record = merged(records)
    failed = [entry for entry in record["modules"] if entry.get("failed")]
    if failed:
        raise OfflineError(f"{len(failed)} Warp modules failed to compile, first {failed[0]['module']}: "
                           f"{failed[0]['failed']}")
    for leftover in dest.glob("*/lto"):  # Warp's compile-time cache of LTO objects: not needed to load
        shutil.rmtree(leftover)
    return record


def merged(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One record of the children's, one child per task: a module two tasks planned is one entry, planned for both.

    Why one child per task: MuJoCo Warp makes some kernels from its process's state, not from the model alone. Its
    primitive narrowphase is made from the collision types of every model the process has put on the device, so
    planned in one process after G1 Walk Flat's, Go2's narrowphase was made for both robots' types: a module no
    Go2 run builds, whose own (Go2's types only) the wheelhouse then lacked and a fresh H100 compiled before Go2's
    first iteration (results/2026-12-07-h100-fresh-numba-first-iteration).
    """
    modules: dict[tuple[str, int], dict[str, Any]] = {}
    for record in records:
        for entry in record["modules"]:
            key = (entry.get("id") or entry["module"], entry["block_dim"])
            if key in modules:
                modules[key]["planned_for"] = sorted({*modules[key]["planned_for"], *entry["planned_for"]})
            else:
                modules[key] = dict(entry)
    first = records[0]
    return {"warp_version": first["warp_version"], "tasks": [t for r in records for t in r["tasks"]],
            "archs": first["archs"], "output": first["output"], "modules": list(modules.values())}


#: A planned (module, block size) and the ``<task>:<worlds>`` labels it was planned for.
Planned = tuple[Any, int, list[str]]


def _record_plan(tasks: Sequence[str], worlds: Sequence[int]) -> tuple[list[Planned], list[dict[str, Any]]]:
    """Every (module, block size) the mjwarp backend would build ahead on CUDA, for each task at each world count
    given and at the task's own default ``algo.num_envs``, with what it was planned for; and per task its counts.

    The labels let a caller tell one count's plan from another's without planning twice."""
    from unilab.base.env_factory import make_registry_env
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override
    from flashsac_runtime.mjwarp import kernel_build
    from unisim.backend.mjwarp import backend

    as_cuda = type("CudaLaunches", (), {"is_cuda": True})()  # the launches record a CUDA device's block sizes
    plan: dict[int, tuple[Any, tuple[int, ...]]] = {}
    labels: dict[tuple[int, int], set[str]] = {}
    label, set_const = "", False

    def record(wp_: Any, device: Any, calls: Any) -> Any:
        with kernel_build._launches_recorded(wp_, as_cuda) as builds:  # noqa: SLF001 - the build ahead's recorder
            calls()
            _record_reset_scratch(calls)
            if set_const:
                _record_set_const(calls)
        launched = [(module, size) for module, sizes in builds.values() for size in sizes]
        every = [module for module, _ in builds.values()] + kernel_build.modules_to_build()
        for module, size in launched + [(module, module.options["block_dim"]) for module in every]:
            kernel_build._add(plan, module, size)  # noqa: SLF001
            labels.setdefault((id(module), size), set()).add(label)
        raise _Recorded

    counted: list[dict[str, Any]] = []
    built_ahead, backend.build_ahead = backend.build_ahead, record
    try:
        for task in tasks:
            own = int(_task_cfg(task).algo.num_envs)  # the owner's default, as its config composes it
            counts = sorted({*worlds, own})
            counted.append({"task": task, "worlds": counts, "default_worlds": own})
            for count in counts:
                cfg = _task_cfg(task, count)
                override = build_offpolicy_env_cfg_override("flashsac", cfg)
                label, set_const = f"{task}:{count}", TASKS[task]
                try:
                    make_registry_env(str(cfg.training.task_name), str(cfg.training.sim_backend), count,
                                      {**(override or {}), "seed": 0})
                except _Recorded:
                    continue
                raise OfflineError(f"{task}'s {count}-world env was built without reaching the backend's "
                                   f"build ahead")
    finally:
        backend.build_ahead = built_ahead
    planned = [(module, size, sorted(labels[(id(module), size)]))
               for module, sizes in plan.values() for size in sizes]
    return planned, counted


def _record_reset_scratch(calls: Any) -> None:
    """The forward the backend runs in its bounded reset scratch (``nworld`` its capacity, over a ``ScratchModel``
    of the reset rows' model rows), where it has one.

    Why: the backend makes and warms that scratch after its build ahead, so its recorded calls miss it, and the
    broadphase MuJoCo Warp makes for the scratch's world count is a module of its own: every task's first run on
    a fresh GPU compiled it (results/2026-12-07-h100-fresh-numba-first-iteration). ``calls`` is the backend's
    bound ``_record_physics_calls``.
    """
    from flashsac_runtime.mjwarp.row_commit import ScratchModel

    sim = calls.func.__self__  # the backend building the env
    capacity = sim._reset_scratch_capacity  # noqa: SLF001
    if capacity:
        mjw = sim._mujoco_warp  # noqa: SLF001
        scratch = mjw.make_data(sim._cpu_model, nworld=capacity, **calls.keywords)  # noqa: SLF001
        mjw.forward(ScratchModel(sim._device_model, sim._num_envs, capacity).model, scratch)  # noqa: SLF001


def _record_set_const(calls: Any) -> None:
    """MuJoCo Warp's ``set_const_fixed`` and ``set_const`` on a scratch Data of the training data's shapes.

    Why: a device env that randomizes mass or centre of mass (Go2's) recomputes their rows in its reset
    (``flashsac_runtime.mjwarp.mass_constants``, which launches a subset of ``set_const``'s kernels: the ``io``
    module's, ``factor_m``/``solve_m``'s tile Cholesky); they are launched after the backend's build ahead, so its
    recorded calls miss them. ``calls`` is the backend's bound ``_record_physics_calls``.
    """
    sim = calls.func.__self__  # the backend building the env
    mjw = sim._mujoco_warp  # noqa: SLF001
    scratch = mjw.make_data(sim._cpu_model, nworld=sim._num_envs, **calls.keywords)  # noqa: SLF001
    mjw.set_const_fixed(sim._device_model, scratch)  # noqa: SLF001
    mjw.set_const(sim._device_model, scratch)  # noqa: SLF001


def _task_cfg(task: str, count: int | None = None) -> Any:
    """``task``'s training config (FlashSAC's ``task=``) as the trainer composes it, at ``count`` worlds if given
    (else at its own default ``algo.num_envs``)."""
    from hydra import compose, initialize_config_dir

    overrides = [f"task={task}", *([f"algo.num_envs={count}"] if count is not None else [])]
    with initialize_config_dir(config_dir=str(Path("src/unilab/conf/flashsac").resolve()), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def _record_env_plan(labels: list[str]) -> list[Planned]:
    """The device env's own kernel (its step's timestamp, ``step_stamps``) at the block size a CUDA launch uses: it
    holds no world count, so one module serves every count (``labels``: all that were planned)."""
    from flashsac_runtime.envs.step_stamps import StepStamps

    modules = {kernel.module.name: kernel.module for kernel in StepStamps.kernels()}
    return [(module, module.options["block_dim"], labels) for module in modules.values()]


def _compile(plan: list[Planned], archs: Sequence[int], jobs: int, only: str | None) -> list[dict]:
    """Compile each planned module (cubin, per arch) into Warp's kernel cache; one record per module and size."""
    from concurrent.futures import ThreadPoolExecutor

    import warp as wp

    def one(item: Planned) -> dict[str, Any]:
        module, size, labels = item
        entry: dict[str, Any] = {"module": module.name, "block_dim": size, "planned_for": labels}
        try:
            module.get_module_hash(size)
            entry["id"] = module.get_module_identifier(size)
            if only is not None and not module.name.startswith(only):
                return entry
            options = module.resolve_options(wp.config, block_dim=size)
            for arch in archs:
                module._compile(None, output_arch=arch, use_ptx=False, options=options)  # noqa: SLF001 - Warp's AOT
            entry["files"] = [module._get_compile_output_name(None, arch, "", False, size) for arch in archs]  # noqa: SLF001
        except Exception as exc:  # noqa: BLE001 - reported per module, the build then fails as a whole
            entry["failed"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return entry

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, plan))


def _child(argv: list[str] | None = None) -> int:
    """The child: plan each task at each world count, compile, print one JSON line."""
    import argparse

    parser = argparse.ArgumentParser(prog="offline.warp_kernels")
    parser.add_argument("--tasks", nargs="+", required=True)
    parser.add_argument("--worlds", type=int, nargs="*", default=[])
    parser.add_argument("--archs", type=int, nargs="+", required=True)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--only", default=None)
    args = parser.parse_args(argv)
    import warp as wp

    wp.config.log_level = wp.LOG_WARNING
    plan, tasks = _record_plan(args.tasks, args.worlds)
    plan += _record_env_plan([f"{t['task']}:{count}" for t in tasks for count in t["worlds"]])
    modules = _compile(plan, args.archs, args.jobs, args.only)
    print(json.dumps({"warp_version": wp.config.version, "tasks": tasks, "archs": args.archs,
                      "output": "cubin", "modules": modules}))
    return 0


def cache_dir(python: str, env: dict[str, str] | None = None) -> tuple[str, Path]:
    """The Warp version and the kernel cache folder Warp will use under ``env`` (its own rule, asked of Warp)."""
    code = ("import warp, warp._src.build as b\nb.init_kernel_cache()\n"
            "print(warp.config.version)\nprint(warp.config.kernel_cache_dir)\n")
    proc = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or len(lines) < 2:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OfflineError(f"could not ask Warp for its kernel cache folder: {last}")
    return lines[-2], Path(lines[-1])


def seed(kernels: Path, version: str, cache: Path) -> tuple[int, int]:
    """Copy each module folder of ``kernels/<version>`` that ``cache`` lacks; returns (copied, already there).

    A module folder is copied whole into a temporary sibling and renamed into place, so a stopped copy leaves
    no half module for Warp to find.
    """
    source = kernels / version
    if not source.is_dir():
        return 0, 0
    cache.mkdir(parents=True, exist_ok=True)
    copied = present = 0
    for module in sorted(p for p in source.iterdir() if p.is_dir() and p.name.startswith("wp_")):
        target = cache / module.name
        if target.exists():
            present += 1
            continue
        staged = cache / f".{module.name}.seeding-{os.getpid()}"
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(module, staged)
        staged.rename(target)
        copied += 1
    return copied, present


if __name__ == "__main__":
    sys.exit(_child())
