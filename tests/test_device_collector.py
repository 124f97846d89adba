"""The device-resident collector (`training.collector=device`; uni_rl 0010, unilab 0005, flashsac_runtime.collector and .envs) on the CPU.

No fake env: UniLab's real G1 Walk Flat env on CPU MuJoCo, from the tree the real applier patched, behind the
`DeviceVecEnv` contract through a thin adapter (`tests/device_env_adapter.py`, CPU tensors). Each check runs in
a fresh process (`tests/device_collector_harness.py`, or UniLab's own training command line) and has a negative
control that must fail on a broken input:

- the replay ring holds exactly the transitions the env produced, observations, actions, rewards, dones,
  truncation and the final observation of every done row as its next observation, over ~300 steps with resets
  and a wrapped ring (control: an off-by-one ring index);
- a short training through UniLab's Hydra command line completes, names the collector and the host syncs per
  iteration in its run metrics, and writes checkpoints the host path's loaders take (control: one without its
  actor); a task without a device env is a one-line refusal;
- with the same env outputs, the batches and the learner after two iterations on the device ring are bitwise
  those of the host path's replay code and per-update loop (control: a ring storing the post-reset observation
  as a done row's next observation);
- the actor's sync-free exploration (no host test of whether an env redraws) gives the host test's actions
  and random stream at every step of 200 with 16 envs (control: one env, where some steps redraw nothing and
  the two streams part);
- a NaN batch is skipped by the finite guard and training goes on (control: without the guard the NaN reaches
  the policy and the env refuses its actions).

The processes are independent and run side by side, one per core (conftest.SideBySide; the harness and the
trainer's thread budget give each one torch thread on 2 cores); each test asserts on its own.

What needs a GPU (CUDA events, the whole-cycle graph and the graphed inference inside this loop, a MuJoCo Warp
device env) is not run here; see the README.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import PROJECT, SideBySide, runnable_tree, side_by_side

HARNESS = PROJECT / "tests" / "device_collector_harness.py"
TRAIN = "src/unilab/scripts/train_flashsac.py"
FACTORY = "device_env_adapter:make_g1_walk_flat_cpu_env"
# 16 envs, batch 32, learning_starts 2: the first iteration serves 3 ticks (the ring holds 32 rows after 2).
CLI_SETTINGS = ("task=g1_walk_flat/mujoco", "algo.num_envs=16", "algo.batch_size=32", "algo.replay_buffer_n=8",
                "algo.learning_starts=2", "algo.updates_per_step=2", "algo.policy_frequency=2",
                "algo.max_iterations=12", "algo.save_interval=5", "training.no_play=true",
                "training.export_onnx=false", "training.logger=tensorboard")
PHASES = {"action_sampling", "env_step", "replay_write", "episode_stats", "reward_stats", "replay_sample", "learner"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> tuple[Path, Path]:
    checkout, overlay = applied_session
    return runnable_tree(checkout, tmp_path_factory.mktemp("device-collector") / "tree"), overlay


def _env(tree: tuple[Path, Path]) -> dict[str, str]:
    root, overlay = tree
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHSAC_PROVENANCE_DIR")}
    env["PYTHONPATH"] = os.pathsep.join(map(str, (overlay, root / "src", PROJECT / "experiments" / "profile", PROJECT / "tests")))
    return env


def _run(tree: tuple[Path, Path], *argv: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "ignore", *argv], cwd=tree[0], env={**_env(tree), **extra},
                          capture_output=True, text=True, timeout=600, check=False)


def harness(tree: tuple[Path, Path], tmp_path: Path, mode: str, *args: str) -> dict:
    proc = _run(tree, str(HARNESS), mode, "--log-dir", str(tmp_path / "logs"), *args)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _train(tree: tuple[Path, Path], logs: Path, *settings: str, **extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    return _run(tree, TRAIN, *settings, f"training.log_dir='{logs}'", **extra), logs


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tree: tuple[Path, Path],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySide]:
    """Each test's process (the harness or UniLab's command line, one torch thread each), side by side."""
    def where(name: str) -> Path:
        return tmp_path_factory.mktemp(name.removeprefix("test_")[:40])

    device = ("training.collector=device", f"+training.device_env_factory={FACTORY}")
    mjwarp = [s for s in CLI_SETTINGS if not s.startswith(("task=", "algo.max_iterations"))]
    table: dict[str, Callable[[], Any]] = {
        "test_ring_holds_exactly_the_transitions_the_env_produced": lambda: harness(tree, where("ring"), "ring"),
        "test_off_by_one_ring_index_is_caught": lambda: harness(tree, where("ring-broken"), "ring", "--broken"),
        "test_hydra_cli_trains_and_the_host_path_loads_its_checkpoint":
            lambda: _train(tree, where("hydra") / "run", *CLI_SETTINGS, *device),
        "test_hydra_cli_trains_on_the_mjwarp_device_env":
            lambda: _train(tree, where("mjwarp") / "run", "task=g1_walk_flat/mjwarp", *mjwarp,
                           "algo.max_iterations=6", "training.collector=device", UNISIM_MJWARP_ALLOW_CPU="1",
                           MUJOCO_GL="disable", CUDA_VISIBLE_DEVICES=""),
        "test_a_task_without_a_device_env_is_refused_in_one_line":
            lambda: _train(tree, where("refused") / "run", *CLI_SETTINGS, "training.collector=device"),
        "test_learner_update_on_the_device_ring_equals_the_host_path":
            lambda: harness(tree, where("equivalence"), "equivalence"),
        "test_equivalence_sees_a_wrong_terminal_observation":
            lambda: harness(tree, where("equivalence-broken"), "equivalence", "--broken"),
        "test_finite_guard_skips_a_nan_batch_and_training_goes_on":
            lambda: harness(tree, where("finite-guard"), "finite-guard"),
        "test_without_the_finite_guard_the_nan_batch_reaches_the_policy":
            lambda: _run(tree, str(HARNESS), "finite-guard", "--broken", "--log-dir",
                         str(where("finite-guard-broken") / "logs")),
        "test_reading_results_an_iteration_behind_changes_nothing_logged_or_learned":
            lambda: harness(tree, where("host-ahead"), "host-ahead"),
        "test_an_unstaged_read_behind_is_caught":
            lambda: harness(tree, where("host-ahead-broken"), "host-ahead", "--broken"),
        "test_sync_free_exploration_is_the_host_tests_exploration": lambda: harness(tree, where("explore"), "explore"),
        "test_sync_free_exploration_parts_where_no_env_redraws":
            lambda: harness(tree, where("explore-one"), "explore", "--num-envs", "1"),
    }
    started = SideBySide(request).start(table)
    yield started
    started.close()


@pytest.fixture
def ran(request: pytest.FixtureRequest, runs: SideBySide) -> Any:
    """This test's process: the harness's JSON, or (for UniLab's command line) the process and its log folder."""
    return runs.result(request)


def test_ring_holds_exactly_the_transitions_the_env_produced(ran: dict) -> None:
    result = ran
    assert result["steps"] >= 250 and result["dones"] > 16 and result["wrapped"], result
    assert result["problems"] == []
    assert result["summary"]["collector"] == "device-resident"


def test_off_by_one_ring_index_is_caught(ran: dict) -> None:
    result = ran
    assert result["wrapped"]
    assert any(problem.endswith(": obs") for problem in result["problems"]), result["problems"][:10]


def test_hydra_cli_trains_and_the_host_path_loads_its_checkpoint(tree: tuple[Path, Path], tmp_path: Path,
                                                                 ran: tuple[subprocess.CompletedProcess, Path]) -> None:
    proc, logs = ran
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = json.loads((logs / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["completed_iterations"] == 12
    assert summary["collector"] == summary["runtime_manifest"]["collector"] == "device-resident"
    # Per iteration one wait, for its end (the actor's noise draws none): its deferred metrics and, every 10th
    # and the last iteration, the episode statistics were staged there and come with it.
    assert summary["host_syncs_per_iteration"] == 1.0
    assert set(summary["collector_phases_ms"]) == PHASES
    assert all(value >= 0.0 for value in summary["collector_phases_ms"].values())
    assert summary["total_env_steps"] == 13 * 16
    events = b"".join(p.read_bytes() for p in logs.glob("events.out.tfevents.*"))
    assert b"collector/host_syncs_per_iteration" in events and b"timing/collector_env_step_ms" in events
    assert sorted(p.name for p in logs.glob("model_*.pt")) == ["model_10.pt", "model_12.pt", "model_5.pt"]

    loaded, broken = side_by_side(
        lambda: harness(tree, tmp_path, "checkpoint", "--checkpoint", str(logs / "model_12.pt")),
        lambda: _run(tree, str(HARNESS), "checkpoint", "--checkpoint", str(logs / "model_12.pt"), "--broken"))
    # The learner's keys and the resume state beside them (uni_rl 0011).
    assert loaded["keys"] == sorted([*loaded["learner_keys"], "training_state"])
    assert loaded["update_count"] == 12 and loaded["actor_equal"]
    assert broken.returncode != 0 and "KeyError: 'actor'" in broken.stderr


OVERLAP = """
import json, time
import torch
from flashsac_runtime.collector.iteration_clock import IterationClock, overlap_ms
clock = IterationClock(torch.device("cpu"))
clock.start(); time.sleep(0.01); clock.lap("env_step"); time.sleep(0.02); clock.lap("learner")
laps = clock.take()
begin, end = laps.span("learner")
print(json.dumps({"learner_ms": (end - begin) * 1000.0, "missing": laps.span("replay_write"),
                  "touching": overlap_ms(laps.start, laps.span("learner"), laps.span("env_step")),
                  "cases": [overlap_ms(0.0, (0.0, 0.002), (0.001, 0.005)), overlap_ms(0.0, (0.0, 0.001), (0.002, 0.003)),
                            overlap_ms(0.0, (0.001, 0.004), (0.0, 0.010)), overlap_ms(0.5, (1.0, 1.5), (1.25, 2.0))]}))
"""


def test_the_overlap_of_two_spans_is_their_time_at_once(tree: tuple[Path, Path]) -> None:
    """The runner's ``env_step_beside_learner``: the time two spans of marks ran at once (on CUDA two streams'
    events, placed by their time after the iteration's first mark; the same arithmetic on the host clock here):
    partly overlapping, apart, one inside the other, after a later reference; an iteration's consecutive laps only
    touch."""
    proc = _run(tree, "-c", OVERLAP)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["learner_ms"] >= 20.0 and found["missing"] is None and found["touching"] == 0.0, found
    assert found["cases"] == pytest.approx([1.0, 0.0, 3.0, 250.0]), found


def _trained_on_mjwarp(ran: tuple[subprocess.CompletedProcess, Path]) -> dict:
    """A command-line run on the MJWarp device env that trained its 6 iterations and checkpointed at the 5th: its
    run summary."""
    proc, logs = ran
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = json.loads((logs / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["completed_iterations"] == 6
    assert summary["collector"] == "device-resident" and summary["total_env_steps"] == 7 * 16
    assert (logs / "model_5.pt").is_file()
    return summary


def test_hydra_cli_trains_on_the_mjwarp_device_env(ran: tuple[subprocess.CompletedProcess, Path]) -> None:
    """The real device env (flashsac_runtime.envs) behind the switch: UniLab's command line, MuJoCo Warp on Warp's CPU
    device, the task's own factory with the run's env override. The run records the form of the env's step it ran
    (the tree's defaults: the task's terms as torch operations, draws ahead, its reset only on a step with a done
    row, flashsac_runtime.envs; no CUDA graph on the CPU)."""
    summary = _trained_on_mjwarp(ran)
    assert summary["runtime_manifest"]["device_env"] == {
        "step_graph": "off", "stream": "none", "sensors": "position_velocity", "draws_ahead": "true",
        "reset": "when_done", "terms": "torch", "step_split": "stamped"}, summary["runtime_manifest"]
    # The env step by parts, from the env's timestamps (per step; ``env_step`` is per iteration, and the first
    # iteration steps three times): each part took time, and the parts fit in the step. Which part leads depends on
    # the machine's load, so the attribution is ``test_device_env.py``'s. No env step beside the learner on the CPU,
    # so no overlap.
    phases = summary["collector_phases_ms"]
    assert set(phases) == PHASES | {"env_physics", "env_terms", "env_reset"}, phases
    assert min(phases["env_physics"], phases["env_terms"], phases["env_reset"]) > 0.0, phases
    assert phases["env_physics"] + phases["env_terms"] + phases["env_reset"] <= phases["env_step"], phases


def test_a_task_without_a_device_env_is_refused_in_one_line(ran: tuple[subprocess.CompletedProcess, Path]) -> None:
    proc, logs = ran
    assert proc.returncode != 0
    expected = ("ValueError: training.collector=device: task G1WalkFlat on backend mujoco has no device env "
                "factory (known: G1WalkFlat/mjwarp, Go2JoystickFlat/mjwarp, G1MotionTrackingSAC/mjwarp); "
                "use training.collector=host")
    assert expected in proc.stderr.splitlines(), proc.stderr[-3000:]
    assert not (logs / "model_12.pt").exists()


def test_learner_update_on_the_device_ring_equals_the_host_path(ran: dict) -> None:
    result = ran
    assert result["dones"] > 0 and result["state_keys"] > 100
    assert result["batches_equal"] == [True, True]
    assert result["metrics_equal"] and result["state_equal"] and result["finite"], result


def test_equivalence_sees_a_wrong_terminal_observation(ran: dict) -> None:
    result = ran
    assert False in result["batches_equal"] and not result["state_equal"], result


def test_finite_guard_skips_a_nan_batch_and_training_goes_on(ran: dict) -> None:
    result = ran
    skips, finite_losses = result["critic_skip_rates"], result["critic_losses_finite"]
    first_skip = next(i for i, rate in enumerate(skips) if rate > 0)
    assert not all(finite_losses) and result["finite"], result
    assert skips[-1] == 0.0 and finite_losses[-1] and first_skip > 0, result


def test_without_the_finite_guard_the_nan_batch_reaches_the_policy(ran: subprocess.CompletedProcess) -> None:
    proc = ran
    assert proc.returncode != 0
    assert "ActionManager received an action containing NaN or Inf." in proc.stderr, proc.stderr[-3000:]


def test_reading_results_an_iteration_behind_changes_nothing_logged_or_learned(ran: dict) -> None:
    result = ran
    assert result["iterations"] == list(range(1, 31)) and result["rewards_logged"] > 0, result
    assert result["logged_equal"] and result["state_equal"] and result["ring_equal"], result
    assert result["host_syncs_per_iteration"] == [1.0, 1.0], result


def test_an_unstaged_read_behind_is_caught(ran: dict) -> None:
    result = ran
    assert not result["logged_equal"] and result["first_logged_difference"] is not None, result


def test_sync_free_exploration_is_the_host_tests_exploration(ran: dict) -> None:
    result = ran
    assert result == {"steps": 200, "actions_equal": 200, "streams_equal": 200}


def test_sync_free_exploration_parts_where_no_env_redraws(ran: dict) -> None:
    result = ran
    assert result["streams_equal"] < result["steps"], result
