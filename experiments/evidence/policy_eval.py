#!/usr/bin/env python3
"""Sim-to-sim evaluation of a FlashSAC checkpoint on CPU MuJoCo.

A policy trained on MuJoCo Warp must do on CPU MuJoCo what a policy trained on CPU MuJoCo does. This study
runs one checkpoint's deterministic policy on the CPU MuJoCo G1 Walk Flat env (``g1_walk_flat/mujoco`` from
the Hydra config of the tree in the working directory) and reports its reward per env step, the return and
length of the episodes it completes, and the per-term reward rates the env logs.

Loading and stepping are UniLab 1.3.2's own play path (``play_offpolicy`` →
``create_sac_playback_session``): the actor is built by uni_rl's ``build_actor`` from the tree's FlashSAC
config and the env's dims, UniLab's sim2sim contract check (``resolve_sim2sim_config``, strict as
``training.sim2sim_strict`` says) compares the source run's ``run_config.json`` with the target config, the
weights load under ``policy_load_dim_guard`` (a shape mismatch becomes the sim2sim diagnostic), and
``OffPolicyPlaybackSession.step_once`` normalizes the observations when the config asks for it and applies
``actor.explore(obs, deterministic=True)`` = tanh of the actor's mean. The env autoresets finished rows, as
in training; observation noise stays on (the task's own play contract), and so does the task's penalty
curriculum, which starts from its initial scale in every fresh env and moves with the evaluated policy's own
episode lengths (its last value is reported). One evaluation seed seeds the env (``seed`` of the env override,
as the training collector's) and Python/NumPy/torch; the same seed gives the same numbers.

Per seed: ``reward_per_step`` (mean of the env's reward over all envs and steps), the completed episodes
(count, mean return and length; an episode still running at the end is not counted), how many ended
terminated (a fall) and truncated (the time limit), the termination causes the env logs (an episode may count
under several), and ``reward_term_rate_means``: each term's weighted rate (raw value × weight, before the
``ctrl_dt`` scaling) as the env logs it, averaged over envs and steps, so ``ctrl_dt`` × their sum is
``reward_per_step``.

A checkpoint is either UniLab's layout (``<run dir>/<name>.pt`` beside ``run_config.json``) or a file with
``--run-config`` naming its run's ``run_config.json`` (the two are staged as a run dir for UniLab's loader).
``--training-run`` adds the training-time reward of that run (the benchmark's run JSON: the last
``--training-last`` logged collector rewards, on the run's own simulator, with exploration noise) to the output.

Run from a UniLab tree root with the overlay and the tree on PYTHONPATH; CPU only (torch CPU).

Run by ``device/device_evidence.sh sim2sim-eval`` on a GPU host's CPUs and by ``tests/test_policy_eval.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import run_files  # noqa: E402  (the one reader of run files)

ALGO = "flashsac"
CONFIG_DIR = Path("src/unilab/conf/flashsac")


@dataclass(frozen=True)
class Args:
    """The study's knobs (command line: the same names with dashes; ``--seeds 1 2 3``)."""

    num_envs: int = 256
    steps: int = 2000
    seeds: tuple[int, ...] = (1, 2, 3)
    task: str = "g1_walk_flat/mujoco"
    training_last: int = 100
    label: str = ""
    paths: dict[str, str] = field(default_factory=dict)


class EvalError(Exception):
    """Bad input: reported as one line on stderr."""


def compose_cfg(task: str, num_envs: int, seed: int, load_run: Path) -> Any:
    """The tree's FlashSAC config for ``task`` in eval mode (``unilab eval`` sets ``training.play_only``)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR.resolve()), version_base="1.3"):
        return compose(config_name="config", overrides=[
            f"task={task}", f"algo.seed={seed}", f"training.play_env_num={num_envs}",
            f"algo.load_run={load_run}", "training.play_only=true"])


def stage_run_dir(checkpoint: Path, run_config: Path | None, scratch: Path) -> Path:
    """The checkpoint path UniLab's loader gets: as given, or linked beside its run_config.json in ``scratch``."""
    if run_config is None:
        return checkpoint
    (scratch / "checkpoint.pt").symlink_to(checkpoint.resolve())
    (scratch / "run_config.json").symlink_to(run_config.resolve())
    return scratch / "checkpoint.pt"


