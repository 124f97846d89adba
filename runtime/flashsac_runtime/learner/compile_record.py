"""What Dynamo compiled in this process, graph by graph, for a run's record.

A start's compile is most of a new machine's wait, and it is many graphs: each objective, the post-step parameter
work, the statistics restores, the inference forward, and the backward graphs AOTAutograd compiles for them. torch
keeps a record of each compile (``torch._dynamo.utils.get_compilation_metrics``: the frame, its seconds, the
graph's size, why it compiled again); ``frame_compiles`` reads the ones made since a moment, so that a run can say
which graph took how long, cold in the compile-behind helper and warm at the swap, where the compile artifacts
serve it.
"""

from __future__ import annotations

import time
from typing import Any


def now_us() -> int:
    """A moment to read the compiles since (the clock torch stamps its records with)."""
    return time.time_ns() // 1000


def frame_compiles(since_us: int = 0) -> list[dict[str, Any]]:
    """Each compile torch recorded in this process from ``since_us`` on, in order: the frame's name, whether it is
    the forward (False: its backward, compiled by AOTAutograd), the seconds it took in all and in Inductor, the
    graph's operation count, why it recompiled (None: its first compile) and a failure's type. torch keeps its
    last 64 records."""
    from torch._dynamo.utils import get_compilation_metrics

    out = []
    for metric in get_compilation_metrics():
        if metric.start_time_us is None or metric.start_time_us < since_us or metric.is_runtime:
            continue
        seconds = None if metric.duration_us is None else metric.duration_us / 1e6
        out.append({"frame": metric.co_name, "forward": metric.is_forward is not False,
                    "compile_s": None if seconds is None else round(seconds, 3),
                    "inductor_s": None if metric.inductor_compile_time_s is None
                    else round(metric.inductor_compile_time_s, 3),
                    "graph_ops": metric.graph_op_count, "recompile_reason": metric.recompile_reason,
                    "failed": metric.fail_type})
    return out
