"""Counts of what a device env step does: host reads, ATen operations by env method, Warp kernel launches.

The checks use them both ways: as gates (no host read in a step that becomes a CUDA graph, no draw inside the
step's graph) and as figures (compute operations and launches per step, which say what a graphed step costs).
"""

from __future__ import annotations

import collections
import dataclasses
import traceback
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class HostReads(torch.overrides.TorchFunctionMode):
    """Records the torch calls of a block that read a tensor on the host or copy host data to the device."""

    READS = {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "nonzero"}
    INDEXING = {"__getitem__", "__setitem__", "index_put_", "index_put"}
    FROM_HOST = {"tensor", "as_tensor", "from_numpy"}

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(func, "__name__", str(func))
        if name in self.READS or name in self.FROM_HOST:
            self.found.append(name)
        elif name in self.INDEXING and len(args) > 1:
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            for item in index:
                if isinstance(item, torch.Tensor) and (item.dim() == 0 or item.dtype == torch.bool):
                    self.found.append(f"{name} with a {'0-d' if item.dim() == 0 else 'boolean'} tensor index")
        return func(*args, **(kwargs or {}))


def held_storage(root: Any, path: str = "state") -> dict[str, int]:
    """Each tensor reachable from ``root`` (a device env's state) through dataclass fields, dicts, lists and
    tuples, by its path: the address of its storage.

    A step's CUDA graph reads and writes the addresses it saw at its capture, so a state the next step reads must
    stay in the same storage from step to step (written into, never bound anew): two of these maps, before and after
    steps, must be equal (``rebound``)."""
    if isinstance(root, torch.Tensor):
        return {path: root.untyped_storage().data_ptr()}
    if dataclasses.is_dataclass(root) and not isinstance(root, type):
        items = ((f.name, getattr(root, f.name)) for f in dataclasses.fields(root))
    elif isinstance(root, dict):
        items = ((str(key), value) for key, value in root.items())
    elif isinstance(root, (list, tuple)):
        items = ((str(i), value) for i, value in enumerate(root))
    else:
        return {}
    found: dict[str, int] = {}
    for name, value in items:
        found.update(held_storage(value, f"{path}.{name}"))
    return found


def rebound(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """The paths of ``held_storage`` whose storage changed, appeared or went between two maps."""
    return sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))


#: The device env's methods an ATen operation is counted under (the innermost one on the stack), in step order.
PARTS = ("step", "_terminate", "_reward", "_advance_command", "_observe", "_reset_rows", "_update_curriculum",
         "_reset_state", "_resample_command", "reset_rows", "forward_rows", "_draw_command", "_draw_noise",
         "_draw_reset", "_draw_step", "_draw_next", "_take_next")
#: The parts that take draws and work out what follows from them alone (with draws ahead, beside the step, with
#: the copy into the buffer the next step reads).
DRAW_PARTS = ("_draw_next", "_draw_step", "_draw_command", "_draw_noise", "_draw_reset", "_reset_state")


class OpCount(TorchDispatchMode):
    """Counts the ATen operations run inside it by env method (``PARTS``): compute operations and views apart."""

    def __init__(self) -> None:
        super().__init__()
        self.compute: collections.Counter[str] = collections.Counter()
        self.views: collections.Counter[str] = collections.Counter()
        self.by_op: collections.Counter[str] = collections.Counter()
        self.in_step_graph = False  # set while the body of the env step's CUDA graph runs (``mark_step_graph``)
        self.draws_in_step_graph = 0  # compute operations of a draw part run there

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        names = [frame.name for frame in traceback.extract_stack(limit=48)]
        part = next((name for name in reversed(names) if name in PARTS), "outside the env's methods")
        view = any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)
        (self.views if view else self.compute)[part] += 1
        if not view:
            self.by_op[func.overloadpacket.__name__] += 1
            self.draws_in_step_graph += self.in_step_graph and part in DRAW_PARTS
        return func(*args, **(kwargs or {}))


def mark_step_graph(dev: Any, count: OpCount) -> None:
    """Has ``count`` know when the body the env records as its step's CUDA graph (``_step_body``) runs."""
    body = dev._step_body  # noqa: SLF001

    def step_graph() -> None:
        count.in_step_graph = True
        try:
            body()
        finally:
            count.in_step_graph = False

    dev._step_body = step_graph  # noqa: SLF001


def warp_arrays(dev: Any) -> dict[str, Any]:
    """Every array of the env's MuJoCo Warp data, by field name."""
    import warp as wp

    data = dev.sim._data  # noqa: SLF001 - the physics data the env steps
    return {name: value for name, value in vars(data).items() if isinstance(value, wp.array)}


class WarpLaunches:
    """Warp kernel launches while active (every MuJoCo Warp module calls ``warp.launch`` by attribute): their count,
    and with ``dev`` the names of that env's MuJoCo Warp data arrays they write (each launch names what it writes
    in its ``outputs``)."""

    def __init__(self, dev: Any = None) -> None:
        self.count = 0
        self.written: set[str] = set()
        self._names = {array.ptr: name for name, array in warp_arrays(dev).items()} if dev is not None else {}

    def __enter__(self) -> WarpLaunches:
        import warp as wp

        self._wp, self._launch = wp, wp.launch

        def launch(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            for array in kwargs.get("outputs") or ():
                name = self._names.get(getattr(array, "ptr", None))
                if name is not None:
                    self.written.add(name)
            return self._launch(*args, **kwargs)

        wp.launch = launch
        return self

    def __exit__(self, *exc: object) -> None:
        self._wp.launch = self._launch
