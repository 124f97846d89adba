#!/usr/bin/env python3
"""Markdown table of the collector CPU profiles in a results folder: one row per run group (`<group>-r<N>.json`),
the median over its runs of each phase's per-step mean, in ms (written by `collector_profile.py --mode profile`
or `collector_setconst_probe.py --mode profile`).

Run by hand on a results folder of such profiles (``python experiments/profile/collector_profile_report.py
RESULTS_DIR``); its table goes into that folder's README.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

COLUMNS = ("env_step_total_ms", "step_core_ms", "update_state_ms", "reset_done_ms", "reset_done_reset_call_ms",
           "set_state_pool_reset_ms", "apply_action_ms", "reset_done_count")


def table(folder: Path) -> str:
    groups: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("*-r*.json")):
        group = re.sub(r"-r\d+$", "", path.stem)
        groups.setdefault(group, []).append(json.loads(path.read_text()))
    rows = ["| run group | runs | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 2) + "|"]
    for group, runs in groups.items():
        cells = [f"{statistics.median(r['mean_ms'].get(c, 0.0) for r in runs):.2f}" for c in COLUMNS]
        rows.append(f"| {group} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: collector_profile_report.py RESULTS_DIR", file=sys.stderr)
        sys.exit(2)
    print(table(Path(sys.argv[1])))
