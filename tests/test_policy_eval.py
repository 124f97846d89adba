"""Sim-to-sim evaluation: experiments/evidence/policy_eval.py loads a FlashSAC checkpoint through UniLab's
own play path and runs its deterministic policy on CPU MuJoCo G1 Walk Flat; policy_eval_report.py makes the
results folder's README from the JSONs.

The checkpoints here are real, untrained FlashSAC actors built by uni_rl's own ``build_actor`` with the dims of the
tree's env and config, saved in the learner's checkpoint layout (trimmed like the real ones to what play reads),
with a ``run_config.json`` carrying UniLab's own contract snapshot beside them. Controls: a wrong observation dim,
a run config whose contract differs, a missing file each fail with one line; the same seed repeats bitwise, a
perturbed actor or another seed does not. The checkpoints and evaluations of different tests are independent and
run side by side, one per core (conftest.SideBySide).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ONE_THREAD, PROJECT, SideBySide, runnable_tree

HARNESS = PROJECT / "experiments" / "evidence" / "policy_eval.py"
REPORT = PROJECT / "experiments" / "evidence" / "policy_eval_report.py"
RESULTS = PROJECT / "results" / "2026-12-01-cpu2-sim2sim-eval"
#: The sim-to-sim evidence: five training seeds a side, each final checkpoint evaluated on CPU MuJoCo.
SEEDS_RESULTS = PROJECT / "results" / "2026-12-01-h200-mjwarp-mps-sim2sim" / "sim2sim" / "eval"
#: The device-resident collector's evaluations; its references.txt names SEEDS_RESULTS (the CPU MuJoCo arm).
DEVICE_RESULTS = PROJECT / "results" / "2026-12-02-h200-device-loop" / "sim2sim" / "eval"
SMALL = ("--num-envs", "8", "--steps", "60")

#: Builds and saves an untrained actor from the tree's config (run in the tree root, overlay on PYTHONPATH).
MAKE_CHECKPOINT = """
import json, sys
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[1])
from policy_eval import ALGO, compose_cfg
from omegaconf import OmegaConf
from uni_rl.algos.common.actor_factory import build_actor
from unilab.base.config_adapter import create_env
from unilab.scripts.train_offpolicy import build_offpolicy_play_env_cfg_override
from unilab.utils.sim2sim import extract_contract_snapshot
from unilab.visualization.interactive_playback import resolve_play_obs_dims
out, obs_extra, perturb, contract = Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
cfg = compose_cfg("g1_walk_flat/mujoco", 1, 1, out / "checkpoint.pt")
env = create_env(cfg, num_envs=1, env_cfg_override=build_offpolicy_play_env_cfg_override(ALGO, cfg))
obs_dim, _ = resolve_play_obs_dims(env.obs_groups_spec)
torch.manual_seed(0)
actor = build_actor("flashsac", obs_dim + obs_extra, int(env.action_space.shape[0]), cfg.algo.actor_hidden_dim,
                    cfg.algo.use_layer_norm, "cpu", actor_num_blocks=cfg.algo.algo_params.actor_num_blocks,
                    actor_noise_zeta_mu=cfg.algo.algo_params.actor_noise_zeta_mu,
                    actor_noise_zeta_max=cfg.algo.algo_params.actor_noise_zeta_max)
state = actor.state_dict()
if perturb:
    g = torch.Generator().manual_seed(1)
    state = {k: v + perturb * torch.randn(v.shape, generator=g) if v.is_floating_point() and "zeta" not in k else v
             for k, v in state.items()}
out.mkdir(parents=True, exist_ok=True)
torch.save({"actor": state, "obs_normalizer": torch.nn.Identity().state_dict(), "update_count": 0},
           out / "checkpoint.pt")
snapshot = extract_contract_snapshot(cfg)
if contract == "obs_normalization":
    snapshot["algo.obs_normalization"] = not snapshot["algo.obs_normalization"]
run = {"config": OmegaConf.to_container(cfg, resolve=True), "contract_snapshot": snapshot}
(out / "run_config.json").write_text(json.dumps(run))
print(obs_dim)
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> tuple[Path, Path]:
    checkout, overlay = applied_session
    return runnable_tree(checkout, tmp_path_factory.mktemp("policy_eval") / "unilab"), overlay


def tree_env(overlay: Path, root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([str(overlay), str(root / "src")]), MUJOCO_GL="disable", **ONE_THREAD)
    return env


