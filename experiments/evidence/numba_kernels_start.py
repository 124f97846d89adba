#!/usr/bin/env python3
"""What the host's Numba step saves a G1 motion tracking run: the device env's build and first step, timed from a
cache emptied of UniLab's motion kernels (a fresh host) and from the cache the step fills (``make apply OFFLINE=``),
alternating, in one invocation.

Each round runs ``motion_device_env_check.py --steps 1`` from the tree's root (UniLab's own env and the device env
built on MuJoCo Warp, both stepped once: every kernel the run calls before its first iteration) as a child process
and times it from launch to exit; ``cold`` empties the kernels' cache first, ``warm`` runs
``offline.numba_kernels.compile_into`` first (not timed). Each run records the kernels the child compiled (cache
files it added). Run it from the project root on a tree with the G1 assets and the motion clip, overlay applied:

    python experiments/evidence/numba_kernels_start.py --tree <tree> --rounds 3 --output <file>.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT / "scripts"))

from offline import numba_kernels  # noqa: E402

CHECK = PROJECT / "experiments" / "evidence" / "motion_device_env_check.py"


def first_step(tree: Path, overlay: Path) -> dict[str, Any]:
    """One child from launch to exit, and the cache files it added."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(overlay), str(tree / "src"))), "CUDA_VISIBLE_DEVICES": "",
           "MUJOCO_GL": "disable", "HF_HUB_OFFLINE": "1", "UNISIM_MJWARP_ALLOW_CPU": "1", "OMP_NUM_THREADS": "1"}
    before, started = numba_kernels.cached(tree), time.monotonic()
    proc = subprocess.run([sys.executable, str(CHECK), "--steps", "1"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=900, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"numba_kernels_start: the check failed: {proc.stderr.strip().splitlines()[-1:]}")
    return {"seconds": seconds, "compiled": sorted(numba_kernels.cached(tree) - before)}


def machine() -> dict[str, Any]:
    """The CPU and the versions the times depend on."""
    from importlib import metadata

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    versions = {dist: metadata.version(dist) for dist in ("numba", "mujoco", "mujoco-warp", "warp-lang", "torch")}
    return {"cpu": cpu, "cpus_usable": len(os.sched_getaffinity(0)), "platform": platform.platform(),
            "python": platform.python_version(), "versions": versions}


def table(folder: Path) -> str:
    """Per study JSON of the folder: each mode's times from launch to exit, their median, the kernels compiled."""
    lines = ["| file | cache at launch | seconds from launch to exit, per round | median | kernels the run compiled |",
             "|---|---|---|---|---|"]
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("study") != "numba-kernels-start":
            continue
        for mode, label in (("cold", "empty (a fresh host)"), ("warm", "filled by the host's step")):
            done = record["runs"][mode]
            seconds = ", ".join(f"{r['seconds']:.1f}" for r in done)
            compiled = ", ".join(str(len([f for f in r["compiled"] if f.endswith(".nbi")])) for r in done)
            lines.append(f"| {path.name} | {label} | {seconds} | {record['median_seconds'][mode]:.1f} | {compiled} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--overlay", type=Path, default=PROJECT / "overlay")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    tree, overlay = args.tree.resolve(), args.overlay.resolve()
    runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
    for _ in range(args.rounds):
        for mode in ("cold", "warm"):
            for stale in (tree / numba_kernels.CACHE).glob("kernels.*.nb[ic]"):
                stale.unlink()
            if mode == "warm":
                runs[mode].append({"step": numba_kernels.compile_into(tree, overlay), **first_step(tree, overlay)})
            else:
                runs[mode].append(first_step(tree, overlay))
    summary = {mode: statistics.median(r["seconds"] for r in done) for mode, done in runs.items()}
    record = {"study": "numba-kernels-start", "rounds": args.rounds, "runs": runs, "median_seconds": summary,
              "machine": machine()}
    args.output.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
