#!/usr/bin/env python3
"""Stop, kill and resume checks of a training run (uni_rl 0011, unilab 0006), one mode per run; prints one JSON.

Run from an applied UniLab tree's root (G1 meshes unpacked) with the overlay, the tree's `src`, `experiments/evidence/`, `experiments/profile/`
and `tests/` on `PYTHONPATH`. Modes:

  resume-bitwise  the device-resident runner on UniLab's MuJoCo Warp G1 env (Warp's CPU device) with
                  `save_replay`: run A trains N iterations; run B trains the same, receives a real SIGTERM
                  (sent to itself from inside iteration K's update) and stops with a checkpoint; run C, built
                  fresh, resumes from it and trains on to N. A's and C's final checkpoints (learner, optimizers,
                  schedules, normalizers, replay ring, env state, RNG) must be bitwise equal. The control: a
                  run C' resumes from B's checkpoint without the env's random generator and must differ.
  host-collector  the host path's collector process (`off_policy_collector_fn`, spawned through uni_rl's
                  AsyncRunner exactly as the runner spawns it, on UniLab's real G1 env) beside this process
                  acting as the learner with the runner's stop handling; prints the pids, then waits. The test
                  sends SIGTERM (or kills the collector, or this process) and looks for what is left.
"""

from __future__ import annotations

import argparse
import json
import re
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch

CPU = torch.device("cpu")
SCRATCH = re.compile(r"\.sim\._data\.(island_\w+|\w+_islandid|map_\w+|nidof)\.")


def _collector_without_parent_death_signal(**kwargs: Any) -> None:
    """The host collector with the parent-death signal of ``install_collector_safeguards`` cleared (Linux
    ``prctl(PR_SET_PDEATHSIG, 0)``): the negative control's collector, which outlives a learner that dies."""
    import ctypes

    from uni_rl.offpolicy.worker import off_policy_collector_fn

    ctypes.CDLL(None, use_errno=True).prctl(1, 0, 0, 0, 0)
    off_policy_collector_fn(**kwargs)


