"""Device values read on the host later, without waiting for the device now.

The device collector's host runs one iteration ahead of the device (``DeviceCollectorRunner``): it queues
iteration t+1's work before it reads iteration t's metrics and episode statistics, so the GPU never idles
while the host logs. Those values must be the ones the buffers held where iteration t ended in the stream,
not what later kernels leave in the same buffers. ``StagedRead`` takes them there: a non-blocking copy into
fresh page-locked host memory on the current stream, then an event. ``tolist`` waits for that event alone,
not for the work queued after it. On a CPU device the copy is made at once.
"""

from __future__ import annotations

from typing import Any

import torch


class StagedRead:
    """The values of ``tensor`` at this point of the current stream, for the host to read later."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self._event: torch.cuda.Event | None = None
        if tensor.device.type == "cuda":
            self._host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            self._host.copy_(tensor.detach(), non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(tensor.device))
        else:
            self._host = tensor.detach().to("cpu", copy=True)

    def tolist(self) -> Any:
        """The staged values as Python numbers (waits until the copy is done)."""
        if self._event is not None:
            self._event.synchronize()
        return self._host.tolist()
