"""The learning-parity check can fail: its statistics, its negative control, its verdicts.

The committed 3-seed × 1000-iteration parity of 2026-11-30 is the realistic input: the old 2·SE rule passed a
learner that learned nothing on it; the equivalence test must not.

``make bench-parity TASK=``: each arm's run, as the parity driver hands it to the single-run script, composed
through its tree's Hydra config (the patched tree for the patched arms, the pristine one for the baseline) trains
the task's CPU MuJoCo owner at the named setting and seed, and the negative control's learning rates are the
composed patched defaults' ÷10 (control: the same arms without ``--task`` compose G1 Walk Flat, which the check
catches); an unknown task is one line before CUDA, from the driver and from ``make``; a task's runs go to its own
study folder.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from conftest import make
from forked_runs import ForkServer

PROJECT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(PROJECT / "experiments" / folder) for folder in ("bench", "evidence")]

import bench_configs  # noqa: E402
import bench_driver  # noqa: E402
import bench_options  # noqa: E402
import bench_parity  # noqa: E402
import bench_report  # noqa: E402
import parity_stats  # noqa: E402

OLD_PARITY = PROJECT / "results" / "2026-11-30-h200x2-graphed-inference" / "parity"
#: Student-t 0.95 quantiles (standard tables).
T95 = {4: 2.131847, 5: 2.015048, 8: 1.859548, 12: 1.782288, 30: 1.697261}


def _run(config: str, seed: int, rewards: list[float | None]) -> dict:
    return {"status": "completed", "config": config, "training_config": {"seed": seed}, "reward": rewards}


def _arm(config: str, offsets: list[float], *, gain: float = 3.0, n: int = 600) -> list[dict]:
    """Runs whose curves rise linearly from -1 to -1 + gain, shifted per seed."""
    return [_run(config, seed, [None] * 8 + [-1.0 + gain * i / (n - 1) + off for i in range(n)])
            for seed, off in enumerate(offsets, 1)]


def test_t_quantile_matches_tables() -> None:
    for df, value in T95.items():
        assert parity_stats.t_quantile(0.95, df) == pytest.approx(value, abs=2e-3)


def test_welch_interval_covers_the_difference() -> None:
    interval = parity_stats.welch_interval([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])
    assert interval.difference == pytest.approx(1.0)
    assert interval.low < 1.0 < interval.high and interval.df == pytest.approx(4.0)


def _verdict(candidate: list[dict], baseline: list[dict], final_last: int = 100) -> dict:
    metrics = parity_stats.arm_metrics(candidate + baseline, final_last=final_last)
    return parity_stats.verdict(metrics[candidate[0]["config"]], metrics["baseline-1.3.2"])


def test_equal_learners_pass_and_worse_or_better_ones_fail() -> None:
    base = _arm("baseline-1.3.2", [0.0, 0.05, -0.05, 0.02, -0.02])
    assert _verdict(_arm("patched-default", [0.01, -0.04, 0.04, -0.01, 0.0]), base)["passed"]
    worse = _verdict(_arm("patched-default", [0.0, 0.05, -0.05, 0.02, -0.02], gain=2.0), base)
    assert not worse["passed"] and not worse["tests"]["final"]["equivalent"]
    better = _verdict(_arm("patched-default", [0.0, 0.05, -0.05, 0.02, -0.02], gain=4.0), base)
    assert not better["passed"]  # the same math may not learn clearly better either


def test_too_noisy_to_tell_fails() -> None:
    """No power, no pass: equal means with a seed spread wider than the margin."""
    base = _arm("baseline-1.3.2", [0.0, 1.0, -1.0, 0.5, -0.5])
    assert not _verdict(_arm("patched-default", [0.5, -1.0, 1.0, 0.0, -0.5]), base)["passed"]


def test_one_seed_fails() -> None:
    assert not _verdict(_arm("patched-default", [0.0]), _arm("baseline-1.3.2", [0.0, 0.1]))["passed"]


def test_committed_old_parity_no_longer_passes_a_learner_that_learned_nothing() -> None:
    """The 2026-11-30 runs (3 seeds × 1000 iterations): a flat learner passed the 2·SE rule; it fails now."""
    runs = bench_report.load_runs(OLD_PARITY)
    baseline = [r for r in runs if r["config"] == "baseline-1.3.2"]
    assert len(baseline) == 3 and all(len(parity_stats.rewards_of(r)) > 900 for r in baseline)
    flat = []
    for run in baseline:
        dead = copy.deepcopy(run)
        dead["config"] = "patched-default"
        start = parity_stats.rewards_of(run)[: parity_stats.START_WINDOW]
        dead["reward"] = [sum(start) / len(start) if r is not None else None for r in run["reward"]]
        flat.append(dead)
    assert not _verdict(flat, baseline)["passed"]
    # An exact copy of the baseline does not pass either: 3 seeds still on the slope spread wider than the
    # margin. That is the old parity's lack of power, which the 5-seed × 3000-iteration runs are for.
    copies = _verdict([{**copy.deepcopy(r), "config": "patched-default"} for r in baseline], baseline)
    assert not copies["passed"] and copies["tests"]["final"]["difference"] == 0.0


def test_report_is_trusted_only_when_both_verdicts_are_as_expected() -> None:
    base = _arm("baseline-1.3.2", [0.0, 0.05, -0.05, 0.02, -0.02])
    same = _arm("patched-default", [0.01, -0.04, 0.04, -0.01, 0.0])
    weak = _arm(bench_configs.NEGATIVE_CONTROL, [0.0, 0.05, -0.05, 0.02, -0.02], gain=1.0)
    report = bench_parity.parity_report(base + same + weak, final_last=100)
    assert report["check_trusted"]
    assert report["verdicts"]["patched-default"]["passed"] and not report["verdicts"][bench_configs.NEGATIVE_CONTROL]["passed"]
    passes_everything = bench_parity.parity_report(base + same + _arm(bench_configs.NEGATIVE_CONTROL,
                                                                      [0.0, 0.05, -0.05, 0.02, -0.02]), final_last=100)
    assert not passes_everything["check_trusted"]
    assert not bench_parity.parity_report(base + same, final_last=100)["check_trusted"]  # no negative control run
    assert "is NOT trusted" in bench_parity.report_markdown(passes_everything)


def test_a_further_arm_must_pass_and_pools_with_a_committed_study(tmp_path: Path) -> None:
    """A further arm (a learner switch before it becomes a default) gets its own verdict; the run passes only when
    the check is trusted and that arm passed too, and the ``parity`` table pools it with the folder that trained the
    baseline, the patched defaults and the negative control."""
    base = _arm("baseline-1.3.2", [0.0, 0.05, -0.05, 0.02, -0.02])
    same = _arm("patched-default", [0.01, -0.04, 0.04, -0.01, 0.0])
    weak = _arm(bench_configs.NEGATIVE_CONTROL, [0.0, 0.05, -0.05, 0.02, -0.02], gain=1.0)
    good = _arm("combo-kernels", [0.02, -0.03, 0.03, 0.0, -0.01])
    report = bench_parity.parity_report(base + same + weak + good, final_last=100)
    assert report["check_trusted"] and report["verdicts"]["combo-kernels"]["expected"] and report["passed"]
    bad = _arm("combo-kernels", [0.0, 0.05, -0.05, 0.02, -0.02], gain=1.0)
    failing = bench_parity.parity_report(base + same + weak + bad, final_last=100)
    assert failing["check_trusted"] and not failing["passed"]  # the check is sound; the switch does not learn alike
    assert "Not every further arm passed" in bench_parity.report_markdown(failing)
    committed, study = tmp_path / "committed", tmp_path / "study"
    for folder, runs in ((committed, base + same + weak), (study, bad)):
        (folder / "runs").mkdir(parents=True)
        for index, run in enumerate(runs):
            (folder / "runs" / f"{index:02d}-{run['config']}.json").write_text(json.dumps(run))
    pooled = bench_parity.table([study, committed])
    assert "combo-kernels: FAIL" in pooled and "patched-default: PASS" in pooled and "is trusted" in pooled


def test_negative_control_is_the_tree_schedule_divided_by_ten(runnable_tree_config: dict) -> None:
    params = runnable_tree_config["algo"]["algo_params"]
    assert dict(bench_configs.TREE_LEARNING_RATES) == {k: params[k] for k, _ in bench_configs.TREE_LEARNING_RATES}
    config = bench_configs.CONFIGS[bench_configs.NEGATIVE_CONTROL]
    assert config.source == "overlay" and config.switches == ()
    assert config.overrides == ("algo.algo_params.learning_rate_init=3e-05",
                                "algo.algo_params.learning_rate_peak=3e-05",
                                "algo.algo_params.learning_rate_end=1.5e-05", "training.compile_behind=false")


@pytest.fixture(scope="module")
def runnable_tree_config(pristine_template: Path) -> dict:
    return yaml.safe_load((pristine_template / "src/unilab/conf/flashsac/config.yaml").read_text())


# ------------------------------------------------------------------ parity of another task (make bench-parity TASK=)

READ = """
import sys
from hydra import compose, initialize_config_dir
with initialize_config_dir(config_dir=sys.argv[1], version_base=None):
    cfg = compose("config", overrides=sys.argv[2:])
