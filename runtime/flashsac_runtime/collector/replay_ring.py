"""The replay ring of the in-process device collector, on the learner's device.

The host path's replay holds its authoritative ring on the device too, filled
from shared-memory ingress slots that the collector process packs
(``ReplayBuffer`` + ``GPUResidentReplayPipeline``). Here the transitions are
already on the device: each env step writes its rows straight into the ring,
with the same packed layout, the same terminal-observation semantics and the
same per-tick batch draw, and without a host copy or a host read.
"""

from __future__ import annotations

import torch

from uni_rl.ipc.replay_buffer import PackedTransitionLayout
from uni_rl.ipc.replay_pipelines.gpu_resident import tick_sample_indices
from flashsac_runtime.collector.device_env import DeviceStep


class DeviceReplayRing(PackedTransitionLayout):
    """``replay_buffer_n`` env steps of ``num_envs`` rows each, oldest overwritten first.

    ``ptr`` counts rows ever written (a host integer: every step adds exactly
    ``num_envs``, so it is known without reading the device). Row ``r`` lives at
    ``r % capacity``, as in the host path's ring, so the same sampled indices
    address the same transitions.
    """

    def __init__(
        self,
        *,
        num_envs: int,
        replay_buffer_n: int,
        obs_dim: int,
        action_dim: int,
        critic_dim: int,
        sample_count: int,
        base_seed: int,
        device: torch.device,
    ) -> None:
        super().__init__(obs_dim, action_dim, critic_dim)
        if replay_buffer_n < 1 or num_envs < 1:
            raise ValueError("the device replay ring needs num_envs >= 1 and replay_buffer_n >= 1")
        self.num_envs = int(num_envs)
        self.capacity = int(replay_buffer_n) * self.num_envs
        self.sample_count = int(sample_count)
        self.base_seed = int(base_seed)
        self.device = torch.device(device)
        self.ptr = 0
        self._storage = torch.zeros(
            (self.capacity, self.storage_width), dtype=torch.float32, device=self.device
        )
        # One batch slot: each iteration's batch is consumed by its updates, which are
        # ordered on the stream before the next iteration's gather overwrites it.
        self._batch = torch.empty(
            (self.sample_count, self.storage_width), dtype=torch.float32, device=self.device
        )

    @property
    def size(self) -> int:
        """Rows that can be sampled."""
        return min(self.ptr, self.capacity)

    def write(
        self,
        obs: torch.Tensor,
        critic: torch.Tensor,
        actions: torch.Tensor,
        step: DeviceStep,
    ) -> None:
        """Store one env step: ``obs``/``critic`` are the observations ``actions`` were chosen on.

        The host path's rows: done = terminated | truncated, truncated kept apart (the
        learner bootstraps through time-outs), and a done row's next observation is the
        observation that ended its episode (its ``terminal_next_obs`` patch), every other
        row's the env's next observation. Selected on the device with ``torch.where``
        instead of the host path's masked assignment, which reads the mask on the host.
        """
        start = self.ptr % self.capacity
        target = self._storage[start : start + self.num_envs]
        done = torch.logical_or(step.terminated, step.truncated)
        done_rows = done.unsqueeze(1)
        self._write_transition_rows(
            target,
            obs,
            actions,
            step.reward,
            torch.where(done_rows, step.final_policy_obs, step.policy_obs),
            done,
            step.truncated,
            critic,
            torch.where(done_rows, step.final_critic_obs, step.critic_obs),
            has_critic=self._critic_dim > 0,
        )
        self.ptr += self.num_envs

    def sample_large_batch(self, tick_id: int) -> dict[str, torch.Tensor]:
        """The iteration's batch: ``sample_count`` rows drawn as the host path draws tick ``tick_id``."""
        indices = tick_sample_indices(
            self.size, self.sample_count, seed=self.base_seed + int(tick_id), device=self.device
        )
        torch.index_select(self._storage, 0, indices, out=self._batch)
        return self.batch_view(self._batch)

    def dry_large_batch(self) -> dict[str, torch.Tensor]:
        """A zero batch laid out exactly like ``sample_large_batch``'s (for the warm-up)."""
        return self.batch_view(torch.zeros_like(self._batch))

    def read_committed_fields(
        self,
        field_names: tuple[str, ...],
        *,
        start_ptr: int,
    ) -> tuple[int, dict[str, torch.Tensor]]:
        """Rows ``[start_ptr, ptr)`` of each field in write order (at most ``capacity``).

        The interface of ``GPUResidentReplayPipeline.read_committed_fields``, so the
        reward statistics update of the host path (``update_reward_stats_from_replay``)
        reads this ring unchanged; every written row is committed here.
        """
        end_ptr = self.ptr
        count = min(max(end_ptr - start_ptr, 0), self.capacity)
        index = (end_ptr - count) % self.capacity
        fields: dict[str, torch.Tensor] = {}
        for field_name in field_names:
            source = self.field_view(self._storage, field_name)
            if index + count <= self.capacity:
                fields[field_name] = source[index : index + count].clone()
            else:
                split = self.capacity - index
                fields[field_name] = torch.cat([source[index:], source[: count - split]], dim=0)
        return end_ptr, fields
