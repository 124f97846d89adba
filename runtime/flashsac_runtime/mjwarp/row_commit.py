"""Row-wise reset commits for the ``mjwarp`` backend (FlashSAC overlay).

A reset of ``k`` rows out of ``N`` worlds used to move whole ``(N, ...)`` arrays: the randomized actuator gains
and the state went up in full, a forward ran over every world, and the host caches came back in full. At 4096
G1 worlds with ~100 reset rows per step that cost more than the physics step itself. Here only the reset rows
move: their values go up as a compact block and a kernel scatters them into the full device arrays; the
reset-time forward runs in the bounded scratch ``Data`` over a scratch ``Model`` whose per-world fields are the
reset rows' own rows of the main model (gathered on the device), so a world's forward reads exactly the
model values it reads in the main ``Data``.

Imported only when an mjwarp backend is built (``warp`` is an optional dependency).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import warp as wp

from unisim.backend.mjwarp.randomization import EXPANDED_MODEL_FIELDS, OPTION_VEC_FIELDS


@wp.kernel(enable_backward=False)
def _gather_rows(
    source: wp.array2d(dtype=wp.float32),
    rows: wp.array(dtype=wp.int32),
    target: wp.array2d(dtype=wp.float32),
):
    row, column = wp.tid()
    target[row, column] = source[rows[row], column]


@wp.kernel(enable_backward=False)
def _scatter_rows(
    source: wp.array2d(dtype=wp.float32),
    rows: wp.array(dtype=wp.int32),
    target: wp.array2d(dtype=wp.float32),
):
    row, column = wp.tid()
    target[rows[row], column] = source[row, column]


def row_view(array: Any) -> Any:
    """The array as ``(rows, columns)`` float32 without a copy (vector dtypes spread into columns)."""
    scalar = getattr(array.dtype, "_wp_scalar_type_", array.dtype)
    if scalar is not wp.float32:
        raise TypeError(f"row-wise reset supports float32 arrays, got {array.dtype}")
    flat = array if array.dtype is wp.float32 else array.view(wp.float32)
    return flat.reshape((array.shape[0], -1))


class ScratchModel:
    """A ``Model`` for the scratch ``Data``: per-world fields hold the reset rows' rows of the main model.

    MuJoCo Warp kernels read a per-world field as ``field[worldid % field.shape[0]]``. The scratch ``Data`` has
    ``capacity`` worlds, so with the main model's ``(N, ...)`` fields scratch world ``i`` would read main world
    ``i``'s gains, masses, frictions. Each per-world field (the expanded set, the option's gravity) gets a
    ``(capacity, ...)`` array here, filled by ``gather`` from the main model at ``rows``; all other fields are
    shared with the main model. ``scatter`` writes reset rows into the main ``(N, ...)`` arrays at the same rows.
    """

    def __init__(self, model: Any, num_worlds: int, capacity: int) -> None:
        self.model = copy.copy(model)
        self.model.opt = copy.copy(model.opt)
        self._pairs: list[tuple[Any, Any]] = []
        for owner, source_owner, names in (
            (self.model, model, EXPANDED_MODEL_FIELDS),
            (self.model.opt, model.opt, OPTION_VEC_FIELDS),
        ):
            for name in names:
                source = getattr(source_owner, name)
                if source.ndim == 0 or source.shape[0] != num_worlds:
                    continue
                target = wp.zeros((capacity, *source.shape[1:]), dtype=source.dtype, device=source.device)
                setattr(owner, name, target)
                if source.size:
                    self._pairs.append((row_view(source), row_view(target)))
        self.rows = wp.zeros(capacity, dtype=wp.int32, device=model.body_mass.device)
        self._rows_host = np.zeros(capacity, dtype=np.int32)

    def set_rows(self, rows: np.ndarray) -> None:
        """Upload the reset rows (the unused tail repeats the first row: any valid row serves)."""
        count = len(rows)
        self._rows_host[:count] = rows
        self._rows_host[count:] = rows[0]
        self.rows.assign(self._rows_host)

    def gather(self) -> None:
        """Copy the rows' per-world model values into the scratch fields (capturable: fixed addresses)."""
        for source, target in self._pairs:
            wp.launch(_gather_rows, dim=target.shape, inputs=[source, self.rows, target], device=target.device)

    def scatter(self, target: Any, values: np.ndarray) -> None:
        """Row ``i`` of ``values`` lands in row ``rows[i]`` of the ``(N, ...)`` device array ``target``.

        The same device row indices as :meth:`gather` (one upload per reset, :meth:`set_rows`).
        """
        view = row_view(target)
        block = np.ascontiguousarray(values, dtype=np.float32).reshape(len(values), view.shape[1])
        if not block.size:
            return
        source = wp.array(block, dtype=wp.float32, device=target.device)
        wp.launch(_scatter_rows, dim=block.shape, inputs=[source, self.rows, view], device=target.device)
