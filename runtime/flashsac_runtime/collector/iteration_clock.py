"""Where one iteration of the in-process device collector spends its time, and its host syncs.

On CUDA the host runs ahead of the device, so host clocks around each phase
would time kernel launches, not work, unless every phase ended in a
synchronization, which the device collector exists to avoid. Phase boundaries
are CUDA events on the current stream instead, taken with the iteration
(``take``) and resolved once its work is done, while the clock times the next
one; elsewhere (CPU) every operation is synchronous and the host clock times
the work itself.

Host syncs are counted by construction: the loop calls ``count_sync`` at every
point where it waits for the device (a read of a device value, a
synchronization), so the count is the same on CPU and CUDA.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

#: A phase boundary: a CUDA event on the stream (CUDA), the host clock in seconds (CPU).
Mark = torch.cuda.Event | float


class IterationClock:
    """Laps of named phases within one iteration, and the iteration's host sync count."""

    def __init__(self, device: torch.device) -> None:
        self._device = torch.device(device)
        self._events = self._device.type == "cuda"
        self._marks: list[tuple[str, Mark]] = []
        self.host_syncs = 0

    def start(self) -> None:
        """Begin an iteration: no laps, no syncs yet."""
        self._marks = [("", self._now())]
        self.host_syncs = 0

    def lap(self, phase: str) -> None:
        """The time since the previous lap (or the start) belongs to ``phase``."""
        self._marks.append((phase, self._now()))

    def count_sync(self, count: int = 1) -> None:
        self.host_syncs += int(count)

    def take(self) -> IterationLaps:
        """This iteration's laps and sync count, kept for reading after its work is done on the device (the
        runner reads them an iteration later, while the clock times the next one)."""
        return IterationLaps(self._marks, self.host_syncs)

    def _now(self) -> Mark:
        if not self._events:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self._device))
        return event


def overlap_ms(reference: Mark, first: tuple[Mark, Mark], second: tuple[Mark, Mark]) -> float:
    """How long two spans of marks ran at once, in milliseconds: on CUDA two streams' spans (events of one device
    share its clock), each placed by its time after ``reference``, a mark taken before either began."""

    def after(mark: Mark) -> float:
        if isinstance(mark, float) and isinstance(reference, float):
            return (mark - reference) * 1000.0
        return float(reference.elapsed_time(mark))  # type: ignore[union-attr]

    begin = max(after(first[0]), after(second[0]))
    end = min(after(first[1]), after(second[1]))
    return max(end - begin, 0.0)


class IterationLaps:
    """One iteration's laps, taken from its ``IterationClock``."""

    def __init__(self, marks: list[tuple[str, Mark]], host_syncs: int) -> None:
        self._marks = marks
        self.host_syncs = host_syncs

    @property
    def start(self) -> Mark:
        """The iteration's first mark (``IterationClock.start``)."""
        return self._marks[0][1]

    def span(self, phase: str) -> tuple[Mark, Mark] | None:
        """The marks that begin and end the first lap of ``phase``; None without one."""
        for (_, begin), (name, end) in zip(self._marks, self._marks[1:]):
            if name == phase:
                return begin, end
        return None

    def phases_ms(self) -> dict[str, float]:
        """Milliseconds per phase; on CUDA once the iteration's work is done (its events have completed)."""
        totals: defaultdict[str, float] = defaultdict(float)
        for (_, begin), (phase, end) in zip(self._marks, self._marks[1:]):
            if isinstance(begin, float) and isinstance(end, float):
                totals[phase] += (end - begin) * 1000.0
            else:
                totals[phase] += float(begin.elapsed_time(end))  # type: ignore[union-attr]
        return dict(totals)
