"""Snippets run against a ``uni_rl`` root in a process of their own (never the test process's own ``uni_rl``).

The test process may hold the installed unilab-rl 1.4.0, and one interpreter must never mix two ``uni_rl``
versions: each snippet runs in a child process with its root alone on ``PYTHONPATH`` (checked), forked from an
interpreter that imported torch and that root's learner once (``forked_runs``), after a prelude of a small
learner, a batch factory and state helpers, and prints one JSON object as its last line.
"""

from __future__ import annotations

import atexit
import json
import os
import textwrap
import threading
from pathlib import Path
from typing import Any

from forked_runs import ForkServer

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


#: One fork server per root and environment (``forked_runs``): a snippet forks from an interpreter that has
#: imported torch and the root's learner, rather than importing them itself.
#: What the prelude imports, and what the learner's constructor imports on its first call (torch's optimizers
#: import Dynamo: 2.5 s) and its compiles import (Inductor).
PRELOAD = ("torch", "torch._dynamo", "torch._inductor.compile_fx", "uni_rl.algos.flash_sac.learner")
_SERVERS: dict[tuple[Path, frozenset[tuple[str, str]]], ForkServer] = {}
_SERVERS_LOCK = threading.Lock()


def _server(root: Path, env: dict[str, str]) -> ForkServer:
    with _SERVERS_LOCK:
        key = (root, frozenset(env.items()))
        if key not in _SERVERS:
            _SERVERS[key] = ForkServer(PRELOAD, env=env)
        return _SERVERS[key]


@atexit.register
def _close_servers() -> None:
    for server in _SERVERS.values():
        server.close()


def run_snippet(root: Path, body: str) -> Any:
    # pytest names the running test in the environment; a server for each test would import for each snippet
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["PYTHONPATH"] = str(root)
    code = PRELUDE + "\nassert str(__import__('uni_rl').__file__).startswith(sys.argv[1])\n"
    code += textwrap.dedent(body)
    returncode, stdout, stderr = _server(root, env).run(str(root), code=code, timeout=240)
    assert returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])
