"""CUDA graph captures that leave torch usable when they fail.

torch's ``CUDAGraph.capture_end`` raises at a failed end of the stream capture before it tells its caching
allocator that the capture's allocations are over, and ``torch.cuda.graph`` then skips restoring the current
stream. The allocator goes on counting a capture under way: it defers every later free of memory another stream
used (memory that never comes back), and aborts the process at its next event sweep (``empty_cache``, or the
release of cached blocks before an out-of-memory error; a lent H200 with torch 2.11 showed the abort after a
device env capture failed). The paths that fall back to eager after a failed capture would go on in that state;
``capture`` closes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


@contextlib.contextmanager
def capture(graph: torch.cuda.CUDAGraph, **kwargs: Any) -> Iterator[None]:
    """``torch.cuda.graph(graph, **kwargs)`` into a memory pool of its own, closed again when the capture fails:
    the pool ended and released, and the stream that was current before it current again."""
    pool = torch.cuda.graph_pool_handle()
    device = torch.cuda.current_device()
    current = torch.cuda.current_stream(device)
    try:
        with torch.cuda.graph(graph, pool=pool, **kwargs):
            yield
    except BaseException:
        close_failed_capture(device, pool, current)
        raise


def close_failed_capture(device: int, pool: tuple[int, int], current: torch.cuda.Stream) -> None:
    """End and release the failed capture's ``pool`` in the allocator (where torch had ended it, ending it again is
    refused and the pool is left to torch), and make ``current`` the current stream again."""
    try:
        torch._C._cuda_endAllocateToPool(device, pool)  # noqa: SLF001
    except RuntimeError:
        pass
    else:
        torch._C._cuda_releasePool(device, pool)  # noqa: SLF001
    torch.cuda.set_stream(current)
