#!/usr/bin/env python3
"""Evidence for a proposed unisim-core patch, not a shipped change: skip `mj_setConst` on reset rows when the
reset's model writes touch only fields mjbatch marks `RecomputeLevel.NONE` (G1 Walk Flat: the `pd_gains` event's
`actuator_gainprm` / `actuator_biasprm`).

unisim-core 1.7.8's `MuJoCoBackend._commit_state` calls `pool.set_const(rows)` after any model write, although
mjbatch's own `model_field_specs()` says no derived constant depends on these fields (its `model_update` skips the
recompute for them). This probe wraps `_commit_state` in-process so `set_const` is a no-op exactly in that case
(`--skip-set-const`), then runs the harness of `collector_profile.py` (profile or trajectory), so the two settings
can be compared bitwise and timed. Run it from a UniLab tree root with `PYTHONPATH=<tree>/src`.

Run by hand; its findings are in results/2026-11-30-cpu2-collector-profile/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collector_profile as harness  # noqa: E402


def install_skip() -> None:
    """Wrap `_commit_state`: set_const becomes a no-op for commits whose model writes are all NONE-level."""
    from mjbatch.model import RecomputeLevel
    from unisim.backend.mujoco import backend

    original = backend.MuJoCoBackend._commit_state

    def commit(self: Any, plan: Any) -> None:
        pool = self._pool
        specs = pool.model_field_specs()
        if plan.model_writes and max(specs[w.field].recompute for w in plan.model_writes) == RecomputeLevel.NONE:
            pool.set_const = lambda ids=None: None
            try:
                return original(self, plan)
            finally:
                del pool.set_const
        return original(self, plan)

    backend.MuJoCoBackend._commit_state = commit


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("profile", "trajectory"), required=True)
    p.add_argument("--skip-set-const", action="store_true")
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--steps", type=int, default=170)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--output", type=Path, required=True)
    args = p.parse_args()
    if args.skip_set_const:
        install_skip()
    env = harness.build_env(args.num_envs, 1)
    actions = harness.action_sequence(args.num_envs, harness.action_dim_of(env), args.steps, 7)
    env.init_state()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    if args.mode == "profile":
        result = harness.run_profile(env, actions, args.warmup)
        result.update(num_envs=args.num_envs, steps=args.steps, warmup=args.warmup,
                      skip_set_const=args.skip_set_const)
        args.output.write_text(json.dumps(result, indent=1) + "\n")
    else:
        np.savez(args.output, **harness.run_trajectory(env, actions))
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