def make_checkpoint(tree: tuple[Path, Path], run_dir: Path, *, obs_extra: int = 0, perturb: float = 0.0,
                    contract: str = "same") -> Path:
    root, overlay = tree
    proc = subprocess.run([sys.executable, "-c", MAKE_CHECKPOINT, str(HARNESS.parent), str(run_dir), str(obs_extra),
                           str(perturb), contract], cwd=root, env=tree_env(overlay, root), capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir / "checkpoint.pt"


def evaluate(tree: tuple[Path, Path], checkpoint: Path, output: Path, *args: str) -> tuple[int, str, str, dict]:
    root, overlay = tree
    proc = subprocess.run([sys.executable, str(HARNESS), "--checkpoint", str(checkpoint), "--output", str(output),
                           *args], cwd=root, env=tree_env(overlay, root), capture_output=True, text=True,
                          timeout=600, check=False)
    result = json.loads(output.read_text()) if output.is_file() else {}
    return proc.returncode, proc.stdout, proc.stderr, result


Evaluated = tuple[int, str, str, dict]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tree: tuple[Path, Path],
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySide]:
    """The untrained checkpoint, then each test's checkpoints and evaluations, side by side (one torch thread)."""
    out = tmp_path_factory.mktemp("runs")

    def same_seed_and_perturbed() -> tuple[list[Evaluated], Evaluated]:
        same = [evaluate(tree, started.shared("untrained"), out / f"same{i}.json", *SMALL, "--seeds", "5")
                for i in range(2)]
        perturbed = make_checkpoint(tree, out / "perturbed", perturb=0.05)
        return same, evaluate(tree, perturbed, out / "other.json", *SMALL, "--seeds", "5")

    started = SideBySide(request)  # named before it starts: the runs read its shared checkpoint
    started.start({
        "test_untrained_actor_evaluates":
            lambda: evaluate(tree, started.shared("untrained"), out / "e.json", *SMALL, "--seeds", "3", "4"),
        "test_same_seed_repeats_and_another_actor_differs": same_seed_and_perturbed,
        "test_wrong_observation_dim_is_one_line":
            lambda: evaluate(tree, make_checkpoint(tree, out / "wide", obs_extra=3), out / "wide.json", *SMALL,
                             "--seeds", "1"),
        "test_contract_mismatch_is_one_line":
            lambda: evaluate(tree, make_checkpoint(tree, out / "normalized", contract="obs_normalization"),
                             out / "c.json", *SMALL, "--seeds", "1"),
    }, shared={"untrained": lambda: make_checkpoint(tree, out / "untrained" / "run")})
    yield started
    started.close()


@pytest.fixture
def untrained(runs: SideBySide) -> Path:
    return runs.shared("untrained")


@pytest.fixture
def ran(request: pytest.FixtureRequest, runs: SideBySide) -> Any:
    """This test's evaluation(s): exit status, stdout, stderr and the JSON result of each."""
    return runs.result(request)


def without_wall(seed: dict) -> dict:
    return {k: v for k, v in seed.items() if k != "wall_s"}


def test_untrained_actor_evaluates(ran: Evaluated) -> None:
    code, out, err, result = ran
    assert code == 0, err[-3000:]
    assert out.startswith("policy_eval: checkpoint on g1_walk_flat/mujoco: reward/step ")
    assert result["checkpoint"]["trained"]["sim_backend"] == "mujoco"  # the run_config.json beside it
    first, second = result["seeds"]
    for seed in result["seeds"]:
        assert seed["env"]["sim_backend"] == "mujoco" and seed["env"]["sim2sim_strict"] is True
        assert seed["completed_episodes"] > 0  # an untrained G1 falls within 60 steps
        assert seed["completed_episodes"] == seed["terminated_episodes"] and seed["truncated_episodes"] == 0
        assert max(seed["termination_counts"].values()) <= seed["completed_episodes"] <= sum(seed["termination_counts"].values())
        assert all(math.isfinite(v) for v in (seed["reward_per_step"], seed["episode_return_mean"]))
        # the env's per-term rates account for the whole reward: ctrl_dt x their sum = reward per step
        rates = sum(seed["reward_term_rate_means"].values())
        assert rates * seed["env"]["ctrl_dt"] == pytest.approx(seed["reward_per_step"], rel=1e-6)  # float32 env buffers
    assert first["reward_per_step"] != second["reward_per_step"]  # another seed: other commands and noise
    assert result["across_seeds"]["reward_per_step"]["n"] == 2


def test_same_seed_repeats_and_another_actor_differs(ran: tuple[list[Evaluated], Evaluated]) -> None:
    runs, (code, _, err, other) = ran
    assert all(code == 0 for code, *_ in runs), runs[0][2][-3000:]
    assert without_wall(runs[0][3]["seeds"][0]) == without_wall(runs[1][3]["seeds"][0])
    assert code == 0, err[-3000:]
    assert other["checkpoint"]["sha256"] != runs[0][3]["checkpoint"]["sha256"]
    assert other["seeds"][0]["reward_per_step"] != runs[0][3]["seeds"][0]["reward_per_step"]


def test_wrong_observation_dim_is_one_line(ran: Evaluated) -> None:
    code, out, err, result = ran
    assert code == 1 and result == {} and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("policy_eval: error: Trained policy checkpoint does not fit this play environment")
    assert "env policy obs dim: 98" in last and "size mismatch" in last and "Traceback" not in err


