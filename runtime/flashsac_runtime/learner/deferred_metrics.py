"""Per-update learner metrics kept on the device and read once per runner iteration.

Reading a metric with ``float(tensor)`` after every update blocks the host until the
device has finished that update, so the host can never run ahead and queue the next
update's kernels. ``DeferredMetricsBuffer`` instead copies each update's metric values
into a row of one preallocated device tensor and transfers the whole tensor once, after
the runner's iteration has already synchronized.

The storage is allocated by this class in eager mode, outside every CUDA graph memory
pool, and is written only by eager copy kernels: neither an Inductor CUDA-graph-tree
replay nor a manual ``torch.cuda.CUDAGraph`` replay can overwrite a row once it is
written, so each row keeps the values of its own update until ``read`` consumes it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import torch

from flashsac_runtime.staged_read import StagedRead


class DeferredMetricsBuffer:
    """Rows of metric values per group ("critic", "actor", ...), averaged on ``read``."""

    def __init__(
        self,
        groups: Mapping[str, Sequence[str]],
        device: torch.device,
        capacity: int = 8,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self.device = torch.device(device)
        self._columns: dict[str, tuple[int, tuple[str, ...]]] = {}
        width = 0
        for group, names in groups.items():
            self._columns[group] = (width, tuple(names))
            width += len(names)
        self._width = width
        self._storage = torch.zeros(capacity, width, device=self.device, dtype=torch.float32)
        self._rows = dict.fromkeys(self._columns, 0)

    @property
    def capacity(self) -> int:
        return int(self._storage.shape[0])

    def _grow(self, min_rows: int) -> None:
        # Growing copies the written rows on the device; it happens only when an
        # iteration runs more updates than ever before, not in the steady state.
        capacity = self.capacity
        while capacity < min_rows:
            capacity *= 2
        storage = torch.zeros(capacity, self._width, device=self.device, dtype=torch.float32)
        storage[: self.capacity].copy_(self._storage)
        self._storage = storage

    def record(self, group: str, values: Sequence[torch.Tensor]) -> None:
        """Append one row for ``group``: one stack kernel, no host synchronization."""
        start, names = self._columns[group]
        if len(values) != len(names):
            raise ValueError(f"{group} metrics need {len(names)} values, got {len(values)}")
        row = self._rows[group]
        if row >= self.capacity:
            self._grow(row + 1)
        target = self._storage[row, start : start + len(names)]
        torch.stack(
            [value.detach().reshape(()).to(torch.float32) for value in values],
            out=target,
        )
        self._rows[group] = row + 1

    def record_rows(self, group: str, rows: torch.Tensor) -> None:
        """Append ``rows`` (one row per update, columns in name order): one copy kernel.

        The whole-iteration CUDA graph writes its updates' metrics into a static tensor
        of its own; this copies them out eagerly, so the rows survive later replays.
        """
        start, names = self._columns[group]
        if rows.ndim != 2 or rows.shape[1] != len(names):
            raise ValueError(f"{group} rows need shape (n, {len(names)}), got {tuple(rows.shape)}")
        first = self._rows[group]
        last = first + int(rows.shape[0])
        if last > self.capacity:
            self._grow(last)
        self._storage[first:last, start : start + len(names)].copy_(rows.detach())
        self._rows[group] = last

    def pending(self, group: str) -> torch.Tensor:
        """A device copy of ``group``'s pending rows, for inspection; no host sync."""
        start, names = self._columns[group]
        return self._storage[: self._rows[group], start : start + len(names)].clone()

    def reset(self) -> None:
        """Forget the pending rows (e.g. after a warm-up that must leave no metrics)."""
        self._rows = dict.fromkeys(self._columns, 0)

    def read(self) -> dict[str, float]:
        """Mean of each metric over its pending rows; one device-to-host transfer.

        The mean is taken on the host over the float32 values, exactly like the
        baseline runner averaged the per-update floats, so the logged numbers keep
        their meaning. Groups without rows contribute no keys.
        """
        return self.stage().read()

    def stage(self) -> StagedMetrics:
        """Take the pending rows for a later ``read`` and forget them, without waiting for the device.

        The rows are copied where they stand in the current stream (``StagedRead``), so the next
        iteration's updates may write the storage again before the host reads them.
        """
        used = max(self._rows.values())
        staged = StagedMetrics(
            self._columns, dict(self._rows), StagedRead(self._storage[:used]) if used else None
        )
        self.reset()
        return staged


class StagedMetrics:
    """One iteration's metric rows, taken by ``DeferredMetricsBuffer.stage``; ``read`` averages them."""

    def __init__(
        self,
        columns: Mapping[str, tuple[int, tuple[str, ...]]],
        rows: Mapping[str, int],
        values: StagedRead | None,
    ) -> None:
        self._columns, self._rows, self._values = columns, rows, values

    def read(self) -> dict[str, float]:
        if self._values is None:
            return {}
        host = self._values.tolist()
        metrics: dict[str, float] = {}
        for group, (start, names) in self._columns.items():
            rows = self._rows[group]
            if rows == 0:
                continue
            for offset, name in enumerate(names):
                metrics[name] = statistics.mean(host[r][start + offset] for r in range(rows))
        return metrics
