#!/usr/bin/env python3
"""Checks of the device-resident collector on the real G1 Walk Flat env (CPU MuJoCo), one mode per run.

Run from an applied UniLab tree's root (G1 meshes unpacked) with the overlay, the tree's `src`,
`experiments/` and `tests/` on `PYTHONPATH`; prints one JSON object. Modes:

  ring          the device runner trains with the env behind `device_env_adapter`; at the end the replay ring
                must hold exactly the transitions the env produced (recorded by the adapter). `--broken`: a ring
                that writes every step one row late.
  equivalence   the same recorded env steps go through the host path's replay code (the collector's
                `ReplayBuffer.add` with the terminal-observation contract, the pipeline's ring spans and
                gather) and through the device ring; batches and the learner after two iterations (host:
                the runner's per-update loop; device: `update_iteration`) must be bitwise equal. `--broken`: a
                device ring that stores the post-reset observation as a done row's next observation.
  finite-guard  the device runner trains while one done row's final observation is NaN; with the finite
                guard some updates are skipped and the learner stays finite. `--broken`: the guard off.
  host-ahead    the device runner trains twice, its host reading each iteration's results an iteration late
                (the default) and at the iteration's end (`host_ahead=False`): every logged row (iteration,
                learner metrics, episode reward), the learner and the ring must be equal. `--broken`: the
                metrics read where the host gets to them, not staged where the iteration ended.
  env-step-early (CUDA) the device runner trains three times, its side stream starting the env step right after
                the action (the default), after the batch gather (`env_step_early=False`), and right after the
                action again (the control: the GPU's own run-to-run agreement); every logged row, the learner and
                the ring are compared. `--broken`: the third run's env sees one tick's actions shifted by 1e-3.
  checkpoint    the host path's loaders take `--checkpoint`: UniLab's play actor (`build_play_actor` +
                `load_play_actor`) and a FlashSAC learner built from the tree's config (`load_state_dict`, the
                runner's resume format). `--broken`: the checkpoint without its actor.
  explore       the FlashSAC actor's exploration over 200 steps with random dones, `explore()` (the host's
                redraw test) beside `explore(sync_free=True)` (the device collector's): actions and the random
                stream at every step. `--num-envs 1` makes steps at which no env redraws.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from collector_profile import action_sequence, build_env
from device_env_adapter import NumpyEnvAsDeviceEnv
from flashsac_runtime.learner.update_schedule import iteration_update_schedule, run_scheduled_update, slice_batch
from uni_rl.algos.flash_sac.learner import FlashSACLearner
from uni_rl.ipc.replay_buffer import ReplayBuffer
from uni_rl.ipc.replay_pipelines.gpu_resident import GPUResidentReplayPipeline, _ring_spans
from uni_rl.logging import OffPolicyLogger
from flashsac_runtime.collector import runner as device_runner
from flashsac_runtime.collector.device_env import DeviceStep
from flashsac_runtime.collector.replay_ring import DeviceReplayRing
from uni_rl.offpolicy.runner import update_reward_stats_from_replay
from uni_rl.utils.final_observation import resolve_terminal_observation_contract
from uni_rl.utils.observations import split_obs_dict

CPU = torch.device("cpu")
FIELDS = ("obs", "next_obs", "actions", "rewards", "dones", "truncated", "critic", "next_critic")


def small_learner(env: NumpyEnvAsDeviceEnv, **switches: Any) -> FlashSACLearner:
    torch.manual_seed(0)
    return FlashSACLearner(obs_dim=env.policy_obs_dim, action_dim=env.action_dim,
                           critic_obs_dim=env.critic_obs_dim, actor_hidden_dim=32, critic_hidden_dim=64,
                           deferred_metrics=True, use_whole_cycle_cuda_graph=True, **switches)


def train(env: NumpyEnvAsDeviceEnv, learner: FlashSACLearner, ring_class: type, *, iterations: int,
          log_dir: str, host_ahead: bool = True, env_step_early: bool = True, **schedule: int) -> dict:
    """`DeviceCollectorRunner.learn` as UniLab runs it; returns the ring it wrote and what the runner logged
    (per iteration: its number, the learner's metrics, the mean episode reward)."""
    rings: list[DeviceReplayRing] = []
    logged: list[dict[str, Any]] = []

    class Captured(ring_class):  # type: ignore[misc, valid-type]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            rings.append(self)

    class Logger(OffPolicyLogger):
        def log_step(self, **kwargs: Any) -> None:
            logged.append({"iteration": kwargs["iteration"], "metrics": dict(kwargs["metrics"]),
                           "reward": kwargs["reward"]})
            super().log_step(**kwargs)

    device_runner.DeviceReplayRing = Captured  # type: ignore[misc]
    device_runner.OffPolicyLogger = Logger  # type: ignore[misc]
    runner = device_runner.DeviceCollectorRunner(
        learner=learner, env=env, env_name="G1WalkFlat", algo_type="flashsac", num_envs=env.num_envs,
        obs_normalization=False, seed=1, host_ahead=host_ahead, env_step_early=env_step_early, **schedule)
    runner.learn(max_iterations=iterations, save_interval=0, log_dir=log_dir, logger_type="no_print")
    return {"ring": rings[0], "logged": logged, "metrics": [row["metrics"] for row in logged],
            "summary": runner.last_run_summary, "manifest": runner.runtime_manifest}


#: The small schedule the comparing modes train on (30 iterations each).
SCHEDULE = {"replay_buffer_n": 8, "batch_size": 32, "learning_starts": 2, "updates_per_step": 2,
            "policy_frequency": 1, "env_steps_per_sync": 1}


def trained(out: dict, learner: FlashSACLearner) -> dict:
    """What a comparing mode compares of one run: the logged rows, the learner's state and the ring."""
    return {"logged": out["logged"], "state": learner_state(learner),
            "ring": out["ring"]._storage.clone()}  # noqa: SLF001


def equal(a: dict, b: dict) -> dict[str, bool]:
    """Two ``trained`` records compared bitwise."""
    x, y = a["state"], b["state"]
    return {"logged_equal": a["logged"] == b["logged"],
            "state_equal": sorted(x) == sorted(y) and all(torch.equal(x[k], y[k]) for k in x),
            "ring_equal": torch.equal(a["ring"], b["ring"])}


def ring_problems(ring: DeviceReplayRing, recording: list) -> list[str]:
    """Every field of every stored step that differs from the recorded env transition (bitwise)."""
    steps = len(recording) - 1
    n = ring.capacity // ring.num_envs
    problems = [] if ring.ptr == steps * ring.num_envs else [f"ptr {ring.ptr} != {steps} steps"]
    storage = ring._storage  # noqa: SLF001 - the ring's contents are what is checked
    for k in range(max(1, steps - n + 1), steps + 1):
        before, (actions, after) = recording[k - 1][1], recording[k]
        done = (after.terminated | after.truncated)[:, None]
        expected = {
            "obs": before.policy_obs, "critic": before.critic_obs, "actions": actions, "rewards": after.reward,
            "next_obs": torch.where(done, after.final_policy_obs, after.policy_obs),
            "next_critic": torch.where(done, after.final_critic_obs, after.critic_obs),
            "dones": done[:, 0].float(), "truncated": after.truncated.float(),
        }
        start = ((k - 1) % n) * ring.num_envs
        rows = storage[start : start + ring.num_envs]
        for field in FIELDS:
            if not torch.equal(ring.field_view(rows, field), expected[field]):
                problems.append(f"step {k}: {field}")
    return problems


class LateRing(DeviceReplayRing):
    """Broken on purpose: an off-by-one ring index, every step lands in the next step's slot."""

    def write(self, obs, critic, actions, step) -> None:  # type: ignore[no-untyped-def]
        self.ptr += self.num_envs
        super().write(obs, critic, actions, step)
        self.ptr -= self.num_envs


class ResetObservationRing(DeviceReplayRing):
    """Broken on purpose: a done row's next observation is the next episode's first one."""

    def write(self, obs, critic, actions, step) -> None:  # type: ignore[no-untyped-def]
        super().write(obs, critic, actions,
                      step._replace(final_policy_obs=step.policy_obs, final_critic_obs=step.critic_obs))


def mode_ring(args: argparse.Namespace) -> dict:
    env = NumpyEnvAsDeviceEnv(build_env(args.num_envs, 1), CPU, record=True)
    out = train(env, small_learner(env, finite_guard=True), LateRing if args.broken else DeviceReplayRing,
                iterations=5, log_dir=args.log_dir, replay_buffer_n=64, batch_size=64, learning_starts=2,
                updates_per_step=1, policy_frequency=1, env_steps_per_sync=60)
    recording = env.recording or []
    env.close()
    dones = sum(int((s.terminated | s.truncated).sum()) for _, s in recording[1:])
    return {"steps": len(recording) - 1, "dones": dones, "wrapped": out["ring"].ptr > out["ring"].capacity,
            "problems": ring_problems(out["ring"], recording), "summary": out["summary"]}


class HostPathReplay:
    """The host path's replay code on the CPU: the collector's add, the pipeline's spans and gather."""

    def __init__(self, env: NumpyEnvAsDeviceEnv, replay_buffer_n: int, sample_count: int, base_seed: int) -> None:
        n = env.num_envs
        self.num_envs = n
        self.rb = ReplayBuffer(capacity=replay_buffer_n * n, obs_dim=env.policy_obs_dim, action_dim=env.action_dim,
                               device="cpu", ingress_slot_rows=n, critic_dim=env.critic_obs_dim)
        self.storage = torch.zeros(self.rb.capacity, self.rb.storage_width)
        # What GPUResidentReplayPipeline._gather_rows / _packed_batch_view read (the pipeline is CUDA/MPS only).
        self.pipeline = SimpleNamespace(_sample_count=sample_count, _device=CPU, _pack_layout="packed",
                                        _gpu_storage=self.storage, _use_critic_graph_packed_source=False,
                                        _gpu_packed=[torch.empty(sample_count, self.rb.storage_width)],
                                        _replay_buffer=self.rb)
        self.base_seed = base_seed

    def add(self, obs_np: np.ndarray, critic_np: np.ndarray, actions_np: np.ndarray, state: Any) -> None:
        """`uni_rl.offpolicy.worker._run_collector`'s replay write, line for line."""
        next_obs_np, next_critic_np = (np.asarray(x, dtype=np.float32) for x in split_obs_dict(state.obs))
        rewards_np = np.asarray(state.reward, dtype=np.float32).ravel()
        truncated_np = state.truncated.astype(np.float32, copy=False).ravel()
        combined = (state.terminated | state.truncated).astype(np.float32, copy=False).ravel()
        contract = resolve_terminal_observation_contract(
            next_obs_batch_size=next_obs_np.shape[0], final_observation=state.final_observation,
            done=combined > 0.5, info=state.info, truncated=truncated_np)
        t = torch.from_numpy
        self.rb.add(t(obs_np), t(actions_np), t(rewards_np), t(next_obs_np), t(combined), t(truncated_np),
                    terminal_mask=t(contract.terminal_mask),
                    terminal_next_obs=t(contract.terminal_obs) if contract.terminal_obs is not None else None,
                    critic=t(critic_np), next_critic=t(next_critic_np),
                    terminal_next_critic=(t(contract.terminal_critic)
                                          if contract.terminal_critic is not None else None))
        slot, start, count, source = self.rb.take_published_ingress()
        offset = 0
        for ring_offset, length in _ring_spans(start, start + count, self.rb.capacity):
            self.storage[ring_offset : ring_offset + length].copy_(source[offset : offset + length])
            offset += length
        self.rb.commit_ingress(slot=slot, start=start, count=count)

    def sample_large_batch(self, tick: int) -> dict[str, torch.Tensor]:
        visible = min(int(self.rb.ptr[0]), self.rb.capacity)
        GPUResidentReplayPipeline._gather_rows(self.pipeline, visible_size=visible, slot=0,  # type: ignore[arg-type]
                                               sample_seed=self.base_seed + tick)
        return GPUResidentReplayPipeline._packed_batch_view(self.pipeline, self.pipeline._gpu_packed[0])  # type: ignore[arg-type]

    def update_reward_stats(self, learner: FlashSACLearner, start_ptr: int) -> int:
        """`update_reward_stats_from_replay` over this storage: the newest rows since `start_ptr`, at most a ring."""
        end_ptr = int(self.rb.ptr[0])
        start_ptr = max(start_ptr, end_ptr - self.rb.capacity)
        rows = torch.cat([self.storage[o : o + n] for o, n in _ring_spans(start_ptr, end_ptr, self.rb.capacity)])
        steps = (end_ptr - start_ptr) // self.num_envs
        learner.update_reward_stats(self.rb.field_view(rows, "rewards").reshape(steps, self.num_envs),
                                    self.rb.field_view(rows, "dones").reshape(steps, self.num_envs))
        return end_ptr


def learner_state(learner: FlashSACLearner) -> dict[str, torch.Tensor]:
    out = {}
    for name in ("actor", "critic", "target_critic", "temperature"):
        for key, value in getattr(learner, name).state_dict().items():
            out[f"{name}.{key}"] = value.detach().clone()
    for name in ("actor_optimizer", "critic_optimizer", "temperature_optimizer"):
        for index, state in getattr(learner, name).state_dict()["state"].items():
            for key, value in state.items():
                out[f"{name}.{index}.{key}"] = value.detach().clone()
    out["reward_rms"] = torch.cat([learner.reward_normalizer.rms.mean, learner.reward_normalizer.rms.var])
    return out


def mode_equivalence(args: argparse.Namespace) -> dict:
    n_envs, replay_n, batch, ups, pf, steps_per_iteration = args.num_envs, 16, 32, 2, 2, 20
    env = NumpyEnvAsDeviceEnv(build_env(n_envs, 1), CPU)
    ring_class = ResetObservationRing if args.broken else DeviceReplayRing
    ring = ring_class(num_envs=n_envs, replay_buffer_n=replay_n, obs_dim=env.policy_obs_dim,
                      action_dim=env.action_dim, critic_dim=env.critic_obs_dim, sample_count=batch * ups,
                      base_seed=1, device=CPU)
    host = HostPathReplay(env, replay_n, batch * ups, base_seed=1)
    host_learner, device_learner = small_learner(env, finite_guard=True), small_learner(env, finite_guard=True)
    schedule = iteration_update_schedule(ups, pf)
    actions = action_sequence(n_envs, env.action_dim, 2 * steps_per_iteration, 7)
    step = env.reset()
    obs, critic = step.policy_obs.clone(), step.critic_obs.clone()
    host_stats_ptr = device_stats_ptr = 0
    batches_equal, dones = [], 0
    for iteration in (1, 2):
        for a in actions[(iteration - 1) * steps_per_iteration : iteration * steps_per_iteration]:
            step = env.step(torch.from_numpy(a))
            dones += int((step.terminated | step.truncated).sum())
            host.add(obs.numpy(), critic.numpy(), a, env.last_state)
            ring.write(obs, critic, torch.from_numpy(a), step)
            obs.copy_(step.policy_obs)
            critic.copy_(step.critic_obs)
        host_stats_ptr = host.update_reward_stats(host_learner, host_stats_ptr)
        device_stats_ptr = update_reward_stats_from_replay(device_learner, ring, start_ptr=device_stats_ptr,
                                                           end_ptr=ring.ptr, num_envs=n_envs, replay_source=ring)
        host_batch, device_batch = host.sample_large_batch(iteration), ring.sample_large_batch(iteration)
        batches_equal.append(all(torch.equal(host_batch[k], device_batch[k]) for k in FIELDS))
        rng = torch.random.get_rng_state()  # both learners draw this iteration's samples from one stream state
        for update in schedule:  # DoubleBufferOffPolicyRunner.learn's per-update loop
            run_scheduled_update(host_learner, update, slice_batch(host_batch, update.update_idx, batch))
        torch.random.set_rng_state(rng)
        device_learner.update_iteration(device_batch, batch_size=batch, schedule=schedule)
        host_metrics, device_metrics = host_learner.read_deferred_metrics(), device_learner.read_deferred_metrics()
    env.close()
    a, b = learner_state(host_learner), learner_state(device_learner)
    return {"dones": dones, "batches_equal": batches_equal, "metrics_equal": host_metrics == device_metrics,
            "state_keys": len(a), "state_equal": sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a),
            "finite": all(bool(torch.isfinite(v.float()).all()) for v in b.values()),
            "critic_loss": device_metrics.get("critic_loss")}


def mode_finite_guard(args: argparse.Namespace) -> dict:
    env = NumpyEnvAsDeviceEnv(build_env(args.num_envs, 1), CPU, nan_step=3)
    learner = small_learner(env, finite_guard=not args.broken)
    out = train(env, learner, DeviceReplayRing, iterations=40, log_dir=args.log_dir, replay_buffer_n=8,
                batch_size=32, learning_starts=2, updates_per_step=2, policy_frequency=1, env_steps_per_sync=1)
    env.close()
    params = [p for module in (learner.actor, learner.critic, learner.target_critic) for p in module.parameters()]
    skips = [m.get("critic_skip_rate", 0.0) for m in out["metrics"]]
    return {"critic_skip_rates": skips, "finite": all(bool(torch.isfinite(p).all()) for p in params),
            "critic_losses_finite": [math.isfinite(m["critic_loss"]) for m in out["metrics"]]}


def mode_host_ahead(args: argparse.Namespace) -> dict:
    """The same training with the host reading each iteration back an iteration late and at its end."""
    runs = {}
    for host_ahead in (True, False):
        env = NumpyEnvAsDeviceEnv(build_env(args.num_envs, 1), CPU)
        learner = small_learner(env, finite_guard=True)
        if args.broken and host_ahead:  # the metrics read where the host gets to them, not where staged
            learner.stage_deferred_metrics = lambda learner=learner: SimpleNamespace(  # type: ignore[method-assign]
                read=learner.read_deferred_metrics)
        out = train(env, learner, DeviceReplayRing, iterations=30, log_dir=f"{args.log_dir}/{host_ahead}",
                    host_ahead=host_ahead, **SCHEDULE)
        env.close()
        runs[host_ahead] = {**trained(out, learner), "syncs": out["summary"]["host_syncs_per_iteration"]}
    ahead, behind = runs[True], runs[False]
    return {"iterations": [row["iteration"] for row in ahead["logged"]],
            "rewards_logged": sum(row["reward"] is not None for row in ahead["logged"]),
            **equal(ahead, behind),
            "first_logged_difference": next((x["iteration"] for x, y in zip(ahead["logged"], behind["logged"])
                                             if x != y), None),
            "host_syncs_per_iteration": [ahead["syncs"], behind["syncs"]]}


