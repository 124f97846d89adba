"""G1 motion tracking's Numba kernels compiled into the tree's cache once per host, before the first run.

Why: UniLab's G1 motion tracking env computes its command's relative state, metrics, rewards and terminations with
Numba kernels (``tasks/motion_tracking/common/kernels.py``, ``cache=True``). A run compiles each at its first call,
before its first iteration, and caches the machine code beside the source, so on a fresh machine the first run
pays the compile and every later run loads it. The cache is this CPU's machine code: it cannot travel in the
wheelhouse as the Warp kernels do. Setting a host up (``make apply OFFLINE=``) compiles it there instead, by
stepping the task's env on CPU MuJoCo (2 envs, a synthetic clip in a temporary folder, seeded random actions,
episodes ending by time-out and by falls) so that the kernels see the array types a run gives them: both owners,
CPU MuJoCo and MuJoCo Warp, call them with the same types. Without the G1 assets in the tree there is no env to
step: the step says so and the first motion tracking run compiles them, as without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import OfflineError

#: The kernels' folder in a UniLab tree, and where Numba caches their machine code.
KERNELS = Path("src/unilab/tasks/motion_tracking/common")
CACHE = KERNELS / "__pycache__"
#: Steps of the env: enough for episodes of 0.6 s (30 steps) to end by time-out and by falls.
STEPS = 40

CHILD = """
import sys
import numpy as np
from hydra import compose, initialize_config_dir
from unilab.base.env_factory import make_registry_env
from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

clip, steps = sys.argv[1], int(sys.argv[2])
with initialize_config_dir(config_dir=sys.argv[3], version_base="1.3"):
    cfg = compose(config_name="config", overrides=["task=g1_motion_tracking/mujoco", "algo.num_envs=2", "algo.seed=1",
                                                   f"env.commands.motion.params.motion_file={clip}",
                                                   "env.max_episode_seconds=0.6"])
np.random.seed(1)
env = make_registry_env(str(cfg.training.task_name), str(cfg.training.sim_backend), 2,
                        {**(build_offpolicy_env_cfg_override("flashsac", cfg) or {}), "seed": 1})
env.reset()
rng = np.random.default_rng(1)
for _ in range(steps):
    env.step(rng.uniform(-1.0, 1.0, size=(2, env.action_space.shape[0])).astype(np.float32))
"""


def cached(tree: Path) -> set[str]:
    """The kernels' cache files in the tree (Numba's index and machine-code files)."""
    folder = tree / CACHE
    return {p.name for p in folder.glob("kernels.*.nb[ic]")} if folder.is_dir() else set()


def compile_into(tree: Path, overlay: Path, python: str = sys.executable) -> str:
    """Step G1 motion tracking's env in a child process (the overlay first on its path, as a run has it) so that
    Numba compiles its kernels into the tree's cache; the one line ``make apply`` prints."""
    from .motion_clip import SCENE_REL, write_clip  # numpy: not imported by the command line's other commands

    if not (tree / SCENE_REL).is_file():
        return ("G1 motion tracking's Numba kernels: no G1 assets in the tree, nothing to step; the first motion "
                "tracking run compiles them")
    before, started = cached(tree), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="numba-kernels-") as scratch:
        clip = Path(scratch) / "clip.npz"
        write_clip(clip, tree / SCENE_REL)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(overlay), str(tree / "src"),
                                                                          os.environ.get("PYTHONPATH")))),
               "MUJOCO_GL": "disable", "HF_HUB_OFFLINE": "1"}
        proc = subprocess.run([python, "-c", CHILD, str(clip), str(STEPS), str(tree / "src/unilab/conf/flashsac")],
                              cwd=tree, env=env, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OfflineError(f"G1 motion tracking's env did not step, so its Numba kernels are not compiled: {last}")
    added = len({name for name in cached(tree) - before if name.endswith(".nbi")})
    kept = len({name for name in before if name.endswith(".nbi")})
    return (f"G1 motion tracking's Numba kernels: {added} compiled into {tree / CACHE}, {kept} already there, "
            f"in {time.monotonic() - started:.1f} s (this CPU's code: once per host)")
