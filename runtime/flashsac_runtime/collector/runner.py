"""The off-policy loop with a device-resident collector: one process, no host copies.

The host path (``DoubleBufferOffPolicyRunner``) runs the env in a spawned collector
process that steps UniLab's NumPy env, packs transitions into shared memory and
waits each step for the learner's actions. With an env that steps on the learner's
device (``DeviceVecEnv``) that process, its queues and its copies have nothing left
to do: here the learner's process takes each action from the current weights (the
learner's inference policy, the graphed forward where the learner has one), steps
the env and writes the transition into a ring on the same device, and the
learner's own update path (``update_iteration``: the whole-cycle CUDA graph, or the
per-update path) samples from that ring.

Same algorithm and schedule as the host path, made sequential. There, the learner
serves tick ``t``'s action and immediately trains on the rows of ticks ``< t``
while the collector steps tick ``t``; each iteration serves ``env_steps_per_sync``
ticks (the first one until the replay holds ``learning_starts``/``batch_size``
rows) and draws its batch with the seed ``base_seed + iteration`` from the rows
visible then. Here the action of an iteration's last tick is kept pending and its
env step runs at the start of the next iteration, after this iteration's batch was
gathered: every batch sees the rows, the ring contents and the seed the host path's
would, and the actions come from the same weights in the same random stream order.

The host reads each iteration's results an iteration late. Waiting for the device at the end of every
iteration left the GPU idle while the host read the metrics, logged and launched the next iteration's first
kernels. Here the host queues iteration t+1's work (its order on the device fixed by the streams and events
as before) and only then waits for iteration t's end and logs it (``_launched``: its metrics and episode
statistics were copied where it ended in the stream). The device runs the same work in the same order, so
the training is unchanged; one wait per iteration remains. ``host_ahead=False`` waits at each iteration's
end; checkpoints, stops and the compile-behind swap first finish the iteration in flight.

The env step starts as soon as its action is sampled (``env_step_early``). The step reads the action and the
env's own state, nothing of the ring: only the transition's write into the ring has to wait until the
iteration's batch is gathered (it may overwrite rows the batch reads). So the side stream steps the env right
after the action and waits for the gather only before the write; the reward statistics and the batch gather
no longer sit between the action and the env step, which at a few hundred envs is the iteration's longest
chain. Same work, same values, same order of every write; ``env_step_early=False`` starts the step after the
gather, for comparison.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import statistics
import sys
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import torch

from flashsac_runtime import cuda_capture
from flashsac_runtime.learner.update_schedule import iteration_update_schedule
from uni_rl.logging import OffPolicyLogger
from uni_rl.logging.metrics_drain import drain_collector_metrics
from flashsac_runtime.learner.compile_behind import CompileBehind
from flashsac_runtime.collector.device_env import DeviceStep, DeviceVecEnv
from flashsac_runtime.collector.episode_stats import DeviceEpisodeStats, StagedEpisodeStats
from flashsac_runtime.collector.replay_ring import DeviceReplayRing
from uni_rl.offpolicy.double_buffer_runner import (
    DoubleBufferOffPolicyRunner,
    algo_display_name,
    save_learner_checkpoint,
    warm_up_learner,
)
from flashsac_runtime.collector.iteration_clock import IterationClock, IterationLaps, overlap_ms
from flashsac_runtime import preemption
from uni_rl.offpolicy.runner import (
    build_offpolicy_sample_info,
    build_reward_comparison_metrics,
    compute_train_start_threshold,
    update_reward_stats_from_replay,
)
from uni_rl.offpolicy.worker import sample_offpolicy_actions
from uni_rl.utils.seed import apply_training_seed
from flashsac_runtime.staged_read import StagedRead

#: How run metrics and summaries name this collector.
COLLECTOR_NAME = "device-resident"
#: Iterations between reads of the device episode statistics (each read is one host sync).
EPISODE_STATS_INTERVAL = 10
#: Phases of the iteration time split, in loop order (``<phase>_ms`` in the collector timing).
PHASES = (
    "action_sampling",
    "env_step",
    "replay_write",
    "episode_stats",
    "reward_stats",
    "replay_sample",
    "learner",
)
_COLLECTION_PHASES = ("env_step", "replay_write", "episode_stats")
#: The env step by parts, where the env stamps them (its ``step_stamps``: ``<part>`` ms per step, averaged over
#: the iteration's steps), and how long the env step beside the learner ran while the learner ran (CUDA, the env
#: step on its side stream). Not more phases of the loop: times within and across the phases above.
SPLIT = ("env_physics", "env_terms", "env_reset", "env_step_beside_learner")


@dataclasses.dataclass
class _Launched:
    """An iteration queued on the device whose host side (metrics, log) is still to do."""

    iteration: int
    started: float  # host clock at the iteration's start
    update_metrics: list[dict[str, float]]
    learner_metrics: Callable[[], dict[str, float]]
    episodes: StagedEpisodeStats | None
    total_steps: int
    buffer_size: int
    laps: IterationLaps
    side_laps: IterationLaps | None
    end: torch.cuda.Event | None  # recorded after every piece of the iteration's work (None on CPU)
    step_stamps: StagedRead | None  # the env's ring of step timestamps at the iteration's end


class DeviceCollectorRunner:
    """FlashSAC training with the collector in the learner's process (``training.collector=device``)."""

    #: A checkpoint to continue from (its ``training_state``); set before ``learn``.
    resume_from: str | None = None
    #: Store the replay ring, the env and the loop's state in every checkpoint: a resume is then exact.
    save_replay: bool = False
    #: Start on the eager path and compile in a helper process; swap at a boundary (``compile_behind``).
    compile_behind: bool = False

    def __init__(
        self,
        *,
        learner: Any,
        env: DeviceVecEnv,
        env_name: str,
        algo_type: str,
        num_envs: int,
        replay_buffer_n: int,
        batch_size: int,
        learning_starts: int,
        updates_per_step: int,
        policy_frequency: int,
        env_steps_per_sync: int,
        obs_normalization: bool,
        seed: int | None,
        episode_stats_interval: int = EPISODE_STATS_INTERVAL,
        overlap: bool = True,
        host_ahead: bool = True,
        env_step_early: bool = True,
    ) -> None:
        if int(env_steps_per_sync) < 1:
            raise ValueError("Off-policy env_steps_per_sync must be >= 1")
        if int(env.num_envs) != int(num_envs):
            raise ValueError(f"the device env has {env.num_envs} envs, the config asks for {num_envs}")
        if not hasattr(learner, "update_iteration"):
            raise TypeError(f"{type(learner).__name__} has no update_iteration(); the device collector needs one")
        if getattr(learner, "use_cuda_graph_critic_packed_staging", False) or getattr(
            learner, "use_cuda_graph_actor_packed_staging", False
        ):
            raise ValueError(
                "training.collector=device samples the packed replay layout only; "
                "turn use_cuda_graph_critic_packed_staging/use_cuda_graph_actor_packed_staging off"
            )
        self.learner = learner
        self.env = env
        self.env_name = env_name
        self.algo_type = algo_type
        self.num_envs = int(num_envs)
        self.replay_buffer_n = int(replay_buffer_n)
        self.batch_size = int(batch_size)
        self.learning_starts = max(int(learning_starts), 0)
        self.updates_per_step = int(updates_per_step)
        self.policy_frequency = int(policy_frequency)
        self.env_steps_per_sync = int(env_steps_per_sync)
        self.obs_normalization = bool(obs_normalization)
        self.seed = seed
        self.episode_stats_interval = max(int(episode_stats_interval), 1)
        self.device = torch.device(env.device)
        # On CUDA the env step of an iteration's last tick runs on its own stream while the learner updates.
        self._side_stream = torch.cuda.Stream(self.device) if overlap and self.device.type == "cuda" else None
        # The host queues iteration t+1's work before it reads iteration t's results (``_launched``).
        self.host_ahead = bool(host_ahead)
        # The side stream's env step starts after the action, not after the batch gather (module docstring).
        self.env_step_early = bool(env_step_early) and self._side_stream is not None
        # FlashSAC's action sampling as one CUDA graph (``_record_act``) where inference is graphed on CUDA.
        self._act_graph_possible = (algo_type == "flashsac" and self.device.type == "cuda"
                                    and bool(getattr(learner, "use_cuda_graph_inference", False)))
        self._act_graph_wanted = self._act_graph_possible
        self._act_graph: torch.cuda.CUDAGraph | None = None
        self._stamped_through = 0  # the last env step whose parts ``_split_ms`` has read
        self._act_out: torch.Tensor | None = None
        self.obs_dim = int(env.policy_obs_dim)
        self.critic_obs_dim = int(env.critic_obs_dim)
        self.action_dim = int(env.action_dim)
        self.train_start_threshold = compute_train_start_threshold(
            self.batch_size, self.learning_starts, self.num_envs
        )
        self.last_run_summary: dict[str, Any] | None = None
        self._active_logger: OffPolicyLogger | None = None
        self.runtime_manifest: dict[str, Any] = {
            "collector": COLLECTOR_NAME,
            "collector_process": False,
            "inference_owner": "learner",
            "env_device": str(self.device),
            "replay_storage": "device ring written in the learner's process",
            "env_step_overlaps_learner": self._side_stream is not None,
            "host_reads_an_iteration_behind": self.host_ahead,
            "env_step_before_batch_gather": self.env_step_early,
        }
        # As the host runner does once its learner exists: the action noise and the
        # updates start from the configured seed's random stream.
        apply_training_seed(self.seed, torch_runtime=True, cuda=True)

    def learn(
        self,
        max_iterations: int = 1500,
        save_interval: int = 50,
        log_dir: str = "logs",
        logger_type: str = "tensorboard",
    ) -> None:
        self._behind: CompileBehind | None = None
        helper = lambda: [self._behind.process] if self._behind is not None else []  # noqa: E731
        with preemption.StopSignals(helper, label="device-collector training") as signals:
            try:
                self._learn(signals, max_iterations, save_interval, log_dir, logger_type)
            except preemption._Stop:  # noqa: SLF001
                self._stop_on_signal(signals, log_dir)
            finally:
                if self._behind is not None:
                    self._behind.close()

    def _learn(
        self,
        signals: preemption.StopSignals,
        max_iterations: int,
        save_interval: int,
        log_dir: str,
        logger_type: str,
    ) -> None:
        os.makedirs(log_dir, exist_ok=True)
        resume = self._read_resume_state()
        ring = DeviceReplayRing(
            num_envs=self.num_envs,
            replay_buffer_n=self.replay_buffer_n,
            obs_dim=self.obs_dim,
            action_dim=self.action_dim,
            critic_dim=self.critic_obs_dim,
            sample_count=self.batch_size * self.updates_per_step,
            base_seed=int(self.seed or 0),
            device=self.device,
        )
        episodes = DeviceEpisodeStats(self.num_envs, self.device)
        clock = IterationClock(self.device)
        schedule = iteration_update_schedule(self.updates_per_step, self.policy_frequency)
        logger = OffPolicyLogger(
            algo_name=algo_display_name(self.algo_type),
            max_iterations=max_iterations,
            num_envs=self.num_envs,
            env_name=self.env_name,
            obs_dim=self.obs_dim,
            action_dim=self.action_dim,
            num_gpus=1,
            log_dir=log_dir,
            log_backend=logger_type,
        )
        logger.update_runtime_manifest(self.runtime_manifest)
        logger.log_status(f"Collector: {COLLECTOR_NAME} (env on {self.device}, in the learner's process)")
        self._active_logger = logger
        logger.start()

        first = self.env.reset()
        describe = getattr(self.env, "describe", None)
        if callable(describe):  # after the first reset: the env's step graph is recorded there
            form = dict(describe())
            logger.update_runtime_manifest({"device_env": form})
            logger.log_status("Device env: " + ", ".join(f"{key} {value}" for key, value in form.items()))
        # The observations an action is chosen on must outlive the env step that
        # overwrites the env's buffers: the ring stores them with that step's outcome.
        obs = first.policy_obs.clone()
        critic = first.critic_obs.clone()
        prev_done = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        if resume is not None:
            # Before the warm-up: it captures on (and restores) the loaded learner state.
            self.learner.load_state_dict(resume["learner"])
        shapes = {"num_envs": self.num_envs, "batch_size": self.batch_size,
                  "updates_per_step": self.updates_per_step, "policy_frequency": self.policy_frequency}
        warm_up = lambda: warm_up_learner(self.learner, ring.dry_large_batch, obs, logger=logger, **shapes)  # noqa: E731
        if self.compile_behind:
            self._behind = CompileBehind.start(self.learner, ring.dry_large_batch, obs, warm_up=warm_up, **shapes)
        if self._behind is None:
            warm_up()
        else:
            logger.log_status(f"Compile behind: training starts on the eager path; compile helper pid "
                              f"{self._behind.process.pid}, the compiled paths from the boundary after it ends")

        metrics_queue: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        reward_history: deque = deque(maxlen=10)
        reward_components: dict[str, float] = {}
        phase_totals: defaultdict[str, float] = defaultdict(float)
        split_totals: defaultdict[str, float] = defaultdict(float)
        split_counts: defaultdict[str, int] = defaultdict(int)
        sync_total = 0
        best_mean_reward = float("-inf")
        last_mean_reward: float | None = None
        reward_stats_ptr = 0
        ckpt_path: str | None = None
        train_start_wall = time.time()
        pending: torch.Tensor | None = None
        side_clock = IterationClock(self.device)
        side_done: torch.cuda.Event | None = None  # the pending tick's env step, launched on the side stream
        iteration = 0
        pending_collected = False  # a resumed loop whose pending tick was stepped before the checkpoint
        if resume is not None:
            iteration = int(resume["iteration"])
            loop = resume.get("collector")
            if loop is not None:
                pending, pending_collected, reward_stats_ptr = self._load_collector_state(
                    loop, ring, episodes, obs, critic, prev_done
                )
                reward_history.extend(loop["reward_history"])
            preemption.restore_rng_states(resume["rng"], self.device)
            logger.log_status(
                f"Resumed from {self.resume_from} after iteration {iteration} "
                f"({'replay, env and loop state restored' if loop is not None else 'replay empty, envs reset'})"
            )
        first_iteration = iteration + 1
        launched: _Launched | None = None  # the iteration queued on the device, its host side still to do

        def finish(until: float | None = None) -> None:
            """The launched iteration's host side, once the device is done with it: metrics, log."""
            nonlocal launched, sync_total, best_mean_reward, last_mean_reward
            if launched is None:
                return
            done, launched = launched, None
            if done.end is not None:
                done.end.synchronize()
            host_syncs = done.laps.host_syncs + 1  # the wait for the iteration's end (on CPU: its work itself)
            iter_metrics: defaultdict[str, list[float]] = defaultdict(list)
            for metrics in done.update_metrics:
                for key, value in metrics.items():
                    iter_metrics[key].append(value)
            for key, value in done.learner_metrics().items():
                iter_metrics[key].append(value)
            message: dict[str, Any] = {"total_steps": done.total_steps, "buffer_size": done.buffer_size}
            if done.episodes is not None:
                message.update(done.episodes.message())
            phases_ms = done.laps.phases_ms()
            if done.side_laps is not None:
                for phase, value in done.side_laps.phases_ms().items():
                    phases_ms[phase] = phases_ms.get(phase, 0.0) + value
            split = self._split_ms(done)
            message["collector_timing_ms"] = {f"{phase}_ms": phases_ms.get(phase, 0.0) for phase in PHASES}
            message["collector_timing_ms"].update({f"{part}_ms": value for part, value in split.items()})
            metrics_queue.put(message)
            drain_collector_metrics(
                metrics_queue,
                reward_history,
                reward_components,
                logger,
                runner_label="DeviceCollectorRunner",
                raise_on_collector_error=True,
                require_buffer_size=True,
            )
            for phase, value in phases_ms.items():
                phase_totals[phase] += value
            for part, value in split.items():
                split_totals[part] += value
                split_counts[part] += 1
            sync_total += host_syncs

            avg_metrics = {key: statistics.mean(values) for key, values in iter_metrics.items() if values}
            avg_metrics["collector/host_syncs_per_iteration"] = float(host_syncs)
            mean_reward = statistics.mean(reward_history) if reward_history else None
            if mean_reward is not None:
                last_mean_reward = float(mean_reward)
                best_mean_reward = max(best_mean_reward, last_mean_reward)
            collection_s = sum(phases_ms.get(phase, 0.0) for phase in _COLLECTION_PHASES) / 1000.0
            action_s = phases_ms.get("action_sampling", 0.0) / 1000.0
            logger.log_step(
                iteration=done.iteration,
                metrics=avg_metrics,
                reward=mean_reward,
                reward_metrics=build_reward_comparison_metrics(reward_history, mean_reward or 0.0),
                reward_components=reward_components,
                train_time=phases_ms.get("learner", 0.0) / 1000.0,
                collector_wait_time=collection_s,
                learner_replay_sample_time=phases_ms.get("replay_sample", 0.0) / 1000.0,
                inference_forward_time=action_s,
                inference_time=action_s,
                iteration_time=(time.perf_counter() if until is None else until) - done.started,
                extra_info={
                    "throughput_steps": self.num_envs * self.env_steps_per_sync,
                    **build_offpolicy_sample_info(
                        replay_batch_size_per_rank=self.batch_size,
                        updates_per_step=self.updates_per_step,
                    ),
                },
            )

        for iteration in range(first_iteration, max_iterations + 1):
            # The last finished iteration is what a stop saves: this one is abandoned before it starts.
            def snapshot(iteration: int = iteration - 1) -> dict[str, Any]:
                finish()
                return self._training_state(iteration, ring, episodes, obs, critic, prev_done, pending,
                                            side_done, reward_stats_ptr, reward_history)

            self._snapshot = snapshot
            signals.check()
            if self._behind is not None and self._behind.swap_due:
                finish()  # the swap captures on the live learner: nothing of the previous iteration in flight
                if self._behind.poll(iteration):
                    pending = self._swapped_to_compiled(pending, logger)
            iteration_start = time.perf_counter()
            clock.start()
            ticks = 0
            while True:
                if side_done is not None:
                    torch.cuda.current_stream(self.device).wait_event(side_done)
                    side_done = None
                elif pending_collected:
                    pending_collected = False
                elif pending is not None:
                    self._collect(pending, obs, critic, prev_done, ring, episodes, clock)
                pending = self._act(obs, prev_done, clock)
                ticks += 1
                if ticks >= self.env_steps_per_sync and ring.size >= self.train_start_threshold:
                    break
            if iteration == first_iteration:
                train_start_wall = logger.start_training_timer()

            stepped = self._step_beside_learner(pending, side_clock) if self.env_step_early else None
            reward_stats_ptr = update_reward_stats_from_replay(
                self.learner,
                ring,
                start_ptr=reward_stats_ptr,
                end_ptr=ring.ptr,
                num_envs=self.num_envs,
                replay_source=ring,
            )
            clock.lap("reward_stats")
            large_batch = ring.sample_large_batch(iteration)
            clock.lap("replay_sample")
            if self._side_stream is not None:
                side_done = self._collect_beside_learner(pending, obs, critic, prev_done, ring, episodes, side_clock,
                                                         stepped)
            update_metrics = self.learner.update_iteration(
                large_batch, batch_size=self.batch_size, schedule=schedule
            )
            clock.lap("learner")
            this = self._launched(iteration, iteration_start, update_metrics, ring, episodes, clock,
                                  side_clock if side_done is not None else None, side_done,
                                  iteration % self.episode_stats_interval == 0 or iteration == max_iterations)
            self.learner.update_count += 1
            finish(until=iteration_start)  # the previous iteration's host side, while this one runs
            launched = this
            if not self.host_ahead or (save_interval > 0 and iteration % save_interval == 0):
                finish()
            if save_interval > 0 and iteration % save_interval == 0:
                ckpt_path = save_learner_checkpoint(
                    self.learner, log_dir=log_dir, iteration=iteration, logger=logger,
                    training_state=self._training_state(
                        iteration, ring, episodes, obs, critic, prev_done, pending, side_done,
                        reward_stats_ptr, reward_history,
                    ),
                )
        finish()

        final_ckpt_path = os.path.join(log_dir, f"model_{max_iterations}.pt")
        if ckpt_path != final_ckpt_path:
            ckpt_path = save_learner_checkpoint(
                self.learner, log_dir=log_dir, iteration=max_iterations, logger=logger,
                training_state=self._training_state(
                    max_iterations, ring, episodes, obs, critic, prev_done, pending, side_done,
                    reward_stats_ptr, reward_history,
                ),
            )
        self._snapshot = None
        logger.finish()
        summary = DoubleBufferOffPolicyRunner._make_summary(
            "completed",
            iteration,
            logger,
            last_mean_reward,
            best_mean_reward if last_mean_reward is not None else None,
            ckpt_path,
            train_start_wall,
            None,
        )
        iterations = max(iteration, 1)
        if self._behind is not None:
            summary["compile_behind"] = self._behind.record
        summary.update(
            collector=COLLECTOR_NAME,
            host_syncs_per_iteration=sync_total / iterations,
            collector_phases_ms={**{phase: phase_totals[phase] / iterations for phase in PHASES},
                                 **{part: split_totals[part] / split_counts[part] for part in SPLIT
                                    if split_counts[part]}},
        )
        self.last_run_summary = summary
        self._active_logger = None

    # --- stop and resume ------------------------------------------------------------------------------------

    def _read_resume_state(self) -> dict[str, Any] | None:
        """The learner state, iteration, RNG and (when saved) collector state of ``resume_from``."""
        if self.resume_from is None:
            return None
        learner, state = preemption.read_resume_state(self.resume_from, self.device)
        loop = state.get("collector")
        if loop is not None and loop["num_envs"] != self.num_envs:
            raise ValueError(f"{self.resume_from} holds {loop['num_envs']} envs' state, this run has {self.num_envs}")
        return {"learner": learner, **state}

    def _training_state(
        self,
        iteration: int,
        ring: DeviceReplayRing,
        episodes: DeviceEpisodeStats,
        obs: torch.Tensor,
        critic: torch.Tensor,
        prev_done: torch.Tensor,
        pending: torch.Tensor | None,
        side_done: Any,
        reward_stats_ptr: int,
        reward_history: deque,
    ) -> dict[str, Any]:
        """What a resume after ``iteration`` needs beyond the learner's state dict.

        Always: the iteration and every RNG state. With ``save_replay``: the replay ring's rows and
        pointer, the env's state, the episode statistics, the loop's observations, dones and pending
        action (its env step already taken when it ran on the side stream), the reward-statistics pointer.
        """
        if side_done is not None:
            side_done.synchronize()
        elif self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        state: dict[str, Any] = {"iteration": int(iteration), "rng": preemption.rng_states(self.device),
                                 "collector": None}
        if not self.save_replay:
            return state
        env_state = preemption.env_state(self.env)
        cpu = lambda t: None if t is None else t.detach().to("cpu", copy=True)  # noqa: E731
        state["collector"] = {
            "num_envs": self.num_envs,
            "ring_ptr": int(ring.ptr),
            "ring_rows": cpu(ring._storage[: ring.size]),  # noqa: SLF001
            "episodes": preemption.env_state(episodes),
            "env": None if env_state is None else {k: (kind, cpu(v) if kind == "tensor" else v)
                                                  for k, (kind, v) in env_state.items()}
            if "own" not in env_state else env_state,
            "obs": cpu(obs), "critic": cpu(critic), "prev_done": cpu(prev_done), "pending": cpu(pending),
            "pending_collected": side_done is not None,
            "reward_stats_ptr": int(reward_stats_ptr),
            "reward_history": list(reward_history),
            "exploration": {name: preemption.transient_buffers(module) for name, module in self._policies().items()},
        }
        return state

    def _policies(self) -> dict[str, torch.nn.Module]:
        """The modules that act (their held exploration noise is loop state, not in the learner's state dict)."""
        policies = {"actor": self.learner.actor}
        inference = getattr(self.learner, "inference_policy", None)
        if isinstance(inference, torch.nn.Module) and inference is not self.learner.actor:
            policies["inference_policy"] = inference
        return policies

    def _load_collector_state(
        self,
        loop: dict[str, Any],
        ring: DeviceReplayRing,
        episodes: DeviceEpisodeStats,
        obs: torch.Tensor,
        critic: torch.Tensor,
        prev_done: torch.Tensor,
    ) -> tuple[torch.Tensor | None, bool, int]:
        rows = loop["ring_rows"]
        ring._storage[: rows.shape[0]].copy_(rows.to(self.device))  # noqa: SLF001
        ring.ptr = int(loop["ring_ptr"])
        preemption.load_env_state(episodes, loop["episodes"])
        if loop["env"] is not None:
            preemption.load_env_state(self.env, loop["env"])
        else:
            raise ValueError("the checkpoint holds the replay but not the env's state: resume without it")
        for live, key in ((obs, "obs"), (critic, "critic"), (prev_done, "prev_done")):
            live.copy_(loop[key].to(self.device))
        pending = None if loop["pending"] is None else loop["pending"].to(self.device)
        policies = self._policies()
        for name, buffers in loop.get("exploration", {}).items():
            if name in policies:
                preemption.load_transient_buffers(policies[name], buffers)
        return pending, bool(loop["pending_collected"]), int(loop["reward_stats_ptr"])

    def _stop_on_signal(self, signals: preemption.StopSignals, log_dir: str) -> None:
        """Save the last finished iteration (unless it is saved already), close the logger, raise the stop."""
        snapshot = getattr(self, "_snapshot", None)
        self._snapshot = None
        checkpoint, iteration = None, 0
        logger = self._active_logger
        if snapshot is not None:
            state = snapshot()
            iteration = int(state["iteration"])
            if iteration > 0 and logger is not None:
                checkpoint = save_learner_checkpoint(
                    self.learner, log_dir=log_dir, iteration=iteration, logger=logger, training_state=state
                )
        assert signals.signum is not None
        stop = preemption.TrainingInterrupted(signals.signum, iteration, checkpoint, signals.seconds_since())
        self.last_run_summary = {"status": "interrupted", "completed_iterations": iteration,
                                 "last_checkpoint": checkpoint, "signal": preemption.signal_name(signals.signum),
                                 "collector": COLLECTOR_NAME}
        raise stop

    def _swapped_to_compiled(self, pending: torch.Tensor | None, logger: OffPolicyLogger) -> torch.Tensor | None:
        """After the swap: the action graph is recorded again, on the compiled forward, at the next tick.

        The pending action may live in the old graph's output buffer: it is copied out before the graph goes.
        """
        assert self._behind is not None
        record = self._behind.record
        logger.log_status(f"Compile behind: compiled paths from iteration {record['swap_iteration']} "
                          f"({record['swap_after_start_s']:.1f} s after the start, {record['swap_pause_s']:.1f} s "
                          f"pause to load and capture; helper exit {record['helper_exit_code']})")
        if self._act_graph is not None:
            pending = None if pending is None else pending.clone()
            self._act_graph, self._act_out = None, None
        self._act_graph_wanted = self._act_graph_possible
        return pending

    def _act(self, obs: torch.Tensor, prev_done: torch.Tensor, clock: IterationClock) -> torch.Tensor:
        """One tick's actions from the current weights, as the host path serves a request.

        On CUDA with graphed inference, FlashSAC's whole sampling is one CUDA graph from the second tick on
        (``_record_act``); its output buffer is rewritten by the next tick's replay, after this tick's env step
        has consumed it.
        """
        if self._act_graph is not None:
            self._act_graph.replay()
            actions = self._act_out
        else:
            actions = self._sample_actions(obs, prev_done, clock)
            if self._act_graph_wanted:
                self._act_graph_wanted = False
                self._record_act(obs, prev_done)
        clock.lap("action_sampling")
        return actions

    def _sample_actions(self, obs: torch.Tensor, prev_done: torch.Tensor, clock: IterationClock) -> torch.Tensor:
        """The tick's actions, eagerly (the learner's graphed forward where it has one).

        FlashSAC's exploration noise is drawn without asking the host whether any env
        redraws (``explore(sync_free=True)``): no host sync. Other actors sample as the
        host path does and count the one sync their noise test may make.
        """
        actor_obs = self.learner.obs_normalizer(obs, update=False) if self.obs_normalization else obs
        policy = getattr(self.learner, "inference_policy", self.learner.actor)
        with torch.no_grad():
            if self.algo_type == "flashsac":
                return policy.explore(actor_obs, dones=prev_done, deterministic=False, sync_free=True)
            actions = sample_offpolicy_actions(
                actor=policy,
                algo_type=self.algo_type,
                obs_torch=actor_obs,
                prev_dones_torch=prev_done,
            )
        clock.count_sync()
        return actions

    def _record_act(self, obs: torch.Tensor, prev_done: torch.Tensor) -> None:
        """The tick's sampling (normalizer, the actor's forward, the exploration noise) as one CUDA graph.

        Recorded after one eager tick (kernel loads, the held noise's allocation) on the persistent ``obs`` and
        ``prev_done`` buffers, with the actor itself (a graph is not replayed inside another's capture). The
        replay reads the current weights, statistics and held noise, which every path changes in place, and
        draws from torch's default generator as the eager call does. A capture that fails leaves the eager
        path, with the reason on stderr.
        """
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.no_grad(), cuda_capture.capture(graph, capture_error_mode="thread_local"):
                actor_obs = self.learner.obs_normalizer(obs, update=False) if self.obs_normalization else obs
                out = self.learner.actor.explore(actor_obs, dones=prev_done, deterministic=False, sync_free=True)
        except RuntimeError as exc:
            print(f"DeviceCollectorRunner: action sampling stays eager: {str(exc).splitlines()[0]}", file=sys.stderr)
            return
        self._act_graph, self._act_out = graph, out

    def _collect(
        self,
        actions: torch.Tensor,
        obs: torch.Tensor,
        critic: torch.Tensor,
        prev_done: torch.Tensor,
        ring: DeviceReplayRing,
        episodes: DeviceEpisodeStats,
        clock: IterationClock,
    ) -> None:
        """Step the env with ``actions`` (chosen on ``obs``), store it, advance ``obs`` in place."""
        step = self.env.step(actions)
        clock.lap("env_step")
        self._store(step, actions, obs, critic, prev_done, ring, episodes, clock)

    def _store(
        self,
        step: DeviceStep,
        actions: torch.Tensor,
        obs: torch.Tensor,
        critic: torch.Tensor,
        prev_done: torch.Tensor,
        ring: DeviceReplayRing,
        episodes: DeviceEpisodeStats,
        clock: IterationClock,
    ) -> None:
        """Write the stepped transition into the ring and the episode statistics; advance ``obs`` in place."""
        ring.write(obs, critic, actions, step)
        clock.lap("replay_write")
        done = torch.logical_or(step.terminated, step.truncated)
        episodes.record(step.reward, done, step.truncated)
        obs.copy_(step.policy_obs)
        critic.copy_(step.critic_obs)
        prev_done.copy_(done)
        clock.lap("episode_stats")

    def _collect_beside_learner(
        self,
        actions: torch.Tensor,
        obs: torch.Tensor,
        critic: torch.Tensor,
        prev_done: torch.Tensor,
        ring: DeviceReplayRing,
        episodes: DeviceEpisodeStats,
        side_clock: IterationClock,
        stepped: DeviceStep | None = None,
    ) -> torch.cuda.Event:
        """``_collect`` of the iteration's last tick on the side stream, while the learner updates.

        The update math and schedule are those of the sequential loop: the batch was gathered before (the
        side stream waits for it, so the ring write cannot touch rows it reads), the next action waits for
        the returned event, and the env, the ring and the episode statistics see the same values in the
        same order. Only the device's timeline changes: the env step and the learner's graph run at once.
        ``stepped``: the env step already launched on the side stream (``_step_beside_learner``); only the
        write is left.
        """
        side = self._side_stream
        assert side is not None
        side.wait_stream(torch.cuda.current_stream(self.device))
        for tensor in (actions, obs, critic, prev_done):
            tensor.record_stream(side)
        with torch.cuda.stream(side):
            if stepped is None:
                side_clock.start()
                self._collect(actions, obs, critic, prev_done, ring, episodes, side_clock)
            else:
                self._store(stepped, actions, obs, critic, prev_done, ring, episodes, side_clock)
            done = torch.cuda.Event()
            done.record(side)
        return done

    def _step_beside_learner(self, actions: torch.Tensor, side_clock: IterationClock) -> DeviceStep:
        """The env step of the iteration's last tick on the side stream, launched right after its action.

        The side stream waits for the action (the current stream's work so far) and nothing later: the
        reward statistics and the batch gather that follow on the current stream read only ring rows, which
        this step does not touch. ``_collect_beside_learner`` then writes the transition after the gather.
        """
        side = self._side_stream
        assert side is not None
        side.wait_stream(torch.cuda.current_stream(self.device))
        actions.record_stream(side)
        with torch.cuda.stream(side):
            side_clock.start()
            step = self.env.step(actions)
            side_clock.lap("env_step")
        return step

    def _launched(
        self,
        iteration: int,
        started: float,
        update_metrics: list[dict[str, float]],
        ring: DeviceReplayRing,
        episodes: DeviceEpisodeStats,
        clock: IterationClock,
        side_clock: IterationClock | None,
        side_done: torch.cuda.Event | None,
        read_episodes: bool,
    ) -> _Launched:
        """What the host needs of the iteration just queued, taken where it ends in the stream.

        The current stream waits for the side stream's env step, then the iteration's deferred metrics and
        (every ``episode_stats_interval`` iterations) the episode statistics are staged there, with no wait
        (``StagedRead``), and an event marks the end: the host reads them after that event, while the next
        iteration's work runs. A learner without staged metrics is read now (one sync, counted).
        """
        if side_done is not None:
            torch.cuda.current_stream(self.device).wait_event(side_done)
        if getattr(self.learner, "deferred_metrics", False):
            stage = getattr(self.learner, "stage_deferred_metrics", None)
            if stage is not None:
                learner_metrics = stage().read
            else:
                values = self.learner.read_deferred_metrics()
                clock.count_sync()
                learner_metrics = lambda: values  # noqa: E731
        else:
            # The per-update path returned its metrics as floats: one sync per value read (an upper bound
            # for the manual-graph paths); the whole-cycle graph's come with the iteration's end.
            if not getattr(self.learner, "use_whole_cycle_cuda_graph", False):
                clock.count_sync(sum(len(metrics) for metrics in update_metrics))
            learner_metrics = dict
        staged_episodes = episodes.stage_read() if read_episodes else None
        stamps = getattr(self.env, "step_stamps", None)
        staged_stamps = None if stamps is None else StagedRead(stamps.ring)
        end = None
        if self.device.type == "cuda":
            end = torch.cuda.Event()
            end.record(torch.cuda.current_stream(self.device))
        return _Launched(iteration, started, update_metrics, learner_metrics, staged_episodes, int(ring.ptr),
                         int(ring.size), clock.take(), None if side_clock is None else side_clock.take(), end,
                         staged_stamps)

    def _split_ms(self, done: _Launched) -> dict[str, float]:
        """The finished iteration's ``SPLIT``: the env's parts of its steps since the last read (its ring of step
        timestamps, read with the iteration's other results), and the learner's overlap with the env step on the
        side stream (the two spans' time at once, from their events)."""
        split: dict[str, float] = {}
        if done.step_stamps is not None:
            parts, self._stamped_through = self.env.step_stamps.split_ms(done.step_stamps.tolist(),
                                                                          self._stamped_through)
            split.update(parts)
        if done.side_laps is not None:
            learner, env_step = done.laps.span("learner"), done.side_laps.span("env_step")
            if learner is not None and env_step is not None:
                split["env_step_beside_learner"] = overlap_ms(done.laps.start, learner, env_step)
        return split

    def close(self) -> None:
        logger = self._active_logger
        self._active_logger = None
        try:
            if logger is not None:
                logger.close()
        finally:
            close_env = getattr(self.env, "close", None)
            if callable(close_env):
                close_env()
