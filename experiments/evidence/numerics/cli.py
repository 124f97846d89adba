"""The command line of ``validate_numerics.py``: ``--mode cpu|gpu`` runs a mode and writes its report.

``--worker`` (hidden) is how the parent starts a worker: the same script, so the worker
gets the same ``sys.path`` (experiments/evidence/ and experiments/bench/) with its own root put first.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import bench_env  # VERSIONS.env, drift: one reader for the whole project

DESCRIPTION = "Numerical validation of the patched FlashSAC learner against unpatched unilab-rl 1.3.2."


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--baseline-root", type=Path)
    parser.add_argument("--patched-root", type=Path)
    parser.add_argument("--mode", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.worker and (args.baseline_root is None or args.patched_root is None or args.output is None):
        parser.error("--baseline-root, --patched-root and --output are required")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        from .worker import worker_main

        worker_main(args.root, args.data, args.config, args.out)
        return 0
    import torch

    from .modes import cpu_checks, gpu_checks, undeclared_checks

    versions = bench_env.PINS
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="validate_numerics_") as tmp:
        run = cpu_checks if args.mode == "cpu" else gpu_checks
        checks, measurements = run(args.baseline_root, args.patched_root, Path(tmp))
    undeclared = undeclared_checks(checks)
    if undeclared:
        raise RuntimeError(f"checks without a declared gate (numerics.modes.CHECK_GATES): {undeclared}")
    # Every entry under checks is a gate that can fail; what was measured is reported apart.
    passed = bool(checks) and all(item["passed"] is True for item in checks.values())
    device = torch.cuda.get_device_name(0) if args.mode == "gpu" and torch.cuda.is_available() else "cpu"
    report = {
        "passed": passed,
        "mode": args.mode,
        "device": device,
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "pinned": {k: versions.get(k) for k in ("TORCH_VERSION", "UNILAB_RL_BASE_VERSION")},
        "drift": bench_env.runtime_drift(versions, torch.__version__, None if args.mode == "cpu" else device),
        "baseline_root": str(args.baseline_root),
        "patched_root": str(args.patched_root),
        "seconds": round(time.perf_counter() - started, 1),
        "checks": checks,
        "measurements": measurements,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(json.dumps({"passed": passed, "output": str(args.output)}))
    return 0 if passed else 1
