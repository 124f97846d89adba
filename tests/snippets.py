"""Snippets run against a ``uni_rl`` root in a fresh interpreter (never the test process's own ``uni_rl``).

The test process may hold the installed unilab-rl 1.4.0, and one interpreter must never mix two ``uni_rl``
versions: each snippet runs in a subprocess with its root alone on ``PYTHONPATH`` (checked), after a prelude of
a small learner, a batch factory and state helpers, and prints one JSON object as its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

# A small learner and batch factory shared by the snippets.
PRELUDE = """
import json, sys
import torch
from uni_rl.algos.flash_sac.learner import FlashSACLearner

def learner(**switches):
    torch.manual_seed(0)
    return FlashSACLearner(obs_dim=12, action_dim=4, critic_obs_dim=16, actor_hidden_dim=32,
                           critic_hidden_dim=64, **switches)

def batch(seed, size=32):
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(size, 12, generator=g), "next_obs": torch.randn(size, 12, generator=g),
            "actions": torch.rand(size, 4, generator=g) * 2 - 1, "rewards": torch.randn(size, generator=g),
            "dones": torch.zeros(size), "truncated": torch.zeros(size),
            "critic": torch.randn(size, 16, generator=g), "next_critic": torch.randn(size, 16, generator=g)}

def state(l):
    out = {}
    for name in ("actor", "critic", "target_critic", "temperature"):
        for k, v in getattr(l, name).state_dict().items():
            out[f"{name}.{k}"] = v.detach().clone()
    for name in ("actor_optimizer", "critic_optimizer", "temperature_optimizer"):
        for i, s in getattr(l, name).state_dict()["state"].items():
            for k, v in s.items():
                out[f"{name}.{i}.{k}"] = v.detach().clone()
    return out

def same(a, b, prefixes):
    keys = [k for k in a if k.startswith(prefixes)]
    return bool(keys) and all(torch.equal(a[k], b[k]) for k in keys)
"""


def run_snippet(root: Path, body: str) -> Any:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    code = PRELUDE + "\nassert str(__import__('uni_rl').__file__).startswith(sys.argv[1])\n"
    code += textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