p = cfg.algo.algo_params
print(cfg.training.task_name, cfg.training.sim_backend, cfg.algo.num_envs, cfg.algo.seed,
      p.learning_rate_init, p.learning_rate_peak, p.learning_rate_end)
"""
#: task -> (training.task_name, its own num_envs: what UniLab's defaults train).
TASK_NAMES = {"g1_walk_flat": ("G1WalkFlat", "4096"), "g1_motion_tracking": ("G1MotionTrackingSAC", "2048"),
              "go2_joystick_flat": ("Go2JoystickFlat", "1024")}


@pytest.fixture(scope="module")
def composers(applied_session: tuple[Path, Path], pristine_template: Path) -> Iterator[dict[str, Callable[..., list[str]]]]:
    """Each tree's Hydra config composed with a run's overrides (``READ``), keyed by ``BenchConfig.tree``."""
    servers, readers = [], {}
    for kind, root in (("patched", applied_session[0]), ("pristine", pristine_template)):
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
        env["PYTHONPATH"] = str(root / "src")
        server = ForkServer(("hydra", "omegaconf"), env=env, cwd=root, flags=("-W", "ignore"))

        def read(*overrides: str, server: ForkServer = server, root: Path = root) -> list[str]:
            returncode, out, err = server.run(str(root / "src/unilab/conf/flashsac"), *overrides, code=READ,
                                              timeout=300)
            assert returncode == 0, err[-3000:]
            return out.strip().splitlines()[-1].split()

        servers.append(server)
        readers[kind] = read
    yield readers
    for server in servers:
        server.close()


def composed_arms(composers: dict[str, Callable[..., list[str]]], *argv: str) -> dict[tuple[str, int], list[str]]:
    """(arm, seed) -> what its tree composes for the run the parity driver plans with ``argv``."""
    args = bench_parity.build_parser().parse_args(["--seeds", "1,2", *argv])
    bench_parity.run_defaults(args)
    common = bench_parity.common_args(args, Path("/x"), Path("/b"), Path("/p"), applied=True)
    out = {}
    for spec in bench_parity.arm_specs(args):
        run = bench_options.parse_args(bench_driver.single_run_argv(spec, common=common, output=Path("/o.json"),
                                                                    run_dir=Path("/r"))[2:])
        overrides = [o for o in bench_options.hydra_overrides(run, Path("/logs")) if not o.startswith("training.log_dir=")]
        out[(spec.config, spec.seed)] = composers[bench_configs.CONFIGS[spec.config].tree](*overrides)
    return out


def check_arms(task: str, composed: dict[tuple[str, int], list[str]]) -> None:
    """Every arm on both seeds trains the task's CPU MuJoCo owner at its own defaults; the baseline and the patched
    defaults at the tree's learning rates, the negative control at a tenth of the patched defaults'."""
    name, envs = TASK_NAMES[task]
    assert sorted(composed) == sorted((arm, seed) for arm in ("baseline-1.3.2", "patched-default",
                                                              bench_configs.NEGATIVE_CONTROL) for seed in (1, 2))
    for (arm, seed), (task_name, backend, num_envs, run_seed, *rates) in composed.items():
        assert (task_name, backend, num_envs, run_seed) == (name, "mujoco", envs, str(seed)), (task, arm)
        patched = [float(r) for r in composed[("patched-default", seed)][4:]]
        expected = [r / 10 for r in patched] if arm == bench_configs.NEGATIVE_CONTROL else patched
        assert [float(r) for r in rates] == pytest.approx(expected, rel=1e-6), (task, arm)
    assert [float(r) for r in composed[("baseline-1.3.2", 1)][4:]] == [
        value for _, value in bench_configs.TREE_LEARNING_RATES]


@pytest.mark.parametrize("task", sorted(bench_configs.TASKS))
def test_each_arm_trains_the_task_and_the_negative_control_a_tenth_of_its_learning_rates(
        composers: dict[str, Callable[..., list[str]]], task: str) -> None:
    check_arms(task, composed_arms(composers, "--task", task, "--setting", "unilab-default"))


def test_arms_without_the_task_are_caught(composers: dict[str, Callable[..., list[str]]]) -> None:
    """Control: the same arms without ``--task`` compose G1 Walk Flat, and the check fails for Go2."""
    with pytest.raises(AssertionError):
        check_arms("go2_joystick_flat", composed_arms(composers, "--setting", "unilab-default"))


def test_an_unknown_task_is_one_line_before_cuda(tmp_path: Path) -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    results = tmp_path / "results"

    def parity(*argv: str) -> list[str]:
        proc = subprocess.run([sys.executable, str(PROJECT / "experiments/bench/bench_parity.py"), "--results-root",
                               str(results), *argv], env=env, capture_output=True, text=True, timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and proc.stdout == "", (proc.stdout, proc.stderr)
        return lines

    assert parity("--task", "g1_walking") == [
        "bench_parity: error: TASK=g1_walking: unknown task 'g1_walking'; known: g1_walk_flat, g1_motion_tracking, "
        "go2_joystick_flat"]
    # Control: a known task passes the refusal and reaches the CUDA check (this machine has none).
    assert parity("--task", "go2_joystick_flat")[0].startswith("bench_parity: error: CUDA is required")
    assert not results.exists()
    proc = make("bench-parity", "TASK=g1_walking", "SETTING=unilab-default", CUDA_VISIBLE_DEVICES="")
    assert proc.returncode != 0
    assert proc.stderr.splitlines()[0].startswith("bench_parity: error: TASK=g1_walking: unknown task"), proc.stderr


def test_each_tasks_parity_runs_go_to_its_own_study() -> None:
    def study(*argv: str) -> str:
        args = bench_parity.build_parser().parse_args(list(argv))
        return bench_parity.study(args)

    assert {task: study("--task", task) for task in bench_configs.TASKS} == {
        "g1_walk_flat": "parity", "g1_motion_tracking": "parity-g1-motion-tracking",
        "go2_joystick_flat": "parity-go2-joystick-flat"}
    assert study() == "parity" and study("--task", "go2_joystick_flat", "--quick") == "parity-go2-joystick-flat-quick"
    assert study("--task", "go2_joystick_flat", "--study", "go2-seeds") == "go2-seeds"
    assert all(bench_driver.STUDY_NAME.fullmatch(study("--task", task)) for task in bench_configs.TASKS)


# ------------------------------------------------------------------ time to reward

import time_to_reward  # noqa: E402

PARITY_TTR = PROJECT / "results" / "2026-12-01-h200-parity-ttr"


def test_crossing_uses_the_trailing_mean_and_the_runs_own_clock() -> None:
    rows = [{"step": i, "reward": None if i < 3 else float(i), "wall_s": 10.0 + i} for i in range(1, 200)]
    hit = time_to_reward.crossing({"rows_all": rows}, threshold=100.0)
    window = time_to_reward.SMOOTHING
    # trailing mean of steps k-window+1..k is k - (window-1)/2 ≥ 100 first at k = 100 + (window-1)/2, rounded up
    assert hit == {"iteration": 125, "wall_s": 135.0} and window == 50
    assert time_to_reward.crossing({"rows_all": rows}, threshold=1e9) is None


def test_committed_ttr_rows_come_from_the_runs() -> None:
    threshold = time_to_reward.threshold_from_parity(PARITY_TTR / "parity")
    runs = bench_report.load_runs(PARITY_TTR / "ttr")
    rows = {r["arm"]: r for r in time_to_reward.arm_rows(runs, threshold)}
    assert set(rows) == {"baseline-1.3.2", "upstream-1.4.0", "patched-default"}
    assert all(r["cpus"] == 5 for r in rows.values())
    upstream = next(r for r in runs if r["config"] == "upstream-1.4.0")
    lost = upstream["earlier_attempts"][0]["wall_s"]
    assert rows["upstream-1.4.0"]["minutes"] * 60 == pytest.approx(
        lost + time_to_reward.crossing(upstream, threshold)["wall_s"])
    # a threshold no run reaches gives "never", not a time
    never = time_to_reward.arm_rows(runs, threshold=1e6)
    assert all(r["minutes"] is None for r in never) and "| never |" in time_to_reward.markdown(never, 1e6)


def test_a_later_ttr_study_keeps_the_earlier_threshold(tmp_path: Path) -> None:
    """A TTR folder without a sibling parity/ takes the parity runs its ttr.json names; the compile-behind study's
    rows come from its runs (control: a copy without ttr.json has no threshold and fails in one line)."""
    later = PROJECT / "results" / "2026-12-04-h200-host-compile-behind" / "ttr"
    assert time_to_reward.parity_folder_of(later) == PARITY_TTR / "parity"
    threshold = time_to_reward.threshold_from_parity(PARITY_TTR / "parity")
    rows = {r["arm"]: r for r in time_to_reward.arm_rows(bench_report.load_runs(later), threshold)}
    assert set(rows) == set(time_to_reward.STUDY_ARMS) and all(r["cpus"] == 5 for r in rows.values())
    assert rows["compile-behind"]["minutes"] < 0.6 * rows["baseline-1.3.2"]["minutes"] < rows["patched-default"]["minutes"]
    assert f"| {rows['compile-behind']['minutes']:.2f} |" in time_to_reward.table(later)
    copy = tmp_path / "study" / "ttr"
    shutil.copytree(later / "runs", copy / "runs")
    with pytest.raises(FileNotFoundError, match="ttr.json"):
        time_to_reward.table(copy)


@pytest.mark.parametrize(("setting", "expected"), [
    ("report", (256, 256, 32, 8, 2, 2)), ("unilab-default", (None, None, None, None, None, None))])
def test_parity_runs_train_at_the_named_setting(setting: str, expected: tuple) -> None:
    """``bench_parity --setting``: each run's command line gives the single-run script the setting and no value of
    its own, so the report's setting trains at the report's values and UniLab's defaults at the tree's (None: no
    override); an explicit value still wins (control)."""
    import bench_driver
    import bench_options

    def resolved(*extra: str) -> tuple:
        args = bench_parity.build_parser().parse_args(["--setting", setting, *extra])
        spec = bench_driver.RunSpec(config="patched-default", updates_per_step=args.updates_per_step,
                                    setting=args.setting, seed=1)
        argv = bench_driver.single_run_argv(spec, common=["--unilab-root", "/x", *bench_parity.shape_overrides(args)],
                                            output=Path("/o.json"), run_dir=Path("/r"))
        run = bench_options.parse_args(argv[2:])
        return (run.num_envs, run.batch_size, run.replay_buffer_n, run.learning_starts, run.updates_per_step,
                run.policy_frequency)

    assert resolved() == expected
    assert resolved("--num-envs", "512")[0] == 512


def test_a_ttr_study_at_unilab_defaults_takes_its_threshold_from_a_committed_unpatched_run(tmp_path: Path) -> None:
    """At a setting without a parity study the threshold is a committed unpatched 1.3.2 run's trailing-mean reward
    at a given iteration, recorded in ttr.json and kept by the table. Controls: a threshold run that is not the
    baseline, runs of another setting beside it, and an iteration before the first trailing mean are refused."""
    committed = PROJECT / "results" / "2026-12-01-h200x2-end-to-end" / "bench" / "runs"
    results = tmp_path / "results"
    study = results / "study" / "ttr"
    (study / "runs").mkdir(parents=True)
    for name in ("c2-gpu0-02-unilab-default-patched-default-tree", "c2-gpu1-02-unilab-default-upstream-1.4.0-tree"):
        shutil.copy(committed / f"{name}.json.xz", study / "runs")
    (results / "base").mkdir()
    baseline = shutil.copy(committed / "c2-gpu0-01-unilab-default-baseline-1.3.2-tree.json.xz", results / "base")
    rewards = [row["reward"] for row in bench_report.read_run(Path(baseline))["rows_all"]
               if row.get("reward") is not None and row["step"] <= 500]
    expected = sum(rewards[-50:]) / 50

    report = time_to_reward.write_report(study, threshold_run=Path(baseline), threshold_iteration=500)
    assert report["threshold"] == pytest.approx(expected) and 4.0 < expected < 6.0
    assert (report["threshold_run"], report["threshold_iteration"]) == (
        "base/c2-gpu0-01-unilab-default-baseline-1.3.2-tree.json.xz", 500)
    rows = {r["arm"]: r for r in report["rows"]}
    assert set(rows) == {"patched-default", "upstream-1.4.0"} and all(r["iteration"] for r in rows.values())
    text = time_to_reward.table(study)
    assert text == (study / "ttr.md").read_text().strip() and "reward at iteration 500 of `base/" in text

    with pytest.raises(ValueError, match="not a completed baseline-1.3.2 run"):
        time_to_reward.threshold_from_run(study / "runs" / "c2-gpu0-02-unilab-default-patched-default-tree.json.xz", 500)
    with pytest.raises(ValueError, match="fewer than 50 logged rewards"):
        time_to_reward.threshold_from_run(Path(baseline), 30)
    shutil.copy(committed / "c1-gpu0-03-report-patched-default-2-1-1.json.xz", study / "runs")
    with pytest.raises(ValueError, match="unilab-default setting, some runs at report"):
        time_to_reward.write_report(study, threshold_run=Path(baseline), threshold_iteration=500)


def test_a_ttr_table_names_each_runs_physics_and_collector() -> None:
    """The defaults study trained the same arms on CPU MuJoCo (host collector) and on MuJoCo Warp (device
    collector): each row names the physics and collector its run recorded, and the two rows of an arm stay apart.
    Control: a MuJoCo Warp run relabelled as CPU MuJoCo shows as CPU MuJoCo."""
    folder = PROJECT / "results" / "2026-12-05-h100-combo-parity-ttr-defaults" / "ttr"
    threshold, _ = time_to_reward.threshold_of(folder)
    runs = bench_report.load_runs(folder)
    rows = time_to_reward.arm_rows(runs, threshold)
    assert [(r["arm"], r["physics"], r["collector"]) for r in rows] == [
        ("baseline-1.3.2", "mujoco", "host"),
        ("patched-default", "mujoco", "host"), ("patched-default", "mjwarp", "device-resident"),
        ("compile-behind", "mujoco", "host"), ("compile-behind", "mjwarp", "device-resident")]
    text = time_to_reward.markdown(rows, threshold)
    assert text.count("| MuJoCo Warp (GPU) · device-resident |") == 2 and text.count("| CPU MuJoCo · host |") == 3
    relabelled = [dict(r, backend="mujoco", collector=None) if r.get("backend") == "mjwarp" else r for r in runs]
    control = time_to_reward.markdown(time_to_reward.arm_rows(relabelled, threshold), threshold)
    assert "MuJoCo Warp" not in control and control.count("| CPU MuJoCo · host |") == 5


def test_sim_training_table_compares_the_physics_of_the_runs(tmp_path: Path) -> None:
    """The sim-training table groups runs by physics (not configuration) and judges MJWarp against MuJoCo."""
    import mjwarp_report

    def write(runs: list[dict], backend: str, folder: Path) -> None:
        folder.mkdir(exist_ok=True)
        for run in runs:
            run["backend"] = backend
            (folder / f"{backend}-{run['training_config']['seed']}.json").write_text(json.dumps(run))

    same, worse = tmp_path / "same", tmp_path / "worse"
    for folder, candidate_gain in ((same, 3.0), (worse, 2.0)):
        write(_arm("patched-default", [0.0, 0.05, -0.05, 0.02, -0.02]), "mujoco", folder)
        write(_arm("patched-default", [0.01, -0.04, 0.04, -0.01, 0.0], gain=candidate_gain), "mjwarp", folder)
    assert "**MuJoCo Warp vs CPU MuJoCo: EQUIVALENT**" in mjwarp_report.sim_training_table(same, final_last=100)
    assert "NOT SHOWN EQUIVALENT" in mjwarp_report.sim_training_table(worse, final_last=100)


def test_sim_training_table_judges_the_device_collector_as_its_own_arm_across_pooled_folders(tmp_path: Path) -> None:
    """The device-resident collector's runs are their own arm, judged against CPU MuJoCo runs of another folder
    (read in place); a worse device arm is flagged beside a good host arm, and without the MuJoCo folder there
    is no verdict."""
    import mjwarp_report

    mujoco, study = tmp_path / "mujoco", tmp_path / "study"
    for folder in (mujoco, study):
        folder.mkdir()
    for run in _arm("patched-default", [0.0, 0.05, -0.05, 0.02, -0.02]):
        run["backend"] = "mujoco"
        (mujoco / f"mujoco-{run['training_config']['seed']}.json").write_text(json.dumps(run))
    for arm, gain, collector in (("host", 3.0, "host"), ("device", 2.0, "device-resident")):
        for run in _arm("patched-default", [0.01, -0.04, 0.04, -0.01, 0.0], gain=gain):
            run["backend"], run["collector"] = "mjwarp", collector
            (study / f"{arm}-{run['training_config']['seed']}.json").write_text(json.dumps(run))
    table = mjwarp_report.sim_training_table([study, mujoco], final_last=100)
    assert "**MuJoCo Warp vs CPU MuJoCo: EQUIVALENT**" in table
    assert "**MuJoCo Warp (GPU), device-resident collector vs CPU MuJoCo: NOT SHOWN EQUIVALENT**" in table
    assert "too few finished seeds" in mjwarp_report.sim_training_table(study, final_last=100)


def test_sim_training_table_keeps_the_negative_control_apart_and_says_whether_the_test_is_trusted(
        tmp_path: Path) -> None:
    """The negative control's device-collector runs are an arm of their own, not pooled into the device arm: the
    test is trusted when it fails them. Control: a 'control' that learns as well passes, so the test is said not to
    be trusted."""
    import mjwarp_report

    def study(control_gain: float) -> str:
        folder = tmp_path / f"control-gain-{control_gain}"
        folder.mkdir()
        for run in _arm("patched-default", [0.0, 0.05, -0.05, 0.02, -0.02]):
            run["backend"] = "mujoco"
            (folder / f"mujoco-{run['training_config']['seed']}.json").write_text(json.dumps(run))
        for config, gain in (("patched-default", 3.0), ("negative-control-lr10", control_gain)):
            for run in _arm(config, [0.01, -0.04, 0.04, -0.01, 0.0], gain=gain):
                run["backend"], run["collector"] = "mjwarp", "device-resident"
                (folder / f"{config}-{run['training_config']['seed']}.json").write_text(json.dumps(run))
        return mjwarp_report.sim_training_table(folder, final_last=100)

    trusted = study(1.0)
    assert "**MuJoCo Warp (GPU), device-resident collector vs CPU MuJoCo: EQUIVALENT**" in trusted
    assert ("(negative control) vs CPU MuJoCo: NOT SHOWN EQUIVALENT** (a trustworthy test fails it)" in trusted
            and "**The test is trusted: it fails the negative control.**" in trusted)
    assert "**The test is not trusted: it passes the negative control.**" in study(3.0)
