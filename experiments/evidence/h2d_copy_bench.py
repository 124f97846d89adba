#!/usr/bin/env python3
"""Times the replay's native H2D submit against the PyTorch pinned async copy, for one tick, on a CUDA GPU.

Why: the replay transfer builds its native H2D extension only on request (uni_rl 0013)
(``FLASHSAC_NATIVE_H2D=1``): its JIT build cost about 20 s on each new machine. This measures what the opt-in
buys. One tick is one ingress slot of uni_rl's real ``ReplayBuffer`` (``num_envs`` rows of its packed layout
at G1 Walk Flat's sizes), made page-locked by the real transfer backend, and copied to a device tensor on a
side stream as the pipeline's span copy does: through the extension's ``submit_h2d`` or through
``Tensor.copy_(non_blocking=True)``. The two alternate, their order flipped every repeat; per copy the host's
submit time and the device's copy time (CUDA events). Also recorded: the default backend's choice and that it
built nothing, the extension's JIT build time in a fresh extension folder (what a new machine pays), and
whether both paths copied the source's bytes exactly. Run with the overlay first on ``PYTHONPATH``::

    experiments/evidence/h2d_copy_bench.py --output h2d_copy.json [--repeats 200]

No CUDA device: one line on stderr, exit 2. Exit 1 when the default path built the extension, the opt-in
could not, or a path copied other bytes than its source.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROG = "h2d_copy_bench"
#: G1 Walk Flat's sizes as the runner reads them from the env (get_env_dims; tests/test_native_h2d.py checks them).
G1_WALK_FLAT = {"obs_dim": 98, "critic_obs_dim": 101, "action_dim": 29}
#: The report's setting and UniLab's default (the tree's G1 task config).
SETTINGS = {"report": 256, "unilab-default": 4096}
PATHS = ("native", "torch")
WARMUP = 10


def stats(values: list[float]) -> dict[str, float]:
    """Median, mean and p90 of per-copy times (ms)."""
    ordered = sorted(values)
    return {"median_ms": statistics.median(ordered), "mean_ms": statistics.fmean(ordered),
            "p90_ms": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]}


def measure(torch: Any, backend: Any, num_envs: int, repeats: int) -> dict[str, Any]:
    """Both paths on one tick of ``num_envs`` rows, alternating; the bytes each copied checked last."""
    from uni_rl.ipc.replay_buffer import ReplayBuffer

    replay = ReplayBuffer(capacity=num_envs, obs_dim=G1_WALK_FLAT["obs_dim"], action_dim=G1_WALK_FLAT["action_dim"],
                          device="cuda", ingress_slot_rows=num_envs, critic_dim=G1_WALK_FLAT["critic_obs_dim"])
    source = replay._ingress_slots[0]
    backend.register_host_slots([source])
    source.copy_(torch.randn(source.shape, generator=torch.Generator().manual_seed(num_envs)))
    stream = torch.cuda.Stream()
    targets = {path: torch.empty(source.shape, dtype=source.dtype, device="cuda") for path in PATHS}

    def submit(path: str) -> tuple[float, float]:
        """One copy on the side stream, waited for: (the host's submit time, the device's copy time) in ms."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record()
            begin = time.perf_counter_ns()
            if path == "native":
                backend.native_submit(targets[path], source, stream.stream_id)
            else:
                targets[path].copy_(source, non_blocking=True)
            host_ms = (time.perf_counter_ns() - begin) / 1e6
            end.record()
        end.synchronize()
        return host_ms, start.elapsed_time(end)

    samples: dict[str, dict[str, list[float]]] = {p: {"submit_ms": [], "copy_ms": []} for p in PATHS}
    for i in range(WARMUP + repeats):
        for path in PATHS if i % 2 == 0 else PATHS[::-1]:
            host_ms, device_ms = submit(path)
            if i >= WARMUP:
                samples[path]["submit_ms"].append(host_ms)
                samples[path]["copy_ms"].append(device_ms)
    same = {}
    for path in PATHS:
        targets[path].fill_(float("nan"))
        torch.cuda.synchronize()  # the fill (default stream) lands before the side stream's copy
        submit(path)
        same[path] = bool(torch.equal(targets[path].cpu(), source))
    result: dict[str, Any] = {"num_envs": num_envs, "storage_width": replay.storage_width,
                              "bytes_per_copy": source.numel() * source.element_size(), "repeats": repeats,
                              "pinned": bool(source.is_pinned()), "bytes_equal": same}
    for path in PATHS:
        result[path] = {field: stats(values) for field, values in samples[path].items()}
    result["ratio_native_over_torch"] = {
        field: result["native"][field]["median_ms"] / result["torch"][field]["median_ms"]
        for field in ("submit_ms", "copy_ms")}
    return result


def run(args: argparse.Namespace) -> int:
    import torch

    if not torch.cuda.is_available():
        print(f"{PROG}: error: no CUDA device (this times host-to-device copies on a GPU)", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="torch-extensions-"))  # empty: the build a new machine pays
    os.environ["TORCH_EXTENSIONS_DIR"] = str(folder)
    from uni_rl.ipc.replay_pipelines import native_h2d
    from uni_rl.ipc.replay_pipelines.transfer.cuda_like import CudaLikeReplayTransferBackend

    device = torch.device("cuda")
    os.environ.pop(native_h2d.OPT_IN_ENV, None)
    begin = time.perf_counter()
    default = CudaLikeReplayTransferBackend(device=device, ring_depth=2)
    default_record = {"h2d_copy": default.h2d_submitter, "reason": default.h2d_submitter_reason,
                      "setup_s": time.perf_counter() - begin, "built": any(folder.iterdir())}
    default.close()
    os.environ[native_h2d.OPT_IN_ENV] = "1"
    begin = time.perf_counter()
    backend = CudaLikeReplayTransferBackend(device=device, ring_depth=2)
    build_s = time.perf_counter() - begin
    payload: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
        "g1_walk_flat": G1_WALK_FLAT, "default": default_record,
        "opt_in": {"h2d_copy": backend.h2d_submitter, "reason": backend.h2d_submitter_reason,
                   "jit_build_s": build_s, "extension_folder": str(folder)},
    }
    failures = ["the default path built the extension"] if default_record["built"] else []
    if backend.native_submit is None:
        failures.append(f"the native extension did not load: {backend.h2d_submitter_reason}")
    else:
        payload["settings"] = {name: measure(torch, backend, envs, args.repeats) for name, envs in SETTINGS.items()}
        failures += [f"{name}: the {path} path copied other bytes than its source"
                     for name, result in payload["settings"].items()
                     for path, same in result["bytes_equal"].items() if not same]
    backend.close()
    payload["failures"] = failures
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    for name, result in payload.get("settings", {}).items():
        ratio = result["ratio_native_over_torch"]
        print(f"{name} ({result['num_envs']} envs, {result['bytes_per_copy']} B): submit native "
              f"{result['native']['submit_ms']['median_ms']:.4f} / torch {result['torch']['submit_ms']['median_ms']:.4f} ms "
              f"(x{ratio['submit_ms']:.2f}), copy native {result['native']['copy_ms']['median_ms']:.4f} / torch "
              f"{result['torch']['copy_ms']['median_ms']:.4f} ms (x{ratio['copy_ms']:.2f})")
    print(f"JIT build {build_s:.1f} s; default: {default_record['h2d_copy']} ({default_record['reason']}); wrote {args.output}")
    for failure in failures:
        print(f"{PROG}: error: {failure}", file=sys.stderr)
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, required=True, help="the JSON to write")
    parser.add_argument("--repeats", type=int, default=200, help="timed copies per path and setting (default 200)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
