#!/usr/bin/env python3
"""Which part of a device env's step fails to record as a CUDA graph on this machine, and why.

A device env (flashsac_runtime.envs) records its step as one CUDA graph; when that capture fails the env says so
in one line and steps eagerly. A failed capture names only the first CUDA call that noticed, so this probe records
each part of the step on its own, each in a fresh process (a failed capture poisons the process's CUDA state):
the MJWarp substeps, MJWarp's masked reset, the kinematics and sensors of a reset, the torch terms (terminations,
rewards, observations), the masked reset, the whole step body, and the env as training builds it (after a
FlashSAC learner exists on the device). ``sync-check`` steps the eager env under torch's sync debug mode "error":
a torch operation that waits on the host fails there with its traceback.

``--task`` picks the env: ``g1_walk_flat`` (the default; built as its checks build it, ``device_env_build``),
``go2_joystick_flat`` or ``g1_motion_tracking`` (built as ``training.collector=device`` builds them: draws taken
ahead, the reset of the done rows in a conditional node, ``MjwarpState.when_any``), each with parts of its own.
Go2's reset once called MuJoCo Warp's ``set_const`` (which allocates temporaries) and now recomputes its rows
without allocating (``MassConstants``), and its interval push runs a full ``forward`` (whose solver loop is a
conditional node of its own), all inside a conditional node: ``set-const``, ``mass-constants`` and ``forward`` run
each alone, ``set-const-conditional``, ``mass-constants-conditional`` and ``forward-conditional`` inside ``when_any``,
``reset-events`` the masked reset with its events as the step runs it, ``push`` the push with its forward. Motion
tracking's parts are its command's update (``failure-stats``: the adaptive sampler's ``index_add_``;
``motion-command``: that, the frames and the reference's gathers, as the step runs it), its start frames
(``start-frames``: ``cumsum``, ``searchsorted``), its reset alone (``motion-reset-rows``) and the masked reset as
the step runs it (``motion-reset``). ``--list`` prints a task's parts.

Each part's record names the task and the part, ``ok`` (the env parts: the step's graph captured) or the
exception's first line, and the innermost frames of its traceback, with those of the exceptions it was raised
while handling (a body's error that the capture's end reports as another).

Run by hand on a GPU host when an env reports that its step stays eager (``device_evidence.sh capture-probe``
runs it for every task), from a UniLab tree root with the overlay first on ``PYTHONPATH``, MuJoCo Warp on a CUDA
device and, for motion tracking, the task's motion clip in the tree:
``python experiments/evidence/device_capture_probe.py --task go2_joystick_flat --output probe.json`` (every part;
the first alone fills Warp's kernel cache, the others then run at once) or ``--part set-const`` (one, printed).
Without CUDA it says so in one line (exit 1); an unknown task or part is one line too (exit 2).
"""

from __future__ import annotations

import argparse
import functools
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
#: Each task's device env factory (``flashsac_runtime.envs``) and its policy, action and critic widths (the
#: learner ``env-after-learner`` builds first, as training does).
TASKS: dict[str, tuple[str, tuple[int, int, int]]] = {
    "g1_walk_flat": ("make_g1_walk_device_env", (98, 29, 104)),
    "go2_joystick_flat": ("make_go2_joystick_device_env", (49, 12, 52)),
    "g1_motion_tracking": ("make_g1_motion_tracking_device_env", (160, 29, 289)),
}
STEP_PARTS = ("sync-check", "physics", "reset-data", "forward-rows", "terms", "reset-rows", "body")
TASK_PARTS: dict[str, tuple[str, ...]] = {
    "g1_walk_flat": (),
    "go2_joystick_flat": ("set-const", "set-const-conditional", "mass-constants", "mass-constants-conditional",
                          "forward", "forward-conditional", "reset-events",
                          "push"),
    "g1_motion_tracking": ("failure-stats", "motion-command", "start-frames", "motion-reset-rows", "motion-reset"),
}
BUILD_PARTS = ("env", "env-after-learner")
#: Innermost traceback frames a record keeps.
FRAMES = 8


def parts_of(task: str) -> tuple[str, ...]:
    return (*STEP_PARTS, *TASK_PARTS[task], *BUILD_PARTS)


