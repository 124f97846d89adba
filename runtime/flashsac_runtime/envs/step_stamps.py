"""Where the device env's step spends its time, measured inside the step: the physics, the terms, the reset.

In training the step is one CUDA graph replayed on the env's stream, so the collector's events around it time the
whole step only. A CUDA event recorded inside the graph would be recorded again by the next replay, which the host
has already queued when it reads the iteration before (the device collector reads its results an iteration
behind): it could not read one step's event before the next step's replay re-recorded it. So the step writes its
own timestamps instead: a one-thread Warp kernel at each boundary writes the device's nanosecond clock
(``%globaltimer``) into a row of a small ring on the device, the row chosen by a step counter on the device, and
the last one stamps the row with the step's number. A replay never overwrites the rows of the steps before it
until the ring has gone round (``RING_ROWS`` steps), and the collector reads a copy of the ring taken at the end of
each iteration, with the iteration's other results (no host sync). On Warp's CPU device the kernels run in the
host's order as they are launched, so the host's clock at the launch is the boundary's time: the same kernel
writes it.

Each stamp is one launch of one thread, four per step: a few microseconds of a step of milliseconds, on the env's
stream only.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import warp as wp

#: The step's parts between its stamps, in order (the collector records each as ``<name>`` ms per step).
PARTS = ("env_physics", "env_terms", "env_reset")
#: Steps the ring holds: a read sees the last ``RING_ROWS`` steps (the collector steps one to a few per iteration).
RING_ROWS = 8
_ROWS = wp.constant(RING_ROWS)

_CLOCK = """
#if defined(__CUDA_ARCH__)
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    return (int64_t)now;
#else
    return host_ns;
#endif
"""


@wp.func_native(_CLOCK)
def _clock_ns(host_ns: wp.int64) -> wp.int64:
    """The device's nanosecond clock on CUDA; on the CPU, where kernels run as they are launched, the host's."""
    ...


@wp.kernel
def _stamp(ring: wp.array2d(dtype=wp.int64), counter: wp.array(dtype=wp.int64), column: int, last: int,
           host_ns: wp.int64):
    """Column ``column`` of the current step's row. The first stamp clears the row's step number, so that a row
    being written is never read as a whole one; ``last`` writes it, and moves the counter to the next row."""
    step = counter[0]
    row = int(step % wp.int64(_ROWS))
    if column == 1:
        ring[row, 0] = wp.int64(0)
    ring[row, column] = _clock_ns(host_ns)
    if last != 0:
        ring[row, 0] = step + wp.int64(1)
        counter[0] = step + wp.int64(1)


class StepStamps:
    """The ring of step timestamps (module docstring): row ``[step number, start, after the physics, after the
    terms, after the reset]`` in nanoseconds, step numbers from 1 (0: a row not written yet)."""

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        self._warp_device = str(wp.device_from_torch(self.device))
        self.ring = torch.zeros((RING_ROWS, len(PARTS) + 2), dtype=torch.int64, device=self.device)
        self._counter = torch.zeros(1, dtype=torch.int64, device=self.device)
        self._arrays = (wp.from_torch(self.ring), wp.from_torch(self._counter))

    @staticmethod
    def kernels() -> list[Any]:
        """Its Warp kernel, the same at every env count (it holds none): ``make wheelhouse`` builds it ahead."""
        return [_stamp]

    def start(self) -> None:
        self._launch(1)

    def after(self, part: str) -> None:
        """The end of ``part`` (of ``PARTS``): the last part's stamp closes the step's row."""
        column = PARTS.index(part) + 2
        self._launch(column, last=column == len(PARTS) + 1)

    def _launch(self, column: int, last: bool = False) -> None:
        """On Warp's current stream of the device (the env's stream)."""
        host_ns = time.perf_counter_ns() if self.device.type == "cpu" else 0
        wp.launch(_stamp, dim=1, inputs=[*self._arrays, column, int(last), wp.int64(host_ns)],
                  device=self._warp_device)

    @staticmethod
    def split_ms(ring: list[list[int]], after_step: int) -> tuple[dict[str, float], int]:
        """Milliseconds per step of each part (``PARTS``), averaged over the rows of steps after ``after_step`` in
        ``ring`` (a host copy of ``ring``, taken where no step is under way), and the last step number in it; no
        such row: no parts."""
        rows = [row for row in ring if row[0] > after_step]
        if not rows:
            return {}, after_step
        parts = {part: sum(row[index + 2] - row[index + 1] for row in rows) / len(rows) / 1e6
                 for index, part in enumerate(PARTS)}
        return parts, max(row[0] for row in rows)
