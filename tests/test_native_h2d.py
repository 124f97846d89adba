"""The replay transfer builds its native H2D extension only on request (uni_rl 0013), on the CPU.

What a GPU run cannot be trusted to show by itself, each with a control that must fail:

- the question the transfer backend asks for every CUDA learner never reaches ``torch.utils.cpp_extension.load``
  by default, with every build prerequisite met (torch's loader is replaced by a tripwire in a fresh process);
  controls: unilab-rl 1.3.2's own module reaches it, and so does the patched one under ``FLASHSAC_NATIVE_H2D=1``,
  which says in one line that it builds because no build is cached; a value other than 0/1 is a one-line error;
- ``experiments/evidence/h2d_copy_bench.py`` refuses without CUDA in one line (exit 2, nothing written), and its G1
  sizes are those the runner reads from the real env.

The copies themselves need CUDA (the native extension refuses a CPU destination, the replay pipeline a CPU
learner): ``h2d_copy_bench.py`` checks on the GPU that both paths copy the source's bytes exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import runnable_tree

PROJECT = Path(__file__).resolve().parents[1]
BENCH_SCRIPT = PROJECT / "experiments" / "evidence" / "h2d_copy_bench.py"
sys.path.insert(0, str(BENCH_SCRIPT.parent))

import h2d_copy_bench  # noqa: E402

#: In a fresh process: torch's loader becomes a tripwire, then the transfer backend's question is asked.
PROBE = r"""
import json, sys
import torch.utils.cpp_extension as cpp_extension
calls = []
def tripwire(*args, **kwargs):
    calls.append(kwargs.get("name"))
    raise RuntimeError("tripwire: torch.utils.cpp_extension.load was called")
cpp_extension.load = tripwire
from uni_rl.ipc.replay_pipelines import native_h2d
ready, why = native_h2d._check_build_prerequisites()
try:
    answer = {"available": native_h2d.is_available(), "diagnostic": native_h2d.get_diagnostic()}
except ValueError as exc:
    answer = {"error": str(exc)}
print(json.dumps({"prerequisites": ready, "why": why, "load_calls": calls, **answer}))
"""


def _cuda_home() -> str:
    """A CUDA toolkit whose headers meet the extension's build prerequisites (else the control cannot fail)."""
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and (Path(home) / "include" / "cuda_runtime_api.h").is_file():
            return home
    pytest.skip("no CUDA toolkit headers: 1.3.2's build stops at its prerequisite check, so no control can fail")


def _ask(uni_rl_root: Path, tmp_path: Path, **env: str) -> tuple[dict, str]:
    """The probe's answer and stderr, with ``uni_rl`` from ``uni_rl_root`` and an empty extension folder."""
    extensions = tmp_path / "torch-extensions"
    extensions.mkdir(parents=True)
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHSAC_NATIVE_H2D")}
    base.update(PYTHONPATH=str(uni_rl_root), CUDA_HOME=_cuda_home(), TORCH_EXTENSIONS_DIR=str(extensions), **env)
    proc = subprocess.run([sys.executable, "-c", PROBE], env=base, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["prerequisites"], answer["why"]  # the build would have started: the probe can fail
    answer["extension_folder"] = sorted(p.name for p in extensions.rglob("*"))
    return answer, proc.stderr


def test_the_default_transfer_path_never_calls_the_extension_loader(patched_uni_rl_root: Path, tmp_path: Path) -> None:
    answer, _ = _ask(patched_uni_rl_root, tmp_path)
    assert answer["load_calls"] == [] and answer["available"] is False
    assert "FLASHSAC_NATIVE_H2D=1" in answer["diagnostic"]
    assert answer["extension_folder"] == []  # not even torch's build folder was made
    explicit, _ = _ask(patched_uni_rl_root, tmp_path / "zero", FLASHSAC_NATIVE_H2D="0")
    assert explicit["load_calls"] == []


def test_control_unilab_rl_1_3_2_builds_the_extension_by_default(pristine_uni_rl_root: Path, tmp_path: Path) -> None:
    answer, _ = _ask(pristine_uni_rl_root, tmp_path)
    assert answer["load_calls"] == ["unilab_native_h2d"]


def test_control_the_opt_in_builds_and_says_so_in_one_line(patched_uni_rl_root: Path, tmp_path: Path) -> None:
    answer, stderr = _ask(patched_uni_rl_root, tmp_path, FLASHSAC_NATIVE_H2D="1")
    assert answer["load_calls"] == ["unilab_native_h2d"] and answer["available"] is False
    assert answer["diagnostic"].startswith("Compilation failed: tripwire")
    notices = [line for line in stderr.splitlines() if "building the native H2D extension" in line]
    assert len(notices) == 1 and "no cached build" in notices[0]


def test_a_switch_value_other_than_0_or_1_is_one_line(patched_uni_rl_root: Path, tmp_path: Path) -> None:
    answer, _ = _ask(patched_uni_rl_root, tmp_path, FLASHSAC_NATIVE_H2D="yes")
    assert answer["load_calls"] == [] and "\n" not in answer["error"]
    assert answer["error"].startswith("FLASHSAC_NATIVE_H2D='yes': use 1 to build")


def test_the_copy_bench_refuses_without_cuda_in_one_line(patched_uni_rl_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "h2d.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(BENCH_SCRIPT), "--output", str(out)], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(patched_uni_rl_root), "CUDA_VISIBLE_DEVICES": ""},
                          timeout=300, check=False)
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip().splitlines() == ["h2d_copy_bench: error: no CUDA device (this times host-to-device "
                                                "copies on a GPU)"]


def test_the_copy_bench_uses_the_sizes_the_runner_reads_from_the_g1_env(
        applied_session: tuple[Path, Path], tmp_path: Path) -> None:
    checkout, overlay = applied_session
    tree = runnable_tree(checkout, tmp_path / "tree")
    code = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import collector_profile\n"
        "from uni_rl.algos.common.device import get_env_dims\n"
        "obs, act, critic = get_env_dims(lambda n, override: collector_profile.build_env(n, 1), None)\n"
        "print(json.dumps({'obs_dim': obs, 'critic_obs_dim': critic, 'action_dim': act}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([str(overlay), str(tree / "src")]), MUJOCO_GL="disable", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", code, str(PROJECT / "experiments" / "profile")], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == h2d_copy_bench.G1_WALK_FLAT