def test_contract_mismatch_is_one_line(ran: Evaluated) -> None:
    code, _, err, result = ran
    assert code == 1 and result == {} and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("policy_eval: error: Cross-backend sim2sim contract mismatch") and "algo.obs_normalization" in last


def test_missing_inputs_are_one_line(tree: tuple[Path, Path], untrained: Path, tmp_path: Path) -> None:
    code, _, err, _ = evaluate(tree, tmp_path / "nope.pt", tmp_path / "m.json")
    assert code == 1 and err.strip() == f"policy_eval: error: checkpoint not found: {tmp_path / 'nope.pt'}"
    code, _, err, _ = evaluate(tree, untrained, tmp_path / "m.json", "--run-config", str(tmp_path / "rc.json"))
    assert code == 1 and err.strip() == f"policy_eval: error: run config not found: {tmp_path / 'rc.json'}"
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint")
    code, _, err, _ = evaluate(tree, junk, tmp_path / "m.json")
    assert code == 1 and err.strip().startswith("policy_eval: error: ") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.json").exists()


def test_committed_readme_is_generated_from_its_jsons(tmp_path: Path) -> None:
    check = [sys.executable, str(REPORT), "--check"]
    for folder in (RESULTS, SEEDS_RESULTS, DEVICE_RESULTS):
        proc = subprocess.run([*check, str(folder)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
    # A folder compared against references reads them in place: without its references.txt the MuJoCo arm, and
    # with it the verdict, is gone, so the committed README no longer agrees.
    alone = tmp_path / "alone"
    shutil.copytree(DEVICE_RESULTS, alone)
    (alone / "references.txt").unlink()
    proc = subprocess.run([*check, str(alone)], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "stale" in proc.stderr
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    victim = min(copy.glob("*.json"))
    data = json.loads(victim.read_text())
    data["across_seeds"]["reward_per_step"]["mean"] += 0.001
    victim.write_text(json.dumps(data))
    proc = subprocess.run([*check, str(copy)], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "stale" in proc.stderr


def _evaluated(sim: str, seed: int, mean: float, collector: str = "host", config: str = "patched-default") -> dict:
    """The parts of a policy_eval.py JSON the pair table reads: where and how it trained, its reward per step."""
    trained = {"sim_backend": sim, "num_envs": 256, "batch_size": 256, "updates_per_step": 2, "policy_frequency": 2,
               "seed": seed, "collector": collector}
    return {"checkpoint": {"trained": trained}, "training": {"config": config},
            "across_seeds": {"reward_per_step": {"mean": mean, "std": 0.001}}}


def test_pair_table_judges_several_training_seeds_and_refuses_one() -> None:
    sys.path.insert(0, str(PROJECT / "experiments" / "evidence"))
    import policy_eval_report

    mujoco = [_evaluated("mujoco", s, m) for s, m in enumerate((0.190, 0.186, 0.192, 0.188, 0.189), 1)]
    same = [_evaluated("mjwarp", s, m) for s, m in enumerate((0.189, 0.191, 0.187, 0.190, 0.188), 1)]
    worse = [_evaluated("mjwarp", s, m - 0.06) for s, m in enumerate((0.189, 0.191, 0.187, 0.190, 0.188), 1)]
    assert "**yes**" in policy_eval_report.pair_table(same + mujoco)
    assert "**not shown**" in policy_eval_report.pair_table(worse + mujoco)
    assert "no verdict: one training seed a side" in policy_eval_report.pair_table(same[:1] + mujoco[:1])
    # The device-resident collector is its own arm: its row is judged apart from the host collector's, so a
    # worse device arm is not hidden by a good host arm (and the reverse).
    device_worse = [_evaluated("mjwarp", s, m - 0.06, "device") for s, m in enumerate((0.189, 0.191, 0.187, 0.190, 0.188), 1)]
    rows = policy_eval_report.pair_table(same + device_worse + mujoco).splitlines()[2:]
    assert len(rows) == 2 and "**yes**" in rows[0] and "device-resident" in rows[1] and "**not shown**" in rows[1]
    # The parity test's negative control is an arm of its own too: pooled with the device arm, its worse
    # policies would hide among good ones (or sink them).
    device_same = [_evaluated("mjwarp", s, m, "device") for s, m in enumerate((0.189, 0.191, 0.187, 0.190, 0.188), 1)]
    control = [{**run, "training": {"config": "negative-control-lr10"}} for run in device_worse]
    rows = policy_eval_report.pair_table(device_same + control + mujoco).splitlines()[2:]
    assert len(rows) == 2 and "**yes**" in rows[0] and "negative control" not in rows[0], rows
    assert "negative control" in rows[1] and "**not shown**" in rows[1], rows
    # An evaluation without the record is known by its run's name, as the device script gives it
    named = [{"label": f"mjwarp-device-negative-control-lr10-seed{i}", **{k: v for k, v in run.items() if k != "training"}}
             for i, run in enumerate(device_worse, 1)]
    assert [policy_eval_report.arm(run) for run in named] == ["mjwarp-device-negative-control-lr10"] * 5
