"""NCCL transport per host: peer-to-peer and shared memory where the hardware offers them.

unilab-rl 1.3.2 forced ``NCCL_P2P_DISABLE=1`` and ``NCCL_SHM_DISABLE=1`` (TCP loopback) on every host,
because P2P hung and SHM faulted on some PCIe hosts (RTX 6000D). On hosts whose GPUs reach each other
directly (NVLink) that costs every gradient all-reduce a trip through host sockets. Here the ranks
describe their GPUs (host name, device UUID) through the rendezvous store; rank 0 decides once from what
torch reports without side effects (``torch.cuda.can_device_access_peer`` for every pair of the ranks'
devices, all on one host) and publishes the decision, so every rank uses the same transport. Anything
else keeps 1.3.2's TCP defaults. A key the user set in the environment is never changed.

The decision is logged as one line and exported as JSON in ``FLASHSAC_DP_NCCL_TRANSPORT`` so run
records (the bench hook) can carry it.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

P2P_KEY = "NCCL_P2P_DISABLE"
SHM_KEY = "NCCL_SHM_DISABLE"
#: Written by the trainer, not read from the user: the NCCL transport chosen for the data-parallel ranks, as JSON,
#: for run records.
RECORD_ENV = "FLASHSAC_DP_NCCL_TRANSPORT"
_STORE_PREFIX = "flashsac/nccl_transport"


@dataclass(frozen=True)
class HardwareTransport:
    """What the ranks' hardware allows: True enables the transport (its ``*_DISABLE`` key becomes 0)."""

    p2p: bool
    shm: bool
    reason: str


@dataclass(frozen=True)
class NcclTransport:
    """The values applied to the NCCL keys and where each came from ('chosen' or 'user')."""

    values: dict[str, str]
    sources: dict[str, str]
    reason: str

    def record(self) -> dict[str, object]:
        return {"values": dict(self.values), "sources": dict(self.sources), "reason": self.reason}

    def line(self) -> str:
        keys = ", ".join(f"{key}={self.values[key]} ({self.sources[key]})" for key in (P2P_KEY, SHM_KEY))
        return f"[dp_sync] NCCL transport: {keys}; {self.reason}"


def choose_hardware_transport(
    members: Sequence[tuple[str, str]],
    visible_uuids: Sequence[str],
    can_access_peer: Callable[[int, int], bool],
) -> HardwareTransport:
    """Decide from the ranks' ``(host, device UUID)`` and the deciding process's visible devices.

    P2P and SHM are enabled only when all ranks share one host and every ordered pair of their distinct
    devices has peer access; otherwise unilab-rl 1.3.2's TCP defaults (both disabled) stay.
    ``visible_uuids[i]`` is the UUID of the deciding process's ``cuda:i``.
    """
    tcp = "keeps unilab-rl 1.3.2's TCP defaults"
    hosts = sorted({host for host, _ in members})
    if len(hosts) != 1:
        return HardwareTransport(False, False, f"ranks on {len(hosts)} hosts: {tcp}")
    uuids = sorted({uuid for _, uuid in members})
    missing = [uuid for uuid in uuids if uuid not in visible_uuids]
    if missing:
        return HardwareTransport(False, False, f"rank devices {missing} are not visible to rank 0: {tcp}")
    index = {uuid: visible_uuids.index(uuid) for uuid in uuids}
    for a in uuids:
        for b in uuids:
            if a != b and not can_access_peer(index[a], index[b]):
                return HardwareTransport(
                    False, False, f"no peer access from cuda:{index[a]} to cuda:{index[b]}: {tcp}"
                )
    devices = ",".join(f"cuda:{index[uuid]}" for uuid in uuids)
    return HardwareTransport(True, True, f"peer access between all of {devices} on one host")


def resolve_nccl_transport(hardware: HardwareTransport, env: Mapping[str, str]) -> NcclTransport:
    """Apply the user-wins rule: a key already in ``env`` keeps its value."""
    chosen = {P2P_KEY: "0" if hardware.p2p else "1", SHM_KEY: "0" if hardware.shm else "1"}
    values = {key: env.get(key, value) for key, value in chosen.items()}
    sources = {key: "user" if key in env else "chosen" for key in chosen}
    return NcclTransport(values, sources, hardware.reason)


def apply_nccl_transport(transport: NcclTransport, env: MutableMapping[str, str]) -> None:
    """Write the chosen keys and the JSON record into ``env``; user keys stay as they are."""
    for key, source in transport.sources.items():
        if source == "chosen":
            env[key] = transport.values[key]
    env[RECORD_ENV] = json.dumps(transport.record(), sort_keys=True)


def agree_nccl_transport(store: dist.Store, *, rank: int, world_size: int, device: torch.device) -> NcclTransport:
    """Every rank publishes its GPU; rank 0 decides for all; each rank applies it to ``os.environ``.

    Runs on the rendezvous store before the process group exists, so NCCL reads the keys when it builds
    its communicator.
    """
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    store.set(f"{_STORE_PREFIX}/member/{rank}", json.dumps([socket.gethostname(), uuid]))
    if rank == 0:
        members = [tuple(json.loads(store.get(f"{_STORE_PREFIX}/member/{r}"))) for r in range(world_size)]
        visible = [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
        hardware = choose_hardware_transport(members, visible, torch.cuda.can_device_access_peer)
        store.set(f"{_STORE_PREFIX}/decision", json.dumps([hardware.p2p, hardware.shm, hardware.reason]))
    p2p, shm, reason = json.loads(store.get(f"{_STORE_PREFIX}/decision"))
    transport = resolve_nccl_transport(HardwareTransport(bool(p2p), bool(shm), str(reason)), os.environ)
    apply_nccl_transport(transport, os.environ)
    print(transport.line(), flush=True)
    return transport
