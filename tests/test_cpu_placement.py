"""Single-rank CPU placement (unilab 0002): the collector's block and the learner's reserved CPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

SNIPPET = """
import json, os, sys
from unilab.scripts.train_offpolicy import _single_rank_collector_cpu_ids as split
os.sched_setaffinity(0, {0, 1})
out = {"none": split(0), "one": split(1)}
try:
    split(2)
except ValueError as exc:
    out["too_many"] = str(exc)
print(json.dumps(out))
"""


def test_reserved_cpus_leave_the_collector_the_rest(patched_unilab_root: Path, patched_uni_rl_root: Path) -> None:
    env = dict(os.environ, PYTHONPATH=f"{patched_uni_rl_root}{os.pathsep}{patched_unilab_root / 'src'}")
    proc = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, timeout=240,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["none"] is None  # 0: UniLab 1.3.2's placement, nothing pinned
    assert got["one"] == [1]
    assert "learner_reserved_cpus=2 leaves no CPU for the collector (2 usable)" in got["too_many"]


def test_default_keeps_1_3_2_placement(patched_unilab_root: Path) -> None:
    config = yaml.safe_load((patched_unilab_root / "src/unilab/conf/flashsac/config.yaml").read_text())
    assert config["training"]["learner_reserved_cpus"] == 0
