"""The learner's kernel profiles as a table (``readme_tables.py`` kind ``learner-kernels``).

Reads the JSONs ``learner_kernel_profile.py`` writes, without importing it (it builds a learner: torch, the
tree's config); the kernel kinds are the ones the JSONs name, in the order of the first.
"""

from __future__ import annotations

import json
from pathlib import Path


def table(folder: Path) -> str:
    """One row per profile JSON of ``folder``: the learner's path, its timed iteration, its kernels and their GPU
    time per iteration, each kind's count and GPU time, and the largest kernel."""
    records = [(path.stem, json.loads(path.read_text(encoding="utf-8"))) for path in sorted(folder.glob("*.json"))]
    kinds = list(dict.fromkeys(kind for _, data in records for kind in data["profile"]["by_kind"]))
    rows = ["| record | setting · schedule · batch | path | iteration (ms, median) | kernels per iteration | "
            "kernel GPU ms per iteration | " + " | ".join(f"{kind}: count, GPU ms" for kind in kinds)
            + " | largest kernel (per iteration, GPU µs) |", "|---" * (7 + len(kinds)) + "|"]
    for name, data in records:
        prof = data["profile"]
        top = prof["largest"][0]
        split = " | ".join(
            f"{prof['by_kind'][kind]['per_iteration']:.0f}, {prof['by_kind'][kind]['us_per_iteration'] / 1e3:.2f}"
            if kind in prof["by_kind"] else "–" for kind in kinds)
        path = "whole-iteration CUDA graph" if data["whole_iteration_graph"] else "per update"
        rows.append(f"| {name} | {data['setting']} · {data['schedule']} · {data['batch_size']} | {path} | "
                    f"{data['iteration_ms_median']:.2f} | {prof['kernels_per_iteration']:.0f} | "
                    f"{prof['us_per_iteration'] / 1e3:.2f} | {split} | `{top['name'][:70]}` "
                    f"({top['per_iteration']:.0f}, {top['us_per_iteration']:.0f}) |")
    return "\n".join(rows)