def open_session(args: Args, seed: int, load_run: Path) -> tuple[Any, dict[str, Any]]:
    """UniLab's off-policy play session (env, actor, normalizer) for one evaluation seed."""
    import torch
    from uni_rl.utils.seed import apply_training_seed
    from unilab.base.config_adapter import create_env
    from unilab.scripts.train_offpolicy import build_offpolicy_play_env_cfg_override
    from unilab.utils.sim2sim import CrossBackendIncompatibleError
    from unilab.visualization.interactive_playback import RslRlPlaybackConfig, create_sac_playback_session

    cfg = compose_cfg(args.task, args.num_envs, seed, load_run)
    apply_training_seed(seed, torch_runtime=True, cuda=False)
    override = {**(build_offpolicy_play_env_cfg_override(ALGO, cfg) or {}), "seed": seed}
    playback_cfg = RslRlPlaybackConfig(
        task=str(cfg.training.task_name), load_run=str(load_run), checkpoint=None, action_mode="policy",
        policy_obs_mode="actor", algo_log_name=str(cfg.algo.algo_log_name), log_root=None,
        num_envs=args.num_envs)
    messages: list[str] = []
    try:
        session, _, checkpoint_path = create_sac_playback_session(
            playback_cfg=playback_cfg, cfg=cfg, root_dir=Path.cwd(), device="cpu", algo_name=ALGO,
            env_factory=lambda n: create_env(cfg, num_envs=n, env_cfg_override=override), log=messages.append)
    except CrossBackendIncompatibleError as exc:  # UniLab's sim2sim diagnostics: contract or dims
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        detail = [line for line in lines[1:] if line.startswith(("env policy obs dim", "env action dim",
                                                                 "size mismatch", "algo.", "env."))]
        raise EvalError(" ".join([lines[0], *detail[:4]])) from exc
    except RuntimeError as exc:
        if "state_dict" not in str(exc):
            raise
        raise EvalError(f"the checkpoint does not load into the tree's actor: {' '.join(str(exc).split())[:300]}") from exc
    if session.actor is None or checkpoint_path is None:
        raise EvalError(f"UniLab found no checkpoint at {load_run}: {' '.join(messages)}")
    torch.set_grad_enabled(False)
    return session, {"sim_backend": str(cfg.training.sim_backend), "ctrl_dt": float(cfg.env.ctrl_dt),
                     "actor_hidden_dim": int(cfg.algo.actor_hidden_dim),
                     "actor_num_blocks": int(cfg.algo.algo_params.actor_num_blocks),
                     "obs_normalization": bool(cfg.algo.obs_normalization),
                     "sim2sim_strict": bool(cfg.training.sim2sim_strict), "loader_log": messages}


