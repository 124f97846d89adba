#!/usr/bin/env python3
"""The documents' result tables, generated from the committed run JSONs (never typed by hand).

A block in README.md, a docs/ page or a results folder's README.md is delimited by ``<!-- table:KIND:FOLDER -->``
and ``<!-- /table -->``, where KIND is a table of ``bench_report`` (``throughput``, ``timings``, ``pace``, ``collectors``, ``env-step-split``, ``start``,
``start-phases``, ``compile-frames``), of
``headline_table`` (``headline``; ``front``, the front page's small tables, one per setting) or of
``mjwarp_report`` (``physics`` from run JSONs;
``agreement`` and ``env-profile`` from the study JSONs directly in FOLDER, ``sim-training`` from run JSONs of several
seeds per physics and collector, pooling ``+``-joined folders), ``parity`` (bench_parity; pooling ``+``-joined folders too) or ``ttr`` (time_to_reward) from a folder's run JSONs, ``preemption``
(preemption_report) from the stop / resume / kill matrix's case JSONs, ``kernel-build`` (mjwarp_kernel_build)
from the env start's Warp build JSONs, ``env-kernels`` (device_env_report) from ``device_env_bench.py --profile`` JSONs,
``env-ops``, ``env-sensors``, ``env-sensor-stages``, ``env-draws-ahead`` and ``env-fused-terms`` (device_env_report)
from ``device_env_check.py --mode ops``, ``--mode sensors``, ``--mode sensor-stages``, ``--mode draws-ahead`` and
``--mode fused-terms`` JSONs,
``env-forms`` (device_env_report) from ``device_env_bench.py --forms`` JSONs, ``learner-kernels`` (learner_profile_report) from
``learner_kernel_profile.py`` JSONs, ``numba-start`` (numba_kernels_start) from its JSONs,
``whole-run`` (whole_run) from ``whole_run.py``'s records and logs, ``whole-run-beside`` (whole_run) from its records
made with ``--beside``, ``mass-constants`` (device_env_report) from ``mass_constants_check.py`` JSONs, and FOLDER a
results folder relative to the project root; a table of run JSONs may pool several folders joined by ``+`` (the
headline's rows come from more than one study). ``python experiments/tables/readme_tables.py`` rewrites every block of
every such document from its folders; ``--check`` exits 1, naming the first stale block, when a document and
results disagree (the test suite runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / folder) for folder in ("bench", "evidence")]

import bench_parity  # noqa: E402
import bench_report  # noqa: E402
import device_env_report  # noqa: E402
import headline_table  # noqa: E402
import learner_profile_report  # noqa: E402
import mjwarp_kernel_build  # noqa: E402
import mjwarp_report  # noqa: E402
import numba_kernels_start  # noqa: E402
import preemption_report  # noqa: E402
import time_to_reward  # noqa: E402
import whole_run  # noqa: E402

PROJECT = Path(__file__).resolve().parents[2]
TABLES: dict[str, Callable[[Sequence[dict[str, Any]]], str]] = {
    "throughput": bench_report.throughput_table,
    "timings": bench_report.summary_table,
    "pace": bench_report.pace_table,
    "collectors": bench_report.collector_table,
    "env-step-split": bench_report.env_step_split_table,
    "start": bench_report.start_table,
    "start-phases": bench_report.start_phases_table,
    "compile-frames": bench_report.compile_frames_table,
    "headline": headline_table.headline_table,
    "front": headline_table.front_tables,
    "physics": mjwarp_report.physics_table,
}
#: Tables made from a folder of study JSONs rather than bench runs.
FOLDER_TABLES: dict[str, Callable[[Path], str]] = {
    "agreement": mjwarp_report.agreement_table,
    "env-profile": mjwarp_report.profile_table,
    "sim-training": mjwarp_report.sim_training_table,
    "parity": bench_parity.table,
    "ttr": time_to_reward.table,
    "preemption": preemption_report.table,
    "kernel-build": mjwarp_kernel_build.table,
    "warp-output-physics": mjwarp_kernel_build.physics_table,
    "env-kernels": device_env_report.kernel_split_table,
    "env-ops": device_env_report.op_count_table,
    "env-sensors": device_env_report.sensors_table,
    "env-sensor-stages": device_env_report.sensor_stages_table,
    "env-draws-ahead": device_env_report.draws_ahead_table,
    "env-fused-terms": device_env_report.fused_terms_table,
    "env-forms": device_env_report.forms_table,
    "env-graph-split": device_env_report.graph_split_table,
    "learner-beside-physics": device_env_report.learner_beside_table,
    "mjwarp-block-dim": mjwarp_report.block_dim_table,
    "learner-kernels": learner_profile_report.table,
    "whole-run": whole_run.table,
    "whole-run-beside": whole_run.beside_table,
    "episode-course": whole_run.course_table,
    "env-twin": device_env_report.twin_table,
    "mass-constants": device_env_report.mass_constants_table,
    "numba-start": numba_kernels_start.table,
}
#: Folder tables that pool ``+``-joined folders (a study of one arm beside the committed study of the other).
POOLED_FOLDER_TABLES = frozenset({"sim-training", "parity"})
BLOCK = re.compile(r"(<!-- table:(?P<kind>[\w-]+):(?P<folder>[^ ]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def render(kind: str, folder: str, root: Path = PROJECT) -> str:
    """The table's Markdown from the runs under ``root/folder`` (``+``-joined folders pooled); a missing kind or
    folder is an error."""
    if kind in FOLDER_TABLES:
        parts = folder.split("+")
        if len(parts) > 1 and kind not in POOLED_FOLDER_TABLES:
            raise ValueError(f"a {kind} table reads one folder, not {folder}")
        for part in parts:
            if not [*(root / part).glob("*.json*"), *(root / part).glob("runs/*.json*")]:
                raise ValueError(f"no JSON in {part}")
        paths = [root / part for part in parts]
        return FOLDER_TABLES[kind](paths[0] if len(paths) == 1 else paths) + "\n"
    if kind not in TABLES:
        raise ValueError(f"unknown table kind {kind!r} (known: {', '.join([*TABLES, *FOLDER_TABLES])})")
    runs = []
    for part in folder.split("+"):
        found = bench_report.load_runs(root / part)
        if not found:
            raise ValueError(f"no run JSON under {part}")
        runs.extend({**run, "_folder": part} for run in found)
    return TABLES[kind](runs) + "\n"


def regenerate(text: str, root: Path = PROJECT) -> str:
    """``text`` with every table block rebuilt from its results folder."""
    return BLOCK.sub(lambda m: m.group(1) + render(m["kind"], m["folder"], root) + m.group(5), text)


def stale_blocks(text: str, root: Path = PROJECT) -> list[str]:
    """``KIND:FOLDER`` of each block whose body differs from what its results give."""
    return [f"{m['kind']}:{m['folder']}" for m in BLOCK.finditer(text) if m["body"] != render(m["kind"], m["folder"], root)]


def documents(root: Path = PROJECT) -> list[Path]:
    """The front page, every docs/ page and every results folder's README: where generated tables may live."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "results").glob("*/README.md"))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a block is stale")
    args = parser.parse_args(argv)
    try:
        for doc in documents():
            text = doc.read_text(encoding="utf-8")
            if not args.check:
                doc.write_text(regenerate(text), encoding="utf-8")
                continue
            stale = stale_blocks(text)
            if stale:
                print(f"readme_tables: {doc.relative_to(PROJECT)} disagrees with results/ in {stale[0]} "
                      "(run `python experiments/tables/readme_tables.py`)", file=sys.stderr)
                return 1
    except ValueError as exc:
        print(f"readme_tables: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
