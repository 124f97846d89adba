"""The device env as the device env's checks and benches build it, and what their JSONs record.

Every check, bench and probe of the device env builds it here, from the UniLab tree's task config (G1 Walk Flat's
``g1_walk_flat/mjwarp`` unless ``task`` names another of ``TASKS``) composed through Hydra (run from the tree root),
through the collector's own env factory: so the env they check is the env training steps. ``machine``, ``versions`` and ``series_sha256`` are what each of their JSONs records.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

TASK = "g1_walk_flat/mjwarp"
#: The device env of each task the collector runs on the device: its Hydra task and its factory in
#: ``flashsac_runtime.envs``.
TASKS = {"g1_walk_flat": ("g1_walk_flat/mjwarp", "make_g1_walk_device_env"),
         "go2_joystick_flat": ("go2_joystick_flat/mjwarp", "make_go2_joystick_device_env"),
         "g1_motion_tracking": ("g1_motion_tracking/mjwarp", "make_g1_motion_tracking_device_env")}


def compose_cfg(num_envs: int, seed: int, overrides: tuple[str, ...], task: str = "g1_walk_flat") -> Any:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path("src/unilab/conf/flashsac").resolve()), version_base="1.3"):
        return compose(config_name="config", overrides=[f"task={TASKS[task][0]}", f"algo.num_envs={num_envs}",
                                                        f"algo.seed={seed}", *overrides])


def make_device_env(num_envs: int, seed: int, overrides: tuple[str, ...], numpy_draws: bool,
                    graph: bool = True, sensors_every_substep: bool = False, acceleration_sensors: bool = False,
                    draws_ahead: bool = False, reset_only_when_done: bool = False,
                    task: str = "g1_walk_flat") -> Any:
    import flashsac_runtime.envs as envs
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    override = build_offpolicy_env_cfg_override("flashsac", compose_cfg(num_envs, seed, overrides, task))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # Only G1 Walk Flat's factory chooses its acceleration stage; the other tasks' factories fix theirs.
    extra = {"acceleration_sensors": acceleration_sensors} if task == "g1_walk_flat" else {}
    return getattr(envs, TASKS[task][1])(num_envs, device, seed, env_cfg_override=override, numpy_draws=numpy_draws,
                                         graph=graph, sensors_every_substep=sensors_every_substep,
                                         draws_ahead=draws_ahead, reset_only_when_done=reset_only_when_done,
                                         **extra)


def machine() -> dict[str, Any]:
    """The machine a check, count or bench ran on (its JSON records it under ``machine``): the GPU and its SM count
    (None without CUDA), the CPU cores, the host."""
    cuda = torch.cuda.is_available()
    return {"gpu": torch.cuda.get_device_name(0) if cuda else None,
            "sm_count": torch.cuda.get_device_properties(0).multi_processor_count if cuda else None,
            "cpu_count": os.cpu_count(), "host": platform.node()}


def versions() -> dict[str, str]:
    """The versions a check, count or bench ran with (its JSON records them under ``versions``)."""
    from importlib.metadata import version

    out = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("unilab", "unisim-core", "mujoco", "mujoco-warp", "warp-lang", "numpy"):
        try:
            out[name] = version(name)
        except Exception:  # noqa: BLE001 - a version that cannot be read is recorded as such
            out[name] = "unknown"
    return out


def series_sha256() -> str | None:
    """The applied series' sha256, from the overlay's manifest (``make apply`` writes it), if there is one."""
    import uni_rl

    manifest = Path(uni_rl.__file__).resolve().parents[1] / "MANIFEST.json"
    return json.loads(manifest.read_text(encoding="utf-8")).get("series_sha256") if manifest.is_file() else None


def seeded_actions(dev: Any, steps: int) -> torch.Tensor:
    """``steps`` actions for ``dev``, uniform in [-1, 1), from a fixed seed: every check steps with the same ones."""
    actions = torch.rand((steps, dev.num_envs, dev.action_dim), generator=torch.Generator().manual_seed(3))
    return (actions * 2 - 1).to(dev.device)


def step_under(dev: Any, mode: Any, steps: int, after_warm_up: Callable[[], None] | None = None) -> None:
    """Reset, one warm-up step (as before the step's CUDA graph is recorded), ``after_warm_up`` if given, then
    ``steps`` seeded steps in ``mode``."""
    dev.reset()
    actions = seeded_actions(dev, steps + 1)
    dev.step(actions[0])
    if after_warm_up is not None:
        after_warm_up()
    with mode:
        for t in range(1, steps + 1):
            dev.step(actions[t])