def build_env(task: str, graph: bool) -> Any:
    """``task``'s device env on CUDA: G1 Walk Flat as its checks build it; Go2 and motion tracking in the
    factory's training form, where their step stayed eager."""
    if task == "g1_walk_flat":
        return make_device_env(NUM_ENVS, 1, (), numpy_draws=False, graph=graph)
    from hydra import compose, initialize_config_dir

    import flashsac_runtime.envs as envs
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    with initialize_config_dir(config_dir=str(Path("src/unilab/conf/flashsac").resolve()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"task={task}/mjwarp", f"algo.num_envs={NUM_ENVS}",
                                                        "algo.seed=1"])
    factory = getattr(envs, TASKS[task][0])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the CPU: a check of the parts' code
    return factory(NUM_ENVS, device, 1, env_cfg_override=build_offpolicy_env_cfg_override(
        "flashsac", cfg), graph=graph)


def _eager_env(task: str) -> Any:
    env = build_env(task, graph=False)
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


def _built_status(env: Any) -> str:
    """The built env's step graph: a step left eager is the part's failure (the env caught it; no traceback)."""
    if env.graph_status != "captured":
        raise RuntimeError(env.graph_status)
    return env.graph_status


def _task_bodies(task: str, env: Any, rows: torch.Tensor) -> dict[str, Callable[[], None]]:
    """The task's own parts. Draws are those the eager step took ahead (``_drawn.current``), as the step reads
    them; the masked resets run inside ``when_any`` as the step's reset of the done rows does."""
    sim = env.sim
    mjw, model, data = sim._mjw, sim._model, sim._data  # noqa: SLF001 - the env's own MuJoCo Warp calls
    ahead = env._drawn.current if env._drawn is not None else None  # noqa: SLF001
    if task == "go2_joystick_flat":
        assert ahead is not None
        set_const = functools.partial(mjw.set_const, model, data)
        forward = functools.partial(mjw.forward, model, data)
        reset = functools.partial(env._reset_rows, rows, update_curriculum=True,  # noqa: SLF001
                                  drawn=ahead.reset, noise=ahead.reset_noise)
        mass_constants = env._mass_constants.recompute  # noqa: SLF001
        return {"set-const": set_const, "set-const-conditional": lambda: sim.when_any(rows, set_const),
                "mass-constants": mass_constants,
                "mass-constants-conditional": lambda: sim.when_any(rows, mass_constants),
                "forward": forward, "forward-conditional": lambda: sim.when_any(rows, forward),
                "reset-events": lambda: sim.when_any(rows, reset),
                "push": lambda: env._apply_events(ahead.events)}  # noqa: SLF001
    if task == "g1_motion_tracking":
        assert ahead is not None
        reset = functools.partial(env._reset_rows, rows, update_curriculum=True,  # noqa: SLF001
                                  drawn=ahead.reset, noise=ahead.reset_noise)
        return {"failure-stats": env._update_failure_stats,  # noqa: SLF001
                "motion-command": lambda: env._advance_command(env._done),  # noqa: SLF001
                "start-frames": lambda: env._start_frames(ahead.reset),  # noqa: SLF001
                "motion-reset-rows": lambda: env._reset_task_rows(rows, ahead.reset,  # noqa: SLF001
                                                                  update_curriculum=True),
                "motion-reset": lambda: sim.when_any(rows, reset)}
    return {}


def part_result(task: str, part: str) -> str:
    if part == "env":
        env = build_env(task, graph=True)
        env.reset()
        return _built_status(env)
    if part == "env-after-learner":
        from uni_rl.algos.flash_sac.learner import FlashSACLearner

        obs_dim, action_dim, critic_obs_dim = TASKS[task][1]
        FlashSACLearner(obs_dim=obs_dim, action_dim=action_dim, critic_obs_dim=critic_obs_dim, device="cuda")
        env = build_env(task, graph=True)
        env.reset()
        return _built_status(env)
    env = _eager_env(task)
    if part == "sync-check":
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                env.step(torch.zeros(NUM_ENVS, env.action_dim, device=env.device))
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return "no host sync in three eager steps"
    rows = torch.zeros(NUM_ENVS, dtype=torch.bool, device=env.device)
    rows[::7] = True
    bodies: dict[str, Callable[[], None]] = {
        "physics": lambda: env.sim.step(env.substeps),
        "reset-data": lambda: env.sim.reset_rows(rows),
        "forward-rows": lambda: env.sim.forward_rows(rows),
        "terms": lambda: (env._terminate(), env._reward(), env._observe(env._all_rows)),  # noqa: SLF001
        "reset-rows": lambda: env._reset_rows(rows, update_curriculum=True),  # noqa: SLF001
        "body": env._step_body,  # noqa: SLF001
        **_task_bodies(task, env, rows),
    }
    return _capture(env, bodies[part])


