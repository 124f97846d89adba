"""Data-parallel NCCL transport per host (uni_rl 0009): the decision from the ranks' hardware, user env wins.

The decision is a pure function of the ranks' (host, device UUID), the deciding process's visible devices
and a peer-access predicate (on a GPU host: torch.cuda.can_device_access_peer). Here the predicate is a
table, so each case states the hardware it stands for. What the store exchange and NCCL then do with the
keys needs GPUs and is not tested here. The bench hook's record of the choice is checked too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT

SNIPPET = r"""
import json, os
from flashsac_runtime import dp_transport as t

def peers(denied=()):
    asked = []
    def can(a, b):
        asked.append((a, b))
        return (a, b) not in denied
    return can, asked

visible = ["U0", "U1", "U2", "U3"]
four = [("h", u) for u in visible]
out = {}
can, asked = peers()
hw = t.choose_hardware_transport(four, visible, can)
out["nvlink"] = [hw.p2p, hw.shm, hw.reason, sorted(asked)]
for name, denied in (("missing_2_3", {(2, 3)}), ("missing_3_0", {(3, 0)})):
    hw = t.choose_hardware_transport(four, visible, peers(denied)[0])
    out[name] = [hw.p2p, hw.shm, hw.reason]
hw = t.choose_hardware_transport([("h1", "U0"), ("h2", "U1")], visible, peers()[0])
out["two_hosts"] = [hw.p2p, hw.shm, hw.reason]
hw = t.choose_hardware_transport([("h", "U0"), ("h", "U9")], visible, peers()[0])
out["not_visible"] = [hw.p2p, hw.shm, hw.reason]
# Genesis-style pinning: every rank sees its GPU as cuda:0, but the UUIDs differ and rank 0 sees only its own.
hw = t.choose_hardware_transport([("h", "U0"), ("h", "U1")], ["U0"], peers()[0])
out["pinned"] = [hw.p2p, hw.shm]

allowed = t.choose_hardware_transport(four, visible, peers()[0])
for name, env in (("no_user", {}), ("user_p2p", {"NCCL_P2P_DISABLE": "1"}),
                  ("user_both", {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"})):
    tr = t.resolve_nccl_transport(allowed, env)
    out[name] = [tr.values, tr.sources, tr.line()]
tcp = t.resolve_nccl_transport(t.choose_hardware_transport(four, visible, peers({(0, 1)})[0]), {"NCCL_SHM_DISABLE": "0"})
out["tcp_user_shm"] = [tcp.values, tcp.sources]
env = {"NCCL_P2P_DISABLE": "1", "OTHER": "x"}
t.apply_nccl_transport(t.resolve_nccl_transport(allowed, env), env)
out["applied"] = env
# The bench hook's run record: nothing before a rank applied a transport, then what it applied.
import sys
sys.path.insert(0, sys.argv[1])
import flashsac_bench_hook as hook
out["hook_before"] = hook._dp_nccl_transport()
t.apply_nccl_transport(t.resolve_nccl_transport(allowed, {}), os.environ)
out["hook_after"] = hook._dp_nccl_transport()
print(json.dumps(out))
"""


def _run(overlay: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env["PYTHONPATH"] = str(overlay)
    hook_dir = str(PROJECT / "experiments" / "bench" / "hook")
    proc = subprocess.run([sys.executable, "-c", SNIPPET, hook_dir], env=env, capture_output=True, text=True, timeout=240,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_transport_follows_the_hardware_and_the_user(patched_uni_rl_root: Path) -> None:
    got = _run(patched_uni_rl_root)
    p2p, shm, reason, asked = got["nvlink"]
    assert (p2p, shm) == (True, True)
    assert reason == "peer access between all of cuda:0,cuda:1,cuda:2,cuda:3 on one host"
    assert sorted(map(tuple, asked)) == [(a, b) for a in range(4) for b in range(4) if a != b]  # every ordered pair
    # Negative controls: one missing direction of one pair, another host, an unseen device -> 1.3.2's TCP defaults.
    assert got["missing_2_3"][:2] == [False, False] and "no peer access from cuda:2 to cuda:3" in got["missing_2_3"][2]
    assert got["missing_3_0"][:2] == [False, False] and "cuda:3 to cuda:0" in got["missing_3_0"][2]
    assert got["two_hosts"] == [False, False, "ranks on 2 hosts: keeps unilab-rl 1.3.2's TCP defaults"]
    assert got["not_visible"][:2] == [False, False] and "['U9']" in got["not_visible"][2]
    assert got["pinned"] == [False, False]
    # The user's environment wins, key by key.
    assert got["no_user"][:2] == [{"NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "0"},
                                  {"NCCL_P2P_DISABLE": "chosen", "NCCL_SHM_DISABLE": "chosen"}]
    assert got["no_user"][2].startswith("[dp_sync] NCCL transport: NCCL_P2P_DISABLE=0 (chosen), NCCL_SHM_DISABLE=0")
    assert got["user_p2p"][:2] == [{"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "0"},
                                   {"NCCL_P2P_DISABLE": "user", "NCCL_SHM_DISABLE": "chosen"}]
    assert got["user_both"][1] == {"NCCL_P2P_DISABLE": "user", "NCCL_SHM_DISABLE": "user"}
    assert got["tcp_user_shm"] == [{"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "0"},
                                   {"NCCL_P2P_DISABLE": "chosen", "NCCL_SHM_DISABLE": "user"}]
    applied = got["applied"]
    assert applied["NCCL_P2P_DISABLE"] == "1" and applied["NCCL_SHM_DISABLE"] == "0" and applied["OTHER"] == "x"
    record = json.loads(applied["FLASHSAC_DP_NCCL_TRANSPORT"])
    assert record["sources"] == {"NCCL_P2P_DISABLE": "user", "NCCL_SHM_DISABLE": "chosen"}
    assert record["values"] == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "0"}
    assert got["hook_before"] is None
    assert got["hook_after"] == {"values": {"NCCL_P2P_DISABLE": "0", "NCCL_SHM_DISABLE": "0"},
                                 "sources": {"NCCL_P2P_DISABLE": "chosen", "NCCL_SHM_DISABLE": "chosen"},
                                 "reason": "peer access between all of cuda:0,cuda:1,cuda:2,cuda:3 on one host"}