def _state_tensors(obj: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor (and number) in a nested checkpoint, by path."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            out.update(_state_tensors(value, f"{prefix}{key}."))
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            out.update(_state_tensors(value, f"{prefix}{index}."))
    elif isinstance(obj, torch.Tensor):
        out[prefix.rstrip(".")] = obj
    elif isinstance(obj, (int, float, str, bool)) or obj is None:
        out[prefix.rstrip(".")] = obj
    return out


def _mjwarp_env(num_envs: int, seed: int) -> Any:
    from device_env_build import make_device_env

    return make_device_env(num_envs, seed, (), numpy_draws=False)


def _runner(env: Any, *, resume_from: str | None = None) -> Any:
    from device_collector_harness import small_learner
    from flashsac_runtime.collector.runner import DeviceCollectorRunner

    learner = small_learner(env, finite_guard=True)
    runner = DeviceCollectorRunner(learner=learner, env=env, env_name="G1WalkFlat", algo_type="flashsac",
                                   num_envs=env.num_envs, replay_buffer_n=8, batch_size=32, learning_starts=2,
                                   updates_per_step=2, policy_frequency=2, env_steps_per_sync=1,
                                   obs_normalization=False, seed=1)
    runner.save_replay = True
    runner.resume_from = resume_from
    return runner


def mode_resume_bitwise(args: argparse.Namespace) -> dict:
    from flashsac_runtime.preemption import STATE_KEY, TrainingInterrupted, read_checkpoint

    n, k, envs = args.iterations, args.stop_at, args.num_envs
    logs = Path(args.log_dir)
    timings: dict[str, float] = {}

    start = time.perf_counter()
    env = _mjwarp_env(envs, 1)
    _runner(env).learn(max_iterations=n, save_interval=0, log_dir=str(logs / "a"), logger_type="no_print")
    timings["uninterrupted_s"] = time.perf_counter() - start

    start = time.perf_counter()
    env = _mjwarp_env(envs, 1)
    runner = _runner(env)
    from flashsac_runtime.collector.replay_ring import DeviceReplayRing

    sample = DeviceReplayRing.sample_large_batch

    def sample_then_signal(ring: Any, tick_id: int) -> Any:
        if tick_id == k:
            os.kill(os.getpid(), signal.SIGTERM)  # a real signal, delivered while iteration k runs
        return sample(ring, tick_id)

    DeviceReplayRing.sample_large_batch = sample_then_signal  # type: ignore[method-assign]
    stopped: dict[str, Any] = {}
    try:
        runner.learn(max_iterations=n, save_interval=0, log_dir=str(logs / "b"), logger_type="no_print")
    except TrainingInterrupted as stop:
        stopped = {"iteration": stop.iteration, "checkpoint": stop.checkpoint, "exit_code": stop.exit_code}
    DeviceReplayRing.sample_large_batch = sample  # type: ignore[method-assign]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    timings["interrupted_s"] = time.perf_counter() - start
    if not stopped:
        return {"stopped": False}
    checkpoint = stopped["checkpoint"]
    # The control: the same checkpoint without the env's random generator.
    broken = str(logs / "b" / "broken.pt")
    state = torch.load(checkpoint, weights_only=False)
    env_state = state[STATE_KEY]["collector"]["env"]
    for key in [key for key, (kind, _) in env_state.items() if kind == "generator"]:
        del env_state[key]
    torch.save(state, broken)

    for name, source in (("c", checkpoint), ("control", broken)):
        start = time.perf_counter()
        env = _mjwarp_env(envs, 1)
        _runner(env, resume_from=source).learn(max_iterations=n, save_interval=0, log_dir=str(logs / name),
                                               logger_type="no_print")
        timings[f"resumed_{name}_s"] = time.perf_counter() - start

    a = _state_tensors(read_checkpoint(str(logs / "a" / f"model_{n}.pt")))

    def differ(name: str) -> list[str]:
        c = _state_tensors(read_checkpoint(str(logs / name / f"model_{n}.pt")))
        return sorted(key for key in set(a) | set(c) if not SCRATCH.search(key) and (
            key not in a or key not in c or not (
                torch.equal(a[key], c[key]) if isinstance(a[key], torch.Tensor) else a[key] == c[key])))

    # MuJoCo Warp's constraint-island scratch (rebuilt every step; two uninterrupted runs differ there too).
    scratch = [key for key in a if SCRATCH.search(key)]
    resumed, control = differ("c"), differ("control")
    c = _state_tensors(read_checkpoint(str(logs / "c" / f"model_{n}.pt")))
    weights_only = torch.load(str(logs / "c" / f"model_{n}.pt"), weights_only=True)  # UniLab's play loader
    groups = lambda keys: sorted({".".join(key.split(".")[:3]) for key in keys})[:40]  # noqa: E731
    return {"stopped": stopped, "keys": len(a), "scratch_keys": len(scratch), "differ": groups(resumed),
            "n_differ": len(resumed), "control_differ": groups(control), "n_control_differ": len(control),
            "env_keys": sum(1 for key in a if key.startswith(f"{STATE_KEY}.collector.env.")),
            "ring_rows": int(c[f"{STATE_KEY}.collector.ring_ptr"]), "timings": timings,
            "weights_only_load": sorted(weights_only)[:3]}


def mode_host_collector(args: argparse.Namespace) -> dict:
    """The host runner's collector lifecycle on the CPU, with the runner's own stop and death handling."""
    from collector_profile import build_env
    from uni_rl.ipc.async_runner import _SPAWN_CTX
    from uni_rl.ipc.inference_slot import SharedInferenceSlot
    from uni_rl.ipc.replay_buffer import ReplayBuffer
    from uni_rl.logging import OffPolicyLogger
    from flashsac_runtime import preemption
    from uni_rl.offpolicy.double_buffer_runner import DoubleBufferOffPolicyRunner
    from uni_rl.offpolicy.runner import OffPolicyRunner
    from uni_rl.offpolicy.worker import off_policy_collector_fn
    from unilab.base.env_factory import registry_env_factory

    from device_env_adapter import _compose_flashsac_cfg
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    env_cfg_override = build_offpolicy_env_cfg_override(
        "flashsac", _compose_flashsac_cfg(["task=g1_walk_flat/mujoco", f"algo.num_envs={args.num_envs}"]))
    probe = build_env(1, 1)
    spec = dict(probe.obs_groups_spec)
    obs_dim, critic_dim, action_dim = int(spec["obs"]), int(spec.get("critic", spec["obs"])), int(
        probe.action_space.shape[0])
    probe.close()

    class CpuCollectorHost(OffPolicyRunner):
        """uni_rl's AsyncRunner lifecycle (start, liveness, close) without the CUDA-only learner loop."""

        def __init__(self) -> None:  # noqa: D107 - the AsyncRunner part only
            from uni_rl.ipc.async_runner import AsyncRunner

            AsyncRunner.__init__(self, env_name="G1WalkFlat", env_cfg_overrides={}, rl_cfg={}, device="cpu",
                                 num_envs=args.num_envs)
            self._active_logger = None

        _make_summary = staticmethod(DoubleBufferOffPolicyRunner._make_summary)

        def learn(self, *a: Any, **kw: Any) -> None:
            raise NotImplementedError

    host = CpuCollectorHost()
    n = args.num_envs
    replay = ReplayBuffer(capacity=8 * n, obs_dim=obs_dim, action_dim=action_dim, device="cpu",
                          ingress_slot_rows=n, critic_dim=critic_dim)
    slot = SharedInferenceSlot(n, obs_dim, action_dim)
    host._shared_resources += [replay, slot]
    requests, responses, metrics = _SPAWN_CTX.Queue(maxsize=1), _SPAWN_CTX.Queue(maxsize=1), _SPAWN_CTX.Queue(100)
    logger = OffPolicyLogger(algo_name="FlashSAC", max_iterations=1, num_envs=n, env_name="G1WalkFlat",
                             obs_dim=obs_dim, action_dim=action_dim, num_gpus=1, log_dir=args.log_dir,
                             log_backend="no_print")
    with preemption.StopSignals(lambda: [host._collector_process], label="training") as signals:
        # The negative control's collector clears the parent-death signal its safeguards asked for.
        collector_fn = (_collector_without_parent_death_signal
                        if os.environ.get("PREEMPTION_HARNESS_NO_CLEANUP") == "1" else off_policy_collector_fn)
        host._start_collector(target_fn=collector_fn, kwargs={
            "stop_event": host._stop_event, "env_factory": registry_env_factory("G1WalkFlat", "mujoco"),
            "num_envs": n, "replay_buffer": replay, "inference_slot": slot, "algo_type": "flashsac",
            "inference_request_queue": requests, "inference_response_queue": responses, "metrics_queue": metrics,
            "env_cfg_override": env_cfg_override, "seed": 1})
        print(json.dumps({"learner": os.getpid(), "collector": host._collector_process.pid}), flush=True)
        started = time.monotonic()
        ready = False
        try:
            while True:  # the runner's wait for an inference request: stop check, liveness, poll
                signals.check()
                if not host._check_collector_alive():
                    died = DoubleBufferOffPolicyRunner._fail_collector_died  # the runner's own report
                    try:
                        died(host, logger, replay, _NullPipeline(), 0, None, started)
                    except preemption.CollectorDied as exc:  # what UniLab's entry point then does
                        host.close()
                        preemption.stop_resource_tracker()
                        print(f"[train_offpolicy] {exc}", file=sys.stderr, flush=True)
                        return {"collector_died": str(exc), "seconds": time.monotonic() - started}
                try:
                    requests.get(timeout=0.1)
                except Exception:
                    continue
                if not ready:
                    ready = True
                    print(json.dumps({"ready": True}), flush=True)
        except preemption._Stop:  # noqa: SLF001
            seconds = signals.seconds_since()
            if os.environ.get("PREEMPTION_HARNESS_NO_CLEANUP") == "1":  # the negative control
                os._exit(preemption.exit_code(signals.signum or 15))
            time.sleep(float(os.environ.get("PREEMPTION_HARNESS_SLOW_STOP_S", "0")))  # a stop that takes long
            host.close()
            preemption.stop_resource_tracker()
            line = f"training stopped by {preemption.signal_name(signals.signum or 15)} ({seconds:.1f} s)"
            print(f"[train_offpolicy] {line}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(preemption.exit_code(signals.signum or 15))
    return {}


class _NullPipeline:
    def close(self) -> None: ...


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("resume-bitwise", "host-collector"))
    parser.add_argument("--broken", action="store_true")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--stop-at", type=int, default=4)
    parser.add_argument("--log-dir", default="preemption-logs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    modes = {"resume-bitwise": mode_resume_bitwise, "host-collector": mode_host_collector}
    print(json.dumps(modes[args.mode](args), default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
