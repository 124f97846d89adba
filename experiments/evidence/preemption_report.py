#!/usr/bin/env python3
"""The stop / resume / kill matrix as a table, from the case JSONs ``preemption_matrix.py`` writes.

``readme_tables.py`` renders it in a results README (``<!-- table:preemption:FOLDER -->``); every cell comes
from one case JSON of FOLDER, so a case that failed shows its error instead of a figure.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

#: The matrix's order: settings, collectors, then the faults as ``preemption_matrix.py`` names them.
ORDER = {name: index for index, name in enumerate(
    ("report", "unilab-default", "host", "device", "sigterm", "sigint", "second-signal", "group-sigterm", "kill-collector", "resume"))}


#: The phases in a run's order (``preemption_matrix.PHASES``).
PHASE_ORDER = {name: index for index, name in enumerate(
    ("before-first", "compile", "swap", "after-swap", "checkpoint-write", "iteration", "resumed"))}


def _cases(folder: Path) -> list[dict[str, Any]]:
    cases = [json.loads(path.read_text(encoding="utf-8")) for path in folder.glob("*-*.json")]
    return sorted(cases, key=lambda c: (*(ORDER.get(c[key], 99) for key in ("setting", "collector", "fault")),
                                        PHASE_ORDER.get(c.get("phase", "iteration"), 99)))


def _outcome(case: dict[str, Any]) -> str:
    if "error" in case:
        return f"failed: {case['error']}"
    if case["fault"] == "resume":
        return (f"stop exit {case['stop_exit_code']}, resume exit {case['resume_exit_code']}; "
                f"{case['bitwise_equal_tensors']}/{case['tensors']} learner tensors bitwise equal to the "
                f"uninterrupted run's, largest difference {case['max_abs_difference']:.3g}")
    checkpoint = Path(case["last_checkpoint"]).name if case.get("last_checkpoint") else "none"
    if case.get("last_checkpoint_loads") is not None:
        checkpoint += " (loads)" if case["last_checkpoint_loads"] else " (does not load)"
    left = len(case["processes_left"])
    temporaries = ", ".join(case["temporaries_left"]) or "none"
    line = case["lines"][0].split("] ", 1)[-1] if case["lines"] else "(no line: the immediate exit)"
    line = re.sub(r"/\S*/(model_\d+\.pt)", r"\1", line)  # the run's own directory, not the machine's path
    return (f"exit {case['exit_code']} after {case['seconds_to_exit']:.1f} s; checkpoint {checkpoint}; "
            f"{left} processes left; temporaries left: {temporaries}; “{line}”")


def table(folder: Path) -> str:
    """One row per case: setting, collector, fault, the phase of the run it was sent in (where the folder's cases
    record phases: whether the run was in it) and what happened."""
    cases = _cases(folder)
    phased = any("phase" in case for case in cases)
    head = "| setting | collector | fault |" + (" phase (met) |" if phased else "") + " cases side by side | outcome |"
    rows = [head, "|---" * head.count(" | ") + "|---|"]
    for case in cases:
        phase = (f" {case.get('phase', 'iteration')} ({'yes' if case.get('phase_met', True) else 'no'}) |"
                 if phased else "")
        rows.append(f"| {case['setting']} | {case['collector']} | {case['fault']} |{phase} "
                    f"{case.get('concurrent_cases', 1)} | {_outcome(case)} |")
    return "\n".join(rows)
