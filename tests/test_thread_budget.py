"""The collector's thread budget without an Inductor import (uni_rl 0007), against unpatched 1.3.2.

Run in a fresh interpreter per case: whether ``torch._inductor`` is imported is process state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SNIPPET = """
import json, os, sys
import torch
from uni_rl.offpolicy.thread_budget import apply_torch_thread_runtime, resolve_torch_thread_runtime
assert str(__import__('uni_rl').__file__).startswith(sys.argv[1])
runtime = resolve_torch_thread_runtime({"compile_threads": 3}, cpu_count=16)
before = "torch._inductor" in sys.modules
apply_torch_thread_runtime(runtime, role=sys.argv[2], torch_module=torch)
imported = "torch._inductor" in sys.modules
from torch._inductor import config
print(json.dumps({"before": before, "imported": imported, "compile_threads": config.compile_threads,
                  "env": os.environ["TORCHINDUCTOR_COMPILE_THREADS"], "torch_threads": torch.get_num_threads()}))
"""


def _apply(root: Path, role: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_COMPILE_THREADS"}
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run([sys.executable, "-c", SNIPPET, str(root), role], env=env, capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("role", ["collector", "learner"])
def test_budget_applies_without_importing_inductor(patched_uni_rl_root: Path, role: str) -> None:
    """Same budget as 1.3.2 (threads, env, Inductor's compile_threads once imported), no import on the way."""
    got = _apply(patched_uni_rl_root, role)
    assert not got["before"] and not got["imported"]
    assert got["compile_threads"] == 3 and got["env"] == "3"
    assert got["torch_threads"] == (1 if role == "collector" else 2)


def test_unpatched_1_3_2_imports_inductor_in_the_collector(pristine_uni_rl_root: Path) -> None:
    """The control: the pristine learner package pays the import the patch removes, for the same budget."""
    got = _apply(pristine_uni_rl_root, "collector")
    assert not got["before"] and got["imported"]
    assert got["compile_threads"] == 3 and got["env"] == "3" and got["torch_threads"] == 1
