"""Data-parallel rendezvous (uni_rl 0009, unilab 0003): torchrun's environment or UniLab's file store.

Two real processes run the patched DpParameterSync.start (the code path the learner uses) with the gloo
backend, since this machine has no GPU: the NCCL transport choice and NCCL itself are not exercised.
They meet through MASTER_ADDR/MASTER_PORT on localhost, as two torchrun hosts would, and average a
gradient and a statistic. The rendezvous path given then does not exist, so a success proves that the
file store was not used; without the environment the same call uses (and needs) the file store.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

RANK = r"""
import json, os, sys, torch
from uni_rl.ipc.dp_sync import DpParameterSync
rank, path = int(sys.argv[1]), sys.argv[2]
sync = DpParameterSync(world_size=2, rank=rank, rendezvous_path=None if path == "-" else path, backend="gloo",
                       timeout_s=60)
sync.start()
p = torch.nn.Parameter(torch.zeros(3))
p.grad = torch.full((3,), 4.0 * rank)
sync.allreduce_gradients([p])
stats = sync.allreduce_statistics(mean={"reward": 1.0 + rank}, total={"steps": 10.0})
sync.close()
print(json.dumps({"rank": rank, "grad": p.grad.tolist(), "stats": stats,
                  "nccl_keys": sorted(k for k in os.environ if k.startswith("NCCL_"))}))
"""


def _env(overlay: Path, extra: dict[str, str]) -> dict[str, str]:
    drop = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("NCCL_", "TORCHELASTIC"))}
    return {**env, "PYTHONPATH": str(overlay), **extra}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _two_ranks(overlay: Path, path: str, torchrun: bool) -> list[subprocess.CompletedProcess]:
    port = str(_free_port())
    procs = []
    for rank in range(2):
        extra = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2", "RANK": str(rank),
                 "LOCAL_RANK": "0"} if torchrun else {}  # LOCAL_RANK 0 on both: one rank per "host"
        procs.append(subprocess.Popen([sys.executable, "-c", RANK, str(rank), path], env=_env(overlay, extra),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def _results(done: list[subprocess.CompletedProcess]) -> list[dict]:
    for proc in done:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(proc.stdout.strip().splitlines()[-1]) for proc in done]


def _check_averaged(results: list[dict]) -> None:
    for got in results:
        assert got["grad"] == [2.0, 2.0, 2.0]  # mean of 0 and 4: the ranks really exchanged
        assert got["stats"] == {"reward": 1.5, "steps": 20.0}
        assert got["nccl_keys"] == []  # gloo: no NCCL transport keys are chosen


def test_torchrun_environment_rendezvous(patched_uni_rl_root: Path, tmp_path: Path) -> None:
    unreachable = str(tmp_path / "no-such-dir" / ".dp_rendezvous")
    _check_averaged(_results(_two_ranks(patched_uni_rl_root, unreachable, torchrun=True)))
    _check_averaged(_results(_two_ranks(patched_uni_rl_root, "-", torchrun=True)))


def test_file_store_stays_the_default(patched_uni_rl_root: Path, tmp_path: Path) -> None:
    _check_averaged(_results(_two_ranks(patched_uni_rl_root, str(tmp_path / ".dp_rendezvous"), torchrun=False)))
    # Control: without the environment the file store is what they use, so they cannot start without a path.
    proc = subprocess.run([sys.executable, "-c", RANK, "0", "-"], env=_env(patched_uni_rl_root, {}),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "ValueError: a data-parallel rendezvous path is required outside a torch.distributed launch")


@pytest.mark.parametrize(("extra", "message"), [
    ({"MASTER_ADDR": "127.0.0.1", "RANK": "0"},
     "torch.distributed rendezvous environment is incomplete: MASTER_ADDR, RANK set but MASTER_PORT, WORLD_SIZE, "
     "LOCAL_RANK not"),
    ({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0"},
     "data-parallel rank 0 of 2 does not match the torch.distributed environment (RANK=0, WORLD_SIZE=4)"),
    ({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "WORLD_SIZE": "2", "RANK": "two", "LOCAL_RANK": "0"},
     "torch.distributed rendezvous environment: invalid literal for int()"),
])
def test_bad_environment_is_one_clear_error(patched_uni_rl_root: Path, extra: dict[str, str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-c", RANK, "0", "-"], env=_env(patched_uni_rl_root, extra),
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr.strip().splitlines()[-1]


LAYOUT = r"""
import json, sys
from omegaconf import OmegaConf
from unilab.scripts.train_offpolicy import resolve_dp_layout
try:
    layout = resolve_dp_layout(OmegaConf.create({"training": {"devices": json.loads(sys.argv[1])}}))
    print(json.dumps([layout.devices, layout.local_rank, layout.rank, layout.world_size, layout.torch_distributed]))
except ValueError as exc:
    print(json.dumps(str(exc)))
"""


@pytest.mark.parametrize(("devices", "extra", "expected"), [
    (None, {}, [None, 0, 0, 1, False]),
    ([0, 1, 2, 3], {"UNILAB_DP_RANK": "2"}, [[0, 1, 2, 3], 2, 2, 4, False]),
    # Second host of two, four ranks each: this host's GPU by LOCAL_RANK, the group's rank by RANK.
    (None, {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}, [[0, 1, 2, 3], 1, 5, 8, True]),
    ([4, 5, 6, 7], {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"},
     [[4, 5, 6, 7], 1, 5, 8, True]),
    ([0, 1], {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"},
     "training.devices=[0, 1] names 2 GPU(s) but torchrun started LOCAL_WORLD_SIZE=4 rank(s) on this host; "
     "give one GPU per local rank"),
])
def test_offpolicy_layout(patched_unilab_root: Path, patched_uni_rl_root: Path, devices: list[int] | None,
                          extra: dict[str, str], expected: object) -> None:
    if "RANK" in extra:
        extra = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", **extra}
    env = _env(patched_uni_rl_root, extra)
    env["PYTHONPATH"] = f"{patched_uni_rl_root}{os.pathsep}{patched_unilab_root / 'src'}"
    proc = subprocess.run([sys.executable, "-c", LAYOUT, json.dumps(devices)], env=env, capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected
