"""Every FlashSAC task owner of UniLab 1.3.2 composes through the patched tree and gets what the README says.

The README's supported-tasks table claims, per task owner (`conf/flashsac/task/<task>/<owner>.yaml`): the learner's
switches with the series' defaults, the host collector (the device-resident one for G1 Walk Flat on MuJoCo Warp),
and a one-line refusal of `training.collector=device` where the task has no device env. Each owner's Hydra config
is composed from the applied tree and read by the trainer's own resolver. Negative control: the pristine tree's
config, composed the same way, lacks the switches, so the check can fail.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forked_runs import ForkServer

#: The learner's switches the series adds, with their defaults (docs/configuration.md).
LEARNER_DEFAULTS = {"compile_full_objectives": True, "finite_guard": True, "deferred_metrics": True,
                    "use_whole_cycle_cuda_graph": True, "use_cuda_graph_inference": True,
                    "aligned_products": True, "combo_kernels": True}
#: Owners whose default collector is the device-resident one, with the device env they train on.
DEVICE_OWNERS = {"g1_walk_flat/mjwarp": "flashsac_runtime.envs:make_g1_walk_device_env",
                 "go2_joystick_flat/mjwarp": "flashsac_runtime.envs:make_go2_joystick_device_env"}
#: Owners whose device env runs when training.collector=device asks for it (the host collector is their default).
DEVICE_ENV_ON_REQUEST = {"g1_motion_tracking/mjwarp": "flashsac_runtime.envs:make_g1_motion_tracking_device_env"}

READ = """
import json, sys
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
    cfg = compose("config", overrides=sys.argv[2:])
params = OmegaConf.to_container(cfg.algo.algo_params)
out = {"task": str(cfg.training.task_name), "backend": str(cfg.training.sim_backend), "params": params,
       "collector": OmegaConf.select(cfg, "training.collector", default=None)}
try:
    from unilab.scripts.train_offpolicy import resolve_device_env_factory
except ImportError:  # UniLab 1.3.2's own trainer has no device collector
    resolve_device_env_factory = None
if resolve_device_env_factory is not None:
    device = OmegaConf.merge(cfg, {"training": {"collector": "device"}})
    try:
        factory = resolve_device_env_factory("flashsac", device)
        out["device"] = f"{factory.__module__}:{factory.__name__}"
    except ValueError as exc:
        out["device"] = f"refused: {exc}"
print(json.dumps(out))
"""


def owners(root: Path) -> list[str]:
    return sorted(f"{p.parent.name}/{p.stem}" for p in (root / "src/unilab/conf/flashsac/task").glob("*/*.yaml")
                  if p.stem != "base")


def _reader(root: Path, overlay: Path | None) -> tuple[ForkServer, Callable[[str], dict]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["PYTHONPATH"] = os.pathsep.join(map(str, (*((overlay,) if overlay else ()), root / "src")))
    server = ForkServer(("hydra", "omegaconf"), env=env, cwd=root, flags=("-W", "ignore"))

    def read(owner: str) -> dict:
        returncode, out, err = server.run(str(root / "src/unilab/conf/flashsac"), f"task={owner}", code=READ,
                                          timeout=300)
        assert returncode == 0, err[-3000:]
        return json.loads(out.strip().splitlines()[-1])

    return server, read


@pytest.fixture(scope="module")
def patched(applied_session: tuple[Path, Path]) -> Iterator[tuple[list[str], Callable[[str], dict]]]:
    checkout, overlay = applied_session
    server, read = _reader(checkout, overlay)
    yield owners(checkout), read
    server.close()


def test_every_flashsac_task_of_the_tree_is_listed(patched: tuple[list[str], Callable[[str], dict]]) -> None:
    found, _ = patched
    assert found == ["g1_motion_tracking/genesis", "g1_motion_tracking/mjwarp", "g1_motion_tracking/motrix",
                     "g1_motion_tracking/mujoco", "g1_motion_tracking/newton", "g1_walk_flat/mjwarp",
                     "g1_walk_flat/motrix", "g1_walk_flat/mujoco", "go2_joystick_flat/mjwarp",
                     "go2_joystick_flat/mujoco"]


def learner_switches_of(params: dict) -> dict:
    return {key: params.get(key) for key in LEARNER_DEFAULTS}


def test_each_task_gets_the_learner_and_its_collector(patched: tuple[list[str], Callable[[str], dict]]) -> None:
    found, read = patched
    for owner in found:
        cfg = read(owner)
        assert learner_switches_of(cfg["params"]) == LEARNER_DEFAULTS, owner
        if owner in DEVICE_OWNERS:
            assert cfg["collector"] == "device", owner
            assert cfg["device"] == DEVICE_OWNERS[owner], owner
        elif owner in DEVICE_ENV_ON_REQUEST:  # a device env named for training.collector=device, not the default
            assert cfg["collector"] == "host", owner
            assert cfg["device"] == DEVICE_ENV_ON_REQUEST[owner], owner
        else:
            assert cfg["collector"] == "host", owner
            # A task without a device env: one line naming it, never a silent fallback to the host collector.
            assert cfg["device"].startswith(f"refused: training.collector=device: task {cfg['task']} on backend "
                                            f"{cfg['backend']} has no device env factory"), (owner, cfg["device"])
            assert "\n" not in cfg["device"]


def test_the_pristine_tree_lacks_the_switches(pristine_template: Path) -> None:
    """Negative control: UniLab 1.3.2's own config, composed the same way, fails the learner check."""
    server, read = _reader(pristine_template, None)
    try:
        cfg = read("go2_joystick_flat/mujoco")
    finally:
        server.close()
    assert learner_switches_of(cfg["params"]) != LEARNER_DEFAULTS
    assert cfg["collector"] is None