def mode_env_step_early(args: argparse.Namespace) -> dict:
    """On CUDA, the env step started right after its action and after the batch gather: the same training."""
    cuda = torch.device("cuda")
    runs = {}
    for label, early in (("early", True), ("after-gather", False), ("early-again", True)):
        env = NumpyEnvAsDeviceEnv(build_env(args.num_envs, 1), cuda)
        if args.broken and label == "early-again":
            step, ticks = env.step, []

            def shifted(actions: torch.Tensor, step=step, ticks=ticks) -> DeviceStep:  # type: ignore[no-untyped-def]
                ticks.append(1)
                return step(actions + 1e-3 if len(ticks) == 5 else actions)

            env.step = shifted  # type: ignore[method-assign]
        learner = small_learner(env, device="cuda", finite_guard=True)
        out = train(env, learner, DeviceReplayRing, iterations=30, log_dir=f"{args.log_dir}/{label}",
                    env_step_early=early, **SCHEDULE)
        env.close()
        runs[label] = {**trained(out, learner), "manifest": out["manifest"]}

    return {"device": torch.cuda.get_device_name(cuda),
            "env_step_before_batch_gather": {k: v["manifest"]["env_step_before_batch_gather"] for k, v in runs.items()},
            "early_vs_after_gather": equal(runs["early"], runs["after-gather"]),
            "early_vs_early_again": equal(runs["early"], runs["early-again"])}


