#!/usr/bin/env python3
"""A failed CUDA graph capture of the learner's graphed inference leaves torch usable (uni_rl 0016).

On a CUDA host, with the patched ``uni_rl`` first on ``PYTHONPATH`` (the overlay): builds a FlashSAC actor of G1
Walk Flat's dimensions and its ``GraphedExplorePolicy`` (the collector's action requests as one graph replay),
and breaks the capture on purpose (a host read inside the actor's forward, which a capture refuses). It holds
when the policy reports the failure and answers eagerly with finite outputs, the stream current before the
capture is current again, and the allocator's event sweep (``empty_cache``) passes after a round of allocations.
``--leave-open`` turns ``cuda_capture.close_failed_capture`` into a no-op: the control. It leaves the allocator
counting a capture under way, the state in which, on an H200 with torch 2.11, a failed device env capture
aborted the process at that sweep (``results/2026-12-05-h200-env-draws-sensors/`` in commit 44628292896f).

Prints one JSON; exit 0 when the check holds, 1 when it does not, 2 without CUDA (one line). A process the control
aborts prints nothing and exits with the signal's status.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_env_build import series_sha256, versions  # noqa: E402

#: G1 Walk Flat's actor: its observation width, the tree's hidden width and blocks, its action width.
OBS_DIM, HIDDEN_DIM, NUM_BLOCKS, ACTION_DIM = 98, 128, 2, 29


def check(leave_open: bool, num_envs: int) -> dict[str, Any]:
    from flashsac_runtime import cuda_capture
    from flashsac_runtime.learner.inference_graph import GraphedExplorePolicy
    from uni_rl.algos.flash_sac.network import FlashSACActor

    if leave_open:
        cuda_capture.close_failed_capture = lambda *_: None
    torch.manual_seed(0)
    actor = FlashSACActor(num_blocks=NUM_BLOCKS, input_dim=OBS_DIM, hidden_dim=HIDDEN_DIM, action_dim=ACTION_DIM,
                          device="cuda")
    forward = actor.get_mean_and_std

    def with_host_read(obs: torch.Tensor, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        mean, std = forward(obs, training=training)
        float(mean.sum())  # a host read: refused inside a capture
        return mean, std

    actor.get_mean_and_std = with_host_read  # type: ignore[method-assign]
    failures: list[str] = []
    policy = GraphedExplorePolicy(actor, failures.append)
    before = torch.cuda.current_stream()
    obs = torch.randn(num_envs, OBS_DIM, device="cuda")
    graphed = policy.mean_and_std(obs)
    stream_restored = torch.cuda.current_stream() == before
    with torch.no_grad():
        mean, std = forward(obs, training=False)
        finite = bool(torch.isfinite(mean).all() and torch.isfinite(std).all())
        for _ in range(20):  # allocations and frees after the failure, then the allocator's sweep
            forward(torch.randn(num_envs, OBS_DIM, device="cuda"), training=False)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return {"leave_open_control": leave_open, "failure": failures[0].splitlines()[0] if failures else None,
            "served_eagerly": graphed is None, "finite": finite, "stream_restored": stream_restored,
            "holds": bool(failures) and graphed is None and finite and stream_restored}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--leave-open", action="store_true", help="the negative control")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("capture_failure_check: needs a CUDA device (a CUDA graph capture)", file=sys.stderr)
        return 2
    result = check(args.leave_open, args.num_envs)
    result.update(num_envs=args.num_envs, device=torch.cuda.get_device_name(), versions=versions(),
                  series_sha256=series_sha256())
    print(json.dumps(result))
    return 0 if result["holds"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