def evaluate_seed(args: Args, seed: int, load_run: Path) -> dict[str, Any]:
    """Run the deterministic policy ``args.steps`` env steps on ``args.num_envs`` envs; reward statistics."""
    import torch

    session, facts = open_session(args, seed, load_run)
    env = session.env
    started = time.perf_counter()
    with torch.inference_mode():
        session.reset()
        running_return = np.zeros(args.num_envs, dtype=np.float64)
        running_length = np.zeros(args.num_envs, dtype=np.int64)
        returns: list[float] = []
        lengths: list[int] = []
        reward_sum, terminated, truncated = 0.0, 0, 0
        terms: dict[str, float] = {}
        causes: dict[str, float] = {}
        curriculum: dict[str, float] = {}
        for _ in range(args.steps):
            session.step_once()
            state = env.state
            reward = np.asarray(state.reward, dtype=np.float64).ravel()
            if not np.isfinite(reward).all():
                raise EvalError(f"non-finite reward at step {session.step_count} (seed {seed})")
            done = np.asarray(state.terminated | state.truncated).ravel()
            reward_sum += float(reward.sum())
            running_return += reward
            running_length += 1
            returns.extend(running_return[done].tolist())
            lengths.extend(running_length[done].tolist())
            terminated += int(np.count_nonzero(np.asarray(state.terminated).ravel()))
            truncated += int(np.count_nonzero(np.asarray(state.truncated).ravel()))
            running_return[done] = 0.0
            running_length[done] = 0
            for key, value in state.info.get("log", {}).items():
                group, _, name = key.partition("/")
                if group in ("reward", "Episode_Termination"):
                    sums = terms if group == "reward" else causes
                    sums[name] = sums.get(name, 0.0) + float(value)
                elif group == "Curriculum":
                    curriculum[name] = float(value)
    wall = time.perf_counter() - started
    env.close()
    return {"seed": seed, "reward_per_step": reward_sum / (args.steps * args.num_envs),
            "completed_episodes": len(returns), "terminated_episodes": terminated, "truncated_episodes": truncated,
            "episode_return_mean": statistics.fmean(returns) if returns else None,
            "episode_length_mean": statistics.fmean(lengths) if lengths else None,
            "reward_term_rate_means": {k: v / args.steps for k, v in sorted(terms.items())},
            "termination_counts": {k: int(v) for k, v in sorted(causes.items())}, "curriculum_last": curriculum,
            "wall_s": wall, "env": facts}


