"""The contract of a vectorized env whose whole step stays on the learner's device.

The host-path collector steps a NumPy env in its own process and moves every
transition through shared memory. A device env keeps observations, rewards and
dones as tensors on ``env.device``, so the learner's process can step it, act on
its outputs and write them into a device replay ring without a host copy
(``flashsac_runtime.collector.runner``). The env autoresets, like UniLab's envs:
the observations it returns for a done row are the next episode's first ones,
and ``final_*_obs`` carries the observation that ended the episode, which is
what the replay stores as that row's next observation (the host path's
terminal-observation contract).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import torch
from torch import Tensor


class DeviceStep(NamedTuple):
    """One step's outputs; all on ``env.device``, buffers owned by the env.

    Valid until the next ``step()``/``reset()``: a caller that keeps a field
    across a step copies it first.
    """

    policy_obs: Tensor  # (N, P) float32, after autoreset
    critic_obs: Tensor  # (N, C) float32, after autoreset
    reward: Tensor  # (N,) float32
    terminated: Tensor  # (N,) bool
    truncated: Tensor  # (N,) bool  (time-out)
    final_policy_obs: Tensor  # (N, P): the observation BEFORE the reset for rows that are done, = policy_obs elsewhere
    final_critic_obs: Tensor  # (N, C): likewise


class DeviceVecEnv(Protocol):
    """A batch of ``num_envs`` autoresetting envs stepped on ``device``."""

    num_envs: int
    device: torch.device
    policy_obs_dim: int
    critic_obs_dim: int
    action_dim: int

    def reset(self) -> DeviceStep:
        """Full reset of every env (reward 0, dones False)."""
        ...

    def step(self, actions: Tensor) -> DeviceStep:
        """(N, A) float32 on env.device; no host sync inside."""
        ...

    # Optional: ``describe() -> dict[str, str]``, the form of the env's step as it runs after its first reset (e.g.
    # whether its CUDA graph was captured); the runner records it in the run's ``runtime_manifest["device_env"]``
    # and logs it. An env without it is recorded as nothing.
    # Optional: ``step_stamps``, None or an object with ``ring`` (a tensor on ``device`` its steps write their parts'
    # timestamps into) and ``split_ms(rows, after_step) -> (parts, last_step)`` (milliseconds per step of each part,
    # from a host copy of ``ring``, over the steps after ``after_step``); the runner stages a copy of ``ring`` at each
    # iteration's end and records the parts beside its phases (``device_runner.SPLIT``).


#: What UniLab hands the FlashSAC runner builder: (num_envs, device, seed) -> env.
DeviceEnvFactory = Callable[[int, torch.device, int], DeviceVecEnv]
