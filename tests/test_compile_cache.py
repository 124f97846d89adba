"""The warm-up's compile-artifact cache (uni_rl 0008), on the CPU with real Inductor compiles.

Each step is a fresh interpreter with its own empty Inductor cache folder, as on a new machine:
a compile there is a miss unless the artifacts of an earlier process were loaded first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import side_by_side

SNIPPET = """
import json, sys
from pathlib import Path
import torch
from torch._dynamo.utils import counters
from uni_rl.algos.common.compile import compile_cache_file, load_compile_artifacts, save_compile_artifacts
assert str(__import__('uni_rl').__file__).startswith(sys.argv[1])
action, key = sys.argv[2], sys.argv[3]
path = compile_cache_file(key)
loaded = load_compile_artifacts(path) if action.startswith("load") else False
value = None
if not action.endswith("-only"):
    f = torch.compile(lambda x: torch.relu(x.sin() * 3.0 + 1.0).sum(), dynamic=False)
    value = float(f(torch.arange(16, dtype=torch.float32)))
saved = save_compile_artifacts(path) if action.startswith("save") else False
print(json.dumps({"path": str(path), "loaded": loaded, "saved": saved, "value": value,
                  "hits": counters["inductor"]["fxgraph_cache_hit"], "misses": counters["inductor"]["fxgraph_cache_miss"]}))
"""


def _run(root: Path, tmp: Path, name: str, action: str, key: str = "k", artifacts: str | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root), TORCHINDUCTOR_CACHE_DIR=str(tmp / f"inductor-{name}"),
               FLASHSAC_COMPILE_CACHE_DIR=str(tmp / "artifacts") if artifacts is None else artifacts)
    proc = subprocess.run([sys.executable, "-c", SNIPPET, str(root), action, key], env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


@pytest.mark.extended  # a real Inductor compile on the CPU (cold: about a minute on two cores)
def test_artifacts_of_one_process_turn_a_new_machines_compile_into_hits(patched_uni_rl_root: Path,
                                                                        tmp_path: Path) -> None:
    # The control's cold compile does not wait for the first process: side by side, one per core.
    first, cold = side_by_side(lambda: _run(patched_uni_rl_root, tmp_path, "first", "save"),
                               lambda: _run(patched_uni_rl_root, tmp_path, "cold", "none"))
    assert first["saved"] and Path(first["path"]).is_file() and first["misses"] >= 1
    assert not list(Path(first["path"]).parent.glob(".*.partial"))  # written atomically, nothing left over
    fresh = _run(patched_uni_rl_root, tmp_path, "fresh", "load")
    assert fresh["loaded"] and fresh["hits"] >= 1 and fresh["misses"] == 0
    assert fresh["value"] == first["value"]
    # Control: the same fresh machine without the artifacts compiles from scratch.
    assert cold["hits"] == 0 and cold["misses"] >= 1


def test_damaged_foreign_or_disabled_artifacts_change_nothing(patched_uni_rl_root: Path, tmp_path: Path) -> None:
    # Independent processes side by side, one per core; the damaged file's run needs the probe's path.
    probe, other_key, nothing_compiled, off = side_by_side(
        lambda: _run(patched_uni_rl_root, tmp_path, "probe", "load-only", key="damaged"),
        lambda: _run(patched_uni_rl_root, tmp_path, "other", "load-only", key="never-saved"),
        lambda: _run(patched_uni_rl_root, tmp_path, "empty", "save-only", key="empty"),
        lambda: _run(patched_uni_rl_root, tmp_path, "off", "load-only", artifacts=""))
    path = Path(probe["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a torch artifact")
    damaged = _run(patched_uni_rl_root, tmp_path, "damaged", "load-only", key="damaged")
    assert not damaged["loaded"] and f"[compile cache] ignoring {path}" in damaged["stderr"]
    assert not other_key["loaded"] and other_key["path"] != str(path)
    assert not nothing_compiled["saved"] and not Path(nothing_compiled["path"]).exists()
    assert off["path"] == "None" and not off["loaded"]