def spread(values: list[float]) -> dict[str, float | int | None]:
    """Mean, sample std (None for one value), min, max of the per-seed values."""
    return {"n": len(values), "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else None, "min": min(values), "max": max(values)}


def checkpoint_facts(checkpoint: Path, run_config: Path | None) -> dict[str, Any]:
    """What the checkpoint is and where it was trained (from its run's run_config.json)."""
    import torch

    try:
        saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unreadable file is bad input
        raise EvalError(f"{checkpoint} is not a readable torch checkpoint: {type(exc).__name__}") from exc
    if not isinstance(saved, dict) or not isinstance(saved.get("actor"), dict):
        raise EvalError(f"{checkpoint} is not a FlashSAC checkpoint (no 'actor' state dict)")
    facts: dict[str, Any] = {"path": str(checkpoint), "sha256": hashlib.sha256(checkpoint.read_bytes()).hexdigest(),
                             "update_count": saved.get("update_count"), "keys": sorted(saved)}
    config_path = run_config or checkpoint.parent / "run_config.json"
    if config_path.is_file():
        run = json.loads(config_path.read_text(encoding="utf-8"))
        algo, training = run["config"]["algo"], run["config"]["training"]
        facts["trained"] = {"run_config": str(config_path), "sim_backend": training["sim_backend"],
                            "collector": training.get("collector", "host"),
                            "task": training["task_name"], "num_envs": algo["num_envs"],
                            "batch_size": algo.get("batch_size"), "updates_per_step": algo.get("updates_per_step"),
                            "policy_frequency": algo.get("policy_frequency"), "seed": algo.get("seed"),
                            "gpu": run.get("run", {}).get("hardware", {}).get("gpu_name")}
    return facts


def training_reward(run_json: Path, last: int) -> dict[str, Any]:
    """Training-time collector reward of the run (episode return with exploration, on its own simulator)."""
    run = run_files.read_json(run_json)
    rewards = [float(r) for r in run.get("reward") or [] if r is not None]
    if not rewards:
        raise EvalError(f"{run_json} has no logged training reward")
    return {"run_json": str(run_json), "iterations": len(run["reward"]), "backend": run.get("backend"),
            "config": run.get("config"), "setting": run.get("setting"), "last": last, "reward_last_mean": statistics.fmean(rewards[-last:]),
            "reward_final": rewards[-1]}


def machine_facts() -> dict[str, Any]:
    """The CPU and versions that produced the numbers."""
    from importlib import metadata

    versions = {}
    for dist in ("unilab", "unisim-core", "mujoco", "torch", "numpy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    import torch

    return {"cpu": cpu, "cpus_usable": len(os.sched_getaffinity(0)), "platform": platform.platform(),
            "python": platform.python_version(), "torch_threads": torch.get_num_threads(), "versions": versions}


def parse_args(argv: list[str] | None) -> tuple[Args, Path, Path, Path | None, Path | None]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Args()
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--run-config", type=Path, help="the source run's run_config.json (default: beside the checkpoint)")
    p.add_argument("--training-run", type=Path, help="the benchmark's run JSON of the training run")
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--num-envs", type=int, default=defaults.num_envs)
    p.add_argument("--steps", type=int, default=defaults.steps)
    p.add_argument("--seeds", type=int, nargs="+", default=list(defaults.seeds))
    p.add_argument("--task", default=defaults.task)
    p.add_argument("--training-last", type=int, default=defaults.training_last)
    p.add_argument("--label", default="")
    ns = p.parse_args(argv)
    if ns.num_envs <= 0 or ns.steps <= 0 or ns.training_last <= 0 or min(ns.seeds) < 0:
        p.error("--num-envs, --steps and --training-last must be positive and seeds non-negative")
    label = ns.label or ns.checkpoint.name.removesuffix(".pt").removesuffix("-actor")
    paths = {k: str(v) for k, v in (("checkpoint", ns.checkpoint), ("run_config", ns.run_config),
                                    ("training_run", ns.training_run)) if v is not None}
    args = Args(num_envs=ns.num_envs, steps=ns.steps, seeds=tuple(ns.seeds), task=ns.task,
                training_last=ns.training_last, label=label, paths=paths)
    return args, ns.checkpoint, ns.output, ns.run_config, ns.training_run


def check_inputs(checkpoint: Path, run_config: Path | None, training_run: Path | None) -> None:
    if not (CONFIG_DIR / "config.yaml").is_file():
        raise EvalError(f"run from a UniLab tree root (no {CONFIG_DIR / 'config.yaml'} in {os.getcwd()})")
    for what, path in (("checkpoint", checkpoint), ("run config", run_config), ("training run", training_run)):
        if path is not None and not path.is_file():
            raise EvalError(f"{what} not found: {path}")


def run(argv: list[str] | None) -> dict[str, Any]:
    args, checkpoint, output, run_config, training_run = parse_args(argv)
    check_inputs(checkpoint, run_config, training_run)
    result: dict[str, Any] = {"label": args.label, "args": asdict(args),
                              "checkpoint": checkpoint_facts(checkpoint, run_config)}
    if training_run is not None:
        result["training"] = training_reward(training_run, args.training_last)
    with tempfile.TemporaryDirectory(prefix="policy-eval-") as scratch:
        load_run = stage_run_dir(checkpoint, run_config, Path(scratch))
        per_seed = [evaluate_seed(args, seed, load_run) for seed in args.seeds]
    result["seeds"] = per_seed
    result["across_seeds"] = {
        key: spread([s[key] for s in per_seed if s[key] is not None])
        for key in ("reward_per_step", "episode_return_mean", "episode_length_mean", "completed_episodes")
        if any(s[key] is not None for s in per_seed)}
    result["machine"] = machine_facts()
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def main(argv: list[str] | None = None) -> int:
    try:
        result = run(argv)
    except EvalError as exc:
        print(f"policy_eval: error: {exc}", file=sys.stderr)
        return 1
    r = result["across_seeds"]["reward_per_step"]
    ret = result["across_seeds"].get("episode_return_mean")
    std = "" if r["std"] is None else f" ± {r['std']:.4g}"
    print(f"policy_eval: {result['label']} on {result['args']['task']}: reward/step {r['mean']:.4g}{std} over "
          f"{r['n']} seed(s); episodes {sum(s['completed_episodes'] for s in result['seeds'])}, return "
          f"{'n/a' if ret is None else format(ret['mean'], '.4g')}")
    return 0 if all(math.isfinite(s["reward_per_step"]) for s in result["seeds"]) else 1


if __name__ == "__main__":
    sys.exit(main())
