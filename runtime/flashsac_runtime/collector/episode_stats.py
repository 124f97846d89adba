"""Episode statistics of the in-process device collector, kept on the device.

The host collector tracks each env's running return and length in NumPy and
keeps the last 100 finished episodes in a deque; reading done rows every step
would cost the device collector a host sync per step. Here the same quantities
live in device tensors, updated with fixed-shape kernels, and come to the host
in one transfer when the runner logs them.
"""

from __future__ import annotations

import statistics

import torch

from flashsac_runtime.staged_read import StagedRead

#: Finished episodes averaged for the logged reward and length (the host collector's window).
EPISODE_WINDOW = 100


class DeviceEpisodeStats:
    """Running returns and lengths per env, the last ``EPISODE_WINDOW`` finished episodes, done counts."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self._return = torch.zeros(num_envs, dtype=torch.float32, device=device)
        self._length = torch.zeros(num_envs, dtype=torch.int64, device=device)
        # One slot past the window takes the rows that record nothing (not done, or
        # beyond the newest EPISODE_WINDOW of one step), so every step writes all rows.
        self._window_return = torch.zeros(EPISODE_WINDOW + 1, dtype=torch.float32, device=device)
        self._window_length = torch.zeros(EPISODE_WINDOW + 1, dtype=torch.int64, device=device)
        self._head = torch.zeros((), dtype=torch.int64, device=device)
        self._count = torch.zeros((), dtype=torch.int64, device=device)
        self._dones = torch.zeros((), dtype=torch.int64, device=device)
        self._timeouts = torch.zeros((), dtype=torch.int64, device=device)

    def record(self, reward: torch.Tensor, done: torch.Tensor, truncated: torch.Tensor) -> None:
        """Add one step; episodes that ended enter the window in env order, as the host deque's."""
        self._return.add_(reward)
        self._length.add_(1)
        finished = done.to(torch.int64)
        rank = torch.cumsum(finished, dim=0)
        total = rank[-1]
        keep = done & (total - rank < EPISODE_WINDOW)
        slot = torch.where(keep, (self._head + rank - 1) % EPISODE_WINDOW, EPISODE_WINDOW)
        self._window_return.scatter_(0, slot, self._return)
        self._window_length.scatter_(0, slot, self._length)
        self._head.add_(total).remainder_(EPISODE_WINDOW)
        self._count.add_(total).clamp_(max=EPISODE_WINDOW)
        self._dones.add_(total)
        self._timeouts.add_(truncated.to(torch.int64).sum())
        self._return.masked_fill_(done, 0.0)
        self._length.masked_fill_(done, 0)

    def read(self) -> dict[str, float]:
        """The host collector's metrics message fields; one device-to-host transfer.

        ``mean_ep_reward``/``mean_ep_length`` over the window (once an episode
        finished), ``timeout_rate`` = time-outs / dones since the last read that
        saw a done (then those counters restart), as the host collector reports.
        """
        return self.stage_read().message()

    def stage_read(self) -> StagedEpisodeStats:
        """``read`` taken at this point of the stream, for the host to finish later (no wait now).

        The done counters restart on the device where the read saw a done, as ``read`` restarts them.
        """
        staged = StagedEpisodeStats(StagedRead(torch.cat([
            self._window_return.to(torch.float64),
            self._window_length.to(torch.float64),
            torch.stack([self._count, self._dones, self._timeouts]).to(torch.float64),
        ])))
        seen = self._dones > 0
        self._timeouts.masked_fill_(seen, 0)
        self._dones.masked_fill_(seen, 0)
        return staged


class StagedEpisodeStats:
    """Episode statistics taken by ``DeviceEpisodeStats.stage_read``; ``message`` makes ``read``'s fields."""

    def __init__(self, values: StagedRead) -> None:
        self._values = values

    def message(self) -> dict[str, float]:
        host = self._values.tolist()
        width = EPISODE_WINDOW + 1
        count, dones, timeouts = (int(value) for value in host[2 * width :])
        message: dict[str, float] = {}
        if count:
            message["mean_ep_reward"] = statistics.mean(host[:count])
            message["mean_ep_length"] = statistics.mean(host[width : width + count])
        if dones:
            message["timeout_rate"] = timeouts / dones
        return message
