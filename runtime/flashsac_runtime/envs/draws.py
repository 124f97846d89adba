"""Random draws of the device env, from one of two sources with one call sequence.

UniLab 1.3.2's NumPy env draws every random number from one ``numpy.random.Generator`` (``env.rng``): reset
states, pd gains, commands, gait phases, motion frames and observation noise, each call sized by the rows it serves. The device
env makes the same calls, in the same order, through a draw source:

- ``TorchDraws`` (training): every call draws for all ``N`` rows on the device with a torch generator and the
  caller keeps the masked rows (``torch.where``). No host sync, fixed shapes.
- ``NumpyDraws`` (sameness tests): the calls go to a NumPy generator seeded like ``env.rng``, each sized by the
  masked rows exactly as the NumPy env sizes it, and are scattered into the masked rows. Fed the same seed, the
  device env then sees the NumPy env's numbers, so a trajectory can be compared step by step.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch


class Draws(Protocol):
    """Uniform draws for the rows of ``rows`` (a bool mask of shape ``(N,)``); other rows are unspecified."""

    def uniform(self, low: float | np.ndarray, high: float | np.ndarray, rows: torch.Tensor,
                width: int | None = None) -> torch.Tensor:
        """float64 ``low + (high - low) * U[0, 1)`` of shape ``(N,)`` or ``(N, width)``; ``low``/``high`` may be
        per-column arrays of length ``width`` (NumPy's broadcasting)."""
        ...

    def random_f32(self, rows: torch.Tensor, width: int) -> torch.Tensor:
        """float32 ``U[0, 1)`` of shape ``(N, width)`` (NumPy's ``Generator.random(dtype=float32)``)."""
        ...

    def integers(self, high: int, rows: torch.Tensor) -> torch.Tensor:
        """int32 uniform integers in ``[0, high)`` of shape ``(N,)`` (NumPy's ``Generator.integers(0, high,
        dtype=int32)``)."""
        ...


class TorchDraws:
    """Draws for every row on the device from one torch generator (no host sync, CUDA-graph safe)."""

    #: The draws can be recorded in a CUDA graph (with ``generator`` registered in it).
    graph_safe = True

    def __init__(self, num_envs: int, device: torch.device, seed: int) -> None:
        self._n = num_envs
        self._device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(int(seed))
        self._constants: dict[bytes, torch.Tensor] = {}

    def _bound(self, value: float | np.ndarray) -> float | torch.Tensor:
        """A range bound as the arithmetic wants it: a Python float, or a device copy made once per value."""
        if np.ndim(value) == 0:
            return float(value)
        array = np.asarray(value, dtype=np.float64)
        key = array.tobytes() + str(array.shape).encode()
        if key not in self._constants:
            self._constants[key] = torch.as_tensor(array, device=self._device)
        return self._constants[key]

    def uniform(self, low: float | np.ndarray, high: float | np.ndarray, rows: torch.Tensor,
                width: int | None = None) -> torch.Tensor:
        del rows
        shape = (self._n,) if width is None else (self._n, width)
        u = torch.rand(shape, dtype=torch.float64, device=self._device, generator=self.generator)
        lo, hi = self._bound(low), self._bound(high)
        return lo + (hi - lo) * u

    def random_f32(self, rows: torch.Tensor, width: int) -> torch.Tensor:
        del rows
        return torch.rand((self._n, width), dtype=torch.float32, device=self._device, generator=self.generator)

    def integers(self, high: int, rows: torch.Tensor) -> torch.Tensor:
        del rows
        return torch.randint(0, high, (self._n,), dtype=torch.int32, device=self._device, generator=self.generator)


class NumpyDraws:
    """UniLab's own NumPy draws, row-sized like the NumPy env's calls, scattered into the masked rows.

    Reads the mask on the host (a sync per call): for tests, never for training.
    """

    graph_safe = False

    def __init__(self, rng: np.random.Generator, device: torch.device) -> None:
        self.rng = rng
        self._device = device

    def _scatter(self, values: np.ndarray, rows: torch.Tensor, dtype: np.dtype) -> torch.Tensor:
        ids = np.flatnonzero(rows.detach().cpu().numpy())
        full = np.zeros((rows.shape[0], *values.shape[1:]), dtype=dtype)
        full[ids] = values
        return torch.from_numpy(full).to(self._device)

    def uniform(self, low: float | np.ndarray, high: float | np.ndarray, rows: torch.Tensor,
                width: int | None = None) -> torch.Tensor:
        count = int(rows.sum().item())
        size = (count,) if width is None else (count, width)
        return self._scatter(self.rng.uniform(low, high, size=size), rows, np.float64)

    def random_f32(self, rows: torch.Tensor, width: int) -> torch.Tensor:
        count = int(rows.sum().item())
        return self._scatter(self.rng.random((count, width), dtype=np.float32), rows, np.float32)

    def integers(self, high: int, rows: torch.Tensor) -> torch.Tensor:
        count = int(rows.sum().item())
        return self._scatter(self.rng.integers(0, high, count, dtype=np.int32), rows, np.int32)
