#!/usr/bin/env python3
"""Which part of the device env's step fails to record as a CUDA graph on this machine, and why.

The device-resident G1 Walk Flat env (flashsac_runtime.envs) records its step as one CUDA graph; when that capture fails
the env says so in one line and steps eagerly. A failed capture names only the first CUDA call that noticed, so
this probe records each part of the step on its own, each in a fresh process (a failed capture poisons the
process's CUDA state): the MJWarp substeps, MJWarp's masked reset, the kinematics and sensors of a reset, the
torch terms (terminations, rewards, observations), the masked reset events, the whole step body, and the env
as training builds it (after a FlashSAC learner exists on the device). ``sync-check`` steps the eager env under
torch's sync debug mode "error": a torch operation that waits on the host fails there with its traceback.

Run by hand on a GPU host when the env reports that its step stays eager (no make target calls it), from a
UniLab tree root with the overlay first on ``PYTHONPATH`` and MuJoCo Warp on a CUDA device:
``python experiments/evidence/device_capture_probe.py --output probe.json`` (every part; the first alone fills
Warp's kernel cache, the others then run at once) or ``--part physics`` (one, printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_env_build import make_device_env  # noqa: E402

NUM_ENVS = 256


def _eager_env() -> Any:
    env = make_device_env(NUM_ENVS, 1, (), numpy_draws=False, graph=False)
    env.reset()
    env.step(torch.zeros(NUM_ENVS, env.action_dim, device=env.device))
    torch.cuda.synchronize()
    return env


def _capture(env: Any, body: Callable[[], None]) -> str:
    with env._on_sim_stream():  # noqa: SLF001 - the env's own stream discipline
        body()  # once eagerly, as the env does before its capture
        graph = env.sim.capture(body, (env.draws.generator,))
        graph.replay()
    torch.cuda.synchronize()
    return "captured and replayed"


def part_result(part: str) -> str:
    if part == "env":
        env = make_device_env(NUM_ENVS, 1, (), numpy_draws=False)
        env.reset()
        return env.graph_status
    if part == "env-after-learner":
        from uni_rl.algos.flash_sac.learner import FlashSACLearner

        FlashSACLearner(obs_dim=98, action_dim=29, critic_obs_dim=104, device="cuda")
        env = make_device_env(NUM_ENVS, 1, (), numpy_draws=False)
        env.reset()
        return env.graph_status
    env = _eager_env()
    rows = torch.zeros(NUM_ENVS, dtype=torch.bool, device=env.device)
    rows[::7] = True
    bodies: dict[str, Callable[[], None]] = {
        "physics": lambda: env.sim.step(env.substeps),
        "reset-data": lambda: env.sim.reset_rows(rows),
        "forward-rows": lambda: env.sim.forward_rows(rows),
        "terms": lambda: (env._terminate(), env._reward(), env._observe(env._all_rows)),  # noqa: SLF001
        "reset-rows": lambda: env._reset_rows(rows, update_curriculum=True),  # noqa: SLF001
        "body": env._step_body,  # noqa: SLF001
    }
    if part == "sync-check":
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                env.step(torch.zeros(NUM_ENVS, env.action_dim, device=env.device))
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return "no host sync in three eager steps"
    return _capture(env, bodies[part])


PARTS = ("sync-check", "physics", "reset-data", "forward-rows", "terms", "reset-rows", "body", "env",
         "env-after-learner")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=PARTS)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("device_capture_probe: no CUDA device; the capture is probed on a GPU", file=sys.stderr)
        return 1
    if args.part:
        try:
            print(json.dumps({"part": args.part, "ok": True, "result": part_result(args.part)}))
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            print(json.dumps({"part": args.part, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:600],
                              "traceback": traceback.format_exc()[-2500:]}))
        return 0
    # The first part alone fills Warp's kernel cache; the others then run at once, each in its own process
    # (output to files: a pipe left unread would block a child).
    logs = Path(tempfile.mkdtemp(prefix="device-capture-probe-"))
    procs = {}
    for index, part in enumerate(PARTS):
        with (logs / f"{part}.out").open("w") as out, (logs / f"{part}.err").open("w") as err:
            procs[part] = subprocess.Popen([sys.executable, __file__, "--part", part], stdout=out, stderr=err,
                                           text=True, env=os.environ.copy())
        if index == 0:
            procs[part].wait(timeout=300)
    results: list[dict[str, Any]] = []
    for part, proc in procs.items():
        proc.wait(timeout=300)
        stdout, stderr = (logs / f"{part}.out").read_text(), (logs / f"{part}.err").read_text()
        lines = [ln for ln in stdout.strip().splitlines() if ln.startswith("{")]
        try:
            record = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            record = {"part": part, "ok": False, "error": f"exit {proc.returncode}"}
        record["stderr_tail"] = [ln for ln in stderr.splitlines() if not ln.startswith("Module ")][-8:]
        results.append(record)
        print(json.dumps({k: record.get(k) for k in ("part", "ok", "result", "error")}), flush=True)
    if args.output:
        args.output.write_text(json.dumps({"num_envs": NUM_ENVS, "parts": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