def mode_checkpoint(args: argparse.Namespace) -> dict:
    from device_env_adapter import _compose_flashsac_cfg, make_g1_walk_flat_cpu_env
    from uni_rl.algos.flash_sac.double_buffer import flashsac_learner_kwargs
    from unilab.visualization.interactive_playback import build_play_actor, load_play_actor

    checkpoint = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    if args.broken:
        del checkpoint["actor"]
    cfg = _compose_flashsac_cfg(["task=g1_walk_flat/mujoco"])
    env = make_g1_walk_flat_cpu_env(1, CPU, 0)
    dims = {"obs_dim": env.policy_obs_dim, "critic_obs_dim": env.critic_obs_dim, "action_dim": env.action_dim}
    env.close()
    actor, normalizer, _, _ = build_play_actor("flashsac", cfg, device="cpu", **dims)
    load_play_actor("flashsac", actor, normalizer, checkpoint)
    learner = FlashSACLearner(device="cpu", **flashsac_learner_kwargs(cfg, **dims))
    learner.load_state_dict(checkpoint)
    return {"keys": sorted(checkpoint), "learner_keys": sorted(learner.get_state_dict()),
            "update_count": learner.update_count,
            "actor_equal": all(torch.equal(v, checkpoint["actor"][k]) for k, v in actor.state_dict().items())}