def _frames(exc: BaseException) -> list[str]:
    """The innermost frames of ``exc``'s traceback, innermost last: file (its last two path parts), line, function,
    source."""
    return [f"{'/'.join(Path(f.filename).parts[-2:])}:{f.lineno} {f.name}: {f.line}"
            for f in traceback.extract_tb(exc.__traceback__)[-FRAMES:]]


def failure_record(exc: BaseException) -> dict[str, Any]:
    """The exception's first line and innermost frames, then those of the exceptions it was raised while handling
    (a capture's end can report a body's error as another), outermost first."""
    def one(e: BaseException) -> dict[str, Any]:
        lines = str(e).strip().splitlines()
        return {"error": f"{type(e).__name__}: {lines[0] if lines else ''}"[:400], "frames": _frames(e)}

    record, chained, seen = one(exc), [], {id(exc)}
    inner = exc.__cause__ or exc.__context__
    while inner is not None and id(inner) not in seen and len(chained) < 3:
        seen.add(id(inner))
        chained.append(one(inner))
        inner = inner.__cause__ or inner.__context__
    return {**record, "raised_while_handling": chained}


def refusal(task: str, part: str | None) -> str | None:
    """Why ``task`` / ``part`` cannot be probed (one line), or None."""
    if task not in TASKS:
        return f"device_capture_probe: unknown task {task!r}; tasks: {', '.join(TASKS)}"
    if part is not None and part not in parts_of(task):
        return f"device_capture_probe: {task} has no part {part!r}; its parts: {', '.join(parts_of(task))}"
    return None


def _child_record(task: str, part: str, proc: subprocess.Popen, logs: Path, timeout: float) -> dict[str, Any]:
    """A part's record from its process's last JSON line (a process that died or ran past ``timeout`` is a
    failure of its own), with its stderr's tail (Warp's module load lines left out)."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stdout, stderr = (logs / f"{part}.out").read_text(), (logs / f"{part}.err").read_text()
    lines = [ln for ln in stdout.strip().splitlines() if ln.startswith("{")]
    try:
        record = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        record = {"task": task, "part": part, "ok": False, "error": f"exit {proc.returncode}", "frames": []}
    record["stderr_tail"] = [ln for ln in stderr.splitlines() if not ln.startswith("Module ")][-8:]
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="g1_walk_flat", help=f"one of {', '.join(TASKS)}")
    parser.add_argument("--part", help="one part of the task (--list); every part when left out")
    parser.add_argument("--list", action="store_true", help="print the task's parts, one a line")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a part's process may run")
    args = parser.parse_args(argv)
    refused = refusal(args.task, args.part)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(parts_of(args.task)))
        return 0
    if not torch.cuda.is_available():
        print("device_capture_probe: no CUDA device; the capture is probed on a GPU", file=sys.stderr)
        return 1
    if args.part:
        try:
            record = {"ok": True, "result": part_result(args.task, args.part)}
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            record = {"ok": False, **failure_record(exc)}
        print(json.dumps({"task": args.task, "part": args.part, **record}))
        return 0
    # The first part alone fills Warp's kernel cache; the others then run at once, each in its own process
    # (output to files: a pipe left unread would block a child).
    logs = Path(tempfile.mkdtemp(prefix="device-capture-probe-"))
    procs: dict[str, subprocess.Popen] = {}
    results: list[dict[str, Any]] = []

    def collect(part: str) -> None:
        record = _child_record(args.task, part, procs.pop(part), logs, args.timeout)
        results.append(record)
        print(json.dumps({k: record.get(k) for k in ("task", "part", "ok", "result", "error")}
                         | {"frames": (record.get("frames") or [])[-2:]}), flush=True)

    for index, part in enumerate(parts_of(args.task)):
        with (logs / f"{part}.out").open("w") as out, (logs / f"{part}.err").open("w") as err:
            procs[part] = subprocess.Popen([sys.executable, __file__, "--task", args.task, "--part", part],
                                           stdout=out, stderr=err, text=True, env=os.environ.copy())
        if index == 0:
            collect(part)
    for part in list(procs):
        collect(part)
    if args.output:
        args.output.write_text(json.dumps({"task": args.task, "num_envs": NUM_ENVS, "parts": results}, indent=1)
                               + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