def mode_explore(args: argparse.Namespace) -> dict:
    from uni_rl.algos.flash_sac.network import FlashSACActor

    torch.manual_seed(0)
    actor = FlashSACActor(num_blocks=1, input_dim=8, hidden_dim=16, action_dim=4)
    twin = FlashSACActor(num_blocks=1, input_dim=8, hidden_dim=16, action_dim=4)
    twin.load_state_dict(actor.state_dict())
    draws = torch.Generator().manual_seed(1)
    host_rng = torch.Generator().manual_seed(2).get_state()
    device_rng = host_rng.clone()
    steps = {"actions_equal": 0, "streams_equal": 0}
    for _ in range(200):
        obs = torch.randn(args.num_envs, 8, generator=draws)
        dones = (torch.rand(args.num_envs, generator=draws) < 0.05).float()
        torch.set_rng_state(host_rng)
        host = actor.explore(obs, dones=dones)
        host_rng = torch.get_rng_state()
        torch.set_rng_state(device_rng)
        device = twin.explore(obs, dones=dones, sync_free=True)
        device_rng = torch.get_rng_state()
        steps["actions_equal"] += int(torch.equal(host, device))
        steps["streams_equal"] += int(torch.equal(host_rng, device_rng))
    return {"steps": 200, **steps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("ring", "equivalence", "finite-guard", "host-ahead", "env-step-early",
                                         "checkpoint", "explore"))
    parser.add_argument("--checkpoint", default="")
    parser.add_argument("--broken", action="store_true")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--log-dir", default="device-collector-logs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    modes = {"ring": mode_ring, "equivalence": mode_equivalence, "finite-guard": mode_finite_guard,
             "host-ahead": mode_host_ahead, "env-step-early": mode_env_step_early, "checkpoint": mode_checkpoint,
             "explore": mode_explore}
    result = modes[args.mode](args)
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
