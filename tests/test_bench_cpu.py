"""CPU-only tests of the training benchmark harness (experiments/bench/).

What a GPU run cannot be trusted to catch by itself: the no-CUDA refusal (one line,
non-zero, nothing written), the original report's command line still parsing into the
same Hydra overrides, the statistics every table is built from, the report/plot code
run on a real run JSON (tests/data/, written by the real script on a lent H200), the
timing hook on the real ``OffPolicyLogger``, and the asset check. Runs in seconds.
"""

from __future__ import annotations

import copy
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
BENCH = PROJECT / "experiments" / "bench"
sys.path[:0] = [str(PROJECT / "experiments" / folder) for folder in ("bench", "evidence", "tables")]

import bench_configs  # noqa: E402
import bench_driver  # noqa: E402
import bench_env  # noqa: E402
import bench_learner  # noqa: E402
import bench_options  # noqa: E402
import bench_records  # noqa: E402
import bench_report  # noqa: E402
import bench_stats  # noqa: E402

REAL_RUN = PROJECT / "tests" / "data" / "bench_run_h200_upstream140_warm.json"
ORIGINAL_ARGV = [
    "--unilab-root", "/nonexistent/UniLab", "--backend", "mujoco", "--iterations", "1000",
    "--summary-last", "500", "--num-envs", "256", "--batch-size", "256", "--replay-buffer-n", "32",
    "--learning-starts", "8", "--updates-per-step", "2", "--policy-frequency", "2", "--compile",
]


def _real_run() -> dict:
    return json.loads(REAL_RUN.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ no CUDA

def test_no_cuda_one_error_line_nonzero_and_nothing_written(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, str(BENCH / "benchmark_flashsac_training.py"), *ORIGINAL_ARGV, "--output", str(out)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("benchmark_flashsac_training: error: CUDA is required")
    assert proc.stdout == ""
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_matrix_driver_refuses_without_cuda_and_writes_no_results(tmp_path: Path) -> None:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_matrix.py"), "--quick", "--results-root", str(tmp_path / "results")],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1
    assert "CUDA is required" in proc.stderr
    assert not (tmp_path / "results").exists()


# ------------------------------------------------------------------ command line

def test_original_command_line_parses_into_the_same_overrides(tmp_path: Path) -> None:
    args = bench_options.parse_args([*ORIGINAL_ARGV, "--output", "x.json"])
    assert (args.iterations, args.summary_last, args.num_envs, args.batch_size) == (1000, 500, 256, 256)
    assert (args.replay_buffer_n, args.learning_starts, args.updates_per_step, args.policy_frequency) == (32, 8, 2, 2)
    assert args.compile is True and args.backend == "mujoco" and args.output == Path("x.json")
    overrides = bench_options.hydra_overrides(args, tmp_path / "logs")
    for expected in ("task=g1_walk_flat/mujoco", "algo.max_iterations=1000", "algo.num_envs=256",
                     "algo.batch_size=256", "algo.replay_buffer_n=32", "algo.learning_starts=8",
                     "algo.updates_per_step=2", "algo.policy_frequency=2", "training.no_play=true",
                     "++algo.algo_params.use_compile=true", "++algo.algo_params.compile_full_objectives=true",
                     f"training.log_dir='{tmp_path / 'logs'}'"):
        assert expected in overrides
    assert bench_options.config_identity(args) == ("compile", bench_configs.CONFIGS["compile"].label)


def test_no_compile_turns_both_switches_off_and_config_is_exclusive() -> None:
    args = bench_options.parse_args([*ORIGINAL_ARGV[:-1], "--no-compile"])
    overrides = bench_options.hydra_overrides(args, Path("/tmp/l"))
    assert "++algo.algo_params.use_compile=false" in overrides
    assert "++algo.algo_params.compile_full_objectives=false" in overrides
    with pytest.raises(SystemExit) as exc:
        bench_options.parse_args([*ORIGINAL_ARGV, "--config", "eager"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        bench_options.parse_args([*ORIGINAL_ARGV[:-1], "--iterations", "0"])


def _switches(tree: Path, overrides: list[str]) -> dict[str, bool]:
    """The learner switches the patched tree's flashsac config resolves to under ``overrides``."""
    from hydra import compose, initialize_config_dir

    conf = tree / "src" / "unilab" / "conf" / "flashsac"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        params = compose("config", overrides=overrides).algo.algo_params
    return {key: bool(params[key]) for key in (
        "use_compile", "compile_full_objectives", "use_cuda_graph_critic", "use_cuda_graph_actor",
        "use_whole_cycle_cuda_graph", "use_cuda_graph_inference")}


@pytest.mark.parametrize(("flag", "name"), [("--compile", "compile"), ("--no-compile", "eager")])
def test_compile_flags_mean_exactly_the_named_configurations(
    flag: str, name: str, tmp_path: Path, patched_unilab_root: Path
) -> None:
    """--compile / --no-compile run exactly the named configuration they are labelled as."""
    base = bench_options.parse_args([*ORIGINAL_ARGV[:-1], "--output", "x.json"])
    flagged = bench_options.parse_args([*ORIGINAL_ARGV[:-1], flag, "--output", "x.json"])
    named = bench_options.parse_args([*ORIGINAL_ARGV[:-1], "--config", name, "--output", "x.json"])
    logs = tmp_path / "logs"
    common = bench_options.hydra_overrides(base, logs)
    flag_overrides = bench_options.hydra_overrides(flagged, logs)
    assert flag_overrides == bench_options.hydra_overrides(named, logs)
    assert bench_options.config_identity(flagged) == bench_options.config_identity(named) == (
        name, bench_configs.CONFIGS[name].label)
    # What the trainer really resolves: every switch as the named configuration sets it,
    # the tree's default graphs (whole-cycle graph, graphed inference) off.
    own = [o for o in flag_overrides if o not in common]
    switches = _switches(patched_unilab_root, own)
    assert switches == _switches(patched_unilab_root, list(bench_configs.CONFIGS[name].overrides))
    assert switches["use_whole_cycle_cuda_graph"] is False
    assert switches["use_cuda_graph_inference"] is False
    assert switches["use_compile"] is (name == "compile")
    # Negative control: the former flag overrides (compile switches and the whole-cycle graph
    # only) left the tree's graphed inference on under the same label.
    former = [f"++algo.algo_params.use_compile={name == 'compile'}".lower(),
              f"++algo.algo_params.compile_full_objectives={name == 'compile'}".lower(),
              f"++{bench_configs.WHOLE_CYCLE_GRAPH_KEY}=false"]
    assert _switches(patched_unilab_root, former)["use_cuda_graph_inference"] is True


def test_reference_configs_choose_their_learner_and_keep_the_overlay_off_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overlay = tmp_path / "overlay"
    (overlay / "uni_rl").mkdir(parents=True)
    (overlay / "uni_rl" / "__init__.py").write_text("")
    (overlay / "unisim").mkdir()
    (overlay / "sitecustomize.py").write_text("")
    base = tmp_path / "base"
    (base / "uni_rl").mkdir(parents=True)
    (base / "uni_rl" / "__init__.py").write_text("")
    args = bench_options.parse_args(["--config", "baseline-1.3.2", "--baseline-uni-rl", str(base), "--overlay", str(overlay)])
    assert bench_learner.resolve_learner(args) == ("baseline", base.resolve())
    args = bench_options.parse_args(["--config", "upstream-1.4.0", "--overlay", str(overlay)])
    source, path = bench_learner.resolve_learner(args)
    assert (source, path) == ("installed", None)
    site = bench_learner.provenance_site(overlay, path, tmp_path / "scratch")
    assert site is not None and (site / "sitecustomize.py").exists()
    assert not (site / "uni_rl").exists() and not (site / "unisim").exists()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(overlay), "/elsewhere"]))
    env = bench_learner.child_env(learner_path=None, prov_site=site, unilab_root=tmp_path / "ul", overlay=overlay,
                           timings=tmp_path / "t.jsonl", provenance_dir=tmp_path / "p")
    entries = env["PYTHONPATH"].split(os.pathsep)
    assert str(overlay) not in entries and entries[0] == str(site) and "/elsewhere" in entries
    assert bench_learner.source_matches("installed", None, "/site-packages/uni_rl", overlay)
    assert not bench_learner.source_matches("installed", None, str(overlay / "uni_rl"), overlay)
    assert not bench_learner.source_matches("baseline", base, "/site-packages/uni_rl", overlay)


def test_overlay_learner_missing_is_a_clear_error(tmp_path: Path) -> None:
    args = bench_options.parse_args(["--overlay", str(tmp_path)])
    with pytest.raises(bench_env.BenchSetupError, match="make apply"):
        bench_learner.resolve_learner(args)


def test_schedules_are_the_original_reports() -> None:
    assert [s.label for s in bench_configs.SCHEDULES] == ["2/1/1", "8/4/4"]
    assert bench_configs.Schedule(3, 2).actor_updates == 2


def test_last_exception_line_finds_the_root_cause_not_hydra_exit() -> None:
    tail = ("Traceback (most recent call last):\n  File \"w.py\", line 1\n"
            "TimeoutError: Timed out waiting for off-policy inference tick 9\n"
            "│ TimeoutError: boxed copy │\n\x1b[31mError executing job with overrides: [...]\x1b[0m\n")
    assert bench_records.last_exception_line(tail) == "TimeoutError: Timed out waiting for off-policy inference tick 9"


# ------------------------------------------------------------------ statistics

def test_percentile_matches_numpy_linear_definition() -> None:
    numpy = pytest.importorskip("numpy")
    rng = random.Random(7)
    for n in (1, 2, 5, 101, 500):
        values = [rng.lognormvariate(3, 0.5) for _ in range(n)]
        for q in (0.5, 0.9, 0.95):
            assert bench_stats.percentile(values, q) == pytest.approx(float(numpy.percentile(values, q * 100)))


def test_summary_window_and_warmup_are_separate() -> None:
    rows = [{"step": i, "learner_train_ms": 5000.0 if i == 1 else 10.0 + i % 3, "iter_ms": 20.0,
             "collector_cycle_ms": None if i == 1 else 12.0, "wall_s": 5.0 + 0.025 * i + (0.01 if i == 9 else 0.0)}
            for i in range(1, 11)]
    report = bench_stats.timing_report(rows, summary_last=4)
    assert [r["step"] for r in report["rows"]] == [7, 8, 9, 10]
    # wall between consecutive iterations: 25 ms, except 35 into step 9 and 15 out of it
    assert [r["wall_per_iter_ms"] for r in report["rows"]] == pytest.approx([25.0, 25.0, 35.0, 15.0])
    assert report["rows_all"][0]["wall_per_iter_ms"] is None  # no predecessor
    assert report["wall_per_iter_ms"]["mean_ms"] == pytest.approx(25.0)
    assert report["wall_per_iter_ms"]["p90_ms"] == pytest.approx(32.0)
    assert report["summary_first_step"] == 7 and report["num_samples_all"] == 10
    assert report["learner_train_ms"]["max_ms"] < 100  # the compile iteration is not in the summary
    assert report["collector_cycle_ms"]["count"] == 4
    warm = bench_stats.warmup_report(report["rows_all"], report["rows"], first_iteration_wall_s=12.5)
    assert warm["iterations_before_summary"] == 6
    assert warm["first_iteration_learner_train_ms"] == 5000.0
    median = report["learner_train_ms"]["median_ms"]
    assert warm["excess_learner_ms"] == pytest.approx(sum(max(r["learner_train_ms"] - median, 0) for r in rows[:6]))
    with pytest.raises(ValueError):
        bench_stats.timing_report(rows, summary_last=5, skip_first=10)


def test_real_run_json_is_consistent_with_its_own_rows() -> None:
    run = _real_run()
    again = bench_stats.timing_report(run["rows_all"], summary_last=run["summary_last"])
    for field in bench_stats.TIMING_FIELDS:
        if field in run:  # this run predates wall_per_iter_ms
            assert again[field] == pytest.approx(run[field])
    # The wall field is the mean period over the window, its first iteration's period included.
    window, before = run["rows"], run["rows_all"][len(run["rows_all"]) - len(run["rows"]) - 1]
    period = (window[-1]["wall_s"] - before["wall_s"]) * 1000 / (window[-1]["step"] - before["step"])
    assert again["wall_per_iter_ms"]["mean_ms"] == pytest.approx(period)
    wait = statistics.fmean(r["collector_timing_ms"]["learner_action_wait_ms"] for r in run["rows"])
    assert again["collector_phases_ms"]["action_wait"] == pytest.approx(wait)
    assert run["warmup"]["first_iteration_learner_train_ms"] > 10 * run["learner_train_ms"]["median_ms"]
    assert run["device"]["flashsac_source_ok"] and run["status"] == "completed"


# ------------------------------------------------------------------ report

def _scaled(run: dict, config: str, factor: float, name: str) -> dict:
    """A second run for the table: the real rows scaled (test input, not a result)."""
    other = copy.deepcopy(run)
    other["config"], other["_file"] = config, name
    for row in other["rows_all"]:
        for field in ("learner_train_ms", "iter_ms"):
            row[field] *= factor
    other.update(bench_stats.timing_report(other["rows_all"], summary_last=other["summary_last"]))
    return other


def test_summary_table_reductions_and_ratios(tmp_path: Path) -> None:
    upstream = _real_run()
    baseline = _scaled(upstream, "baseline-1.3.2", 2.0, "b.json")
    compiled = _scaled(upstream, "compile", 0.5, "c.json")
    failed = {"status": "failed", "config": "eager", "training_config": {"schedule": "2/1/1"}, "error": "boom"}
    table = bench_report.summary_table([upstream, baseline, compiled, failed])
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]] for line in table.splitlines()[2:]}
    assert rows["full-objective compile"][11] == "75.0%"  # 0.5x vs 2x baseline
    assert rows["full-objective compile"][13] == "0.50×"
    assert rows["unpatched unilab-rl 1.3.2 (eager)"][11] == "0.0%"
    assert rows["upstream unilab-rl 1.4.0 compile_full_objectives"][14] == "1.00×"
    assert "FAILED" in rows["deferred eager"][3]
    mean = float(rows["full-objective compile"][3])
    assert mean == pytest.approx(upstream["learner_train_ms"]["mean_ms"] * 0.5, abs=0.01)
    md = tmp_path / "summary.md"
    bench_report.write_summary([upstream, baseline, compiled, failed], md, title="t")
    text = md.read_text()
    assert "## Compile / capture warm-up" in text and "boom" in text and "NVIDIA H200" in text


def test_pace_table_sets_the_iteration_against_the_collectors_cycle() -> None:
    """iter / cycle and the collector's phases are means over the summarized rows, per configuration."""
    run = _real_run()
    run.update(bench_stats.timing_report(run["rows_all"], summary_last=run["summary_last"]))
    failed = {"status": "failed", "config": "eager", "training_config": {"schedule": "2/1/1"}, "error": "boom"}
    lines = bench_report.pace_table([run, failed]).splitlines()
    assert len(lines) == 3  # header, rule, the one completed run: a failed run has no pace
    cells = [c.strip() for c in lines[2].split("|")[1:-1]]
    rows = run["rows"]
    iter_mean = statistics.fmean(r["iter_ms"] for r in rows)
    cycle_mean = statistics.fmean(r["collector_cycle_ms"] for r in rows)
    assert float(cells[2]) == pytest.approx(iter_mean, abs=0.005)
    before = run["rows_all"][len(run["rows_all"]) - len(rows) - 1]
    period = (rows[-1]["wall_s"] - before["wall_s"]) * 1000 / (rows[-1]["step"] - before["step"])
    assert float(cells[3]) == pytest.approx(period, abs=0.005)  # contiguous rows: the mean period
    assert float(cells[4]) == pytest.approx(cycle_mean, abs=0.005)
    assert cells[5] == f"{iter_mean / cycle_mean:.2f}"
    wait = statistics.fmean(r["collector_timing_ms"]["learner_action_wait_ms"] for r in rows)
    assert float(cells[7]) == pytest.approx(wait, abs=0.005)
    assert float(cells[8]) == pytest.approx(statistics.fmean(r["inference_ms"] for r in rows), abs=0.005)


def test_plots_are_real_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = _real_run()
    runs = [run, _scaled(run, "baseline-1.3.2", 2.0, "b.json")]
    bench_report.plot_timings(runs, tmp_path / "timings.png")
    seeded = []
    for seed in (1, 2):
        r = copy.deepcopy(run)
        r["training_config"]["seed"] = seed
        for row in r["rows_all"]:
            row["reward"] = (row["reward"] or 0) + seed
        seeded.append(r)
    bench_report.plot_rewards(seeded, tmp_path / "rewards.png")
    for name in ("timings.png", "rewards.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


# ------------------------------------------------------------------ timing hook on the real logger

def test_hook_records_what_the_real_logger_receives(tmp_path: Path) -> None:
    pytest.importorskip("uni_rl.logging.offpolicy")
    sink = tmp_path / "t.jsonl"
    code = (
        "import flashsac_bench_hook as h\n"
        "assert h.install()\n"
        "from uni_rl.logging.offpolicy import OffPolicyLogger\n"
        "lg = OffPolicyLogger(log_backend='none', num_envs=4)\n"
        "lg.update_collector_timing({'inference_request_ms': 1.0, 'learner_action_wait_ms': 2.0,"
        " 'env_step_ms': 8.0, 'replay_write_ms': 0.5})\n"
        "for i in (1, 2):\n"
        "    lg.log_step(iteration=i, train_time=0.01 * i, iteration_time=0.03, reward=None if i == 1 else 2.5)\n"
        "h.write_end('completed')\n"
    )
    env = dict(os.environ, FLASHSAC_BENCH_TIMINGS=str(sink),
               PYTHONPATH=os.pathsep.join([str(BENCH / "hook"), os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120, capture_output=True)
    meta, rows, end = bench_records.read_timings(sink)
    assert meta["flashsac_source"].endswith("uni_rl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["learner_train_ms"] == pytest.approx(20.0) and rows[1]["iter_ms"] == pytest.approx(30.0)
    assert rows[0]["collector_cycle_ms"] == pytest.approx(11.5)  # the logger's own cycle sum
    assert rows[0]["reward"] is None and rows[1]["reward"] == 2.5
    assert end["status"] == "completed" and end["uni_rl_modules"]


# ------------------------------------------------------------------ live panel

@pytest.mark.parametrize(("panel", "tty"), [("always", "True"), ("never", "False")])
def test_live_panel_gives_the_trainer_a_terminal_only_when_asked(tmp_path: Path, panel: str, tty: str) -> None:
    from bench_launcher import run_child

    result = run_child([sys.executable, "-c", "import sys; print(sys.stdout.isatty()); sys.exit(3)"],
                       cwd=tmp_path, env=dict(os.environ), panel=panel)  # type: ignore[arg-type]
    assert result.returncode == 3 and not result.timed_out
    assert result.output_tail.strip() == tty


def test_timeout_ends_the_trainer_group(tmp_path: Path) -> None:
    from bench_launcher import run_child

    result = run_child([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path,
                       env=dict(os.environ), panel="never", timeout_s=1.0)
    assert result.timed_out and result.returncode == 124 and result.wall_s < 30


# ------------------------------------------------------------------ assets

def _tiny_tree(root: Path) -> None:
    g1 = root / "src/unilab/assets/robots/g1"
    g1.mkdir(parents=True)
    (g1 / "scene_flat.xml").write_text('<mujoco><include file="g1.xml"/></mujoco>')
    (g1 / "g1.xml").write_text('<mujoco><compiler meshdir="assets"/><asset><mesh name="a" file="a.STL"/>'
                               '<mesh name="b" file="b.STL"/></asset></mujoco>')


def test_asset_check_follows_the_scene_and_seeds_from_a_tarball(tmp_path: Path) -> None:
    tree = tmp_path / "UniLab"
    _tiny_tree(tree)
    missing = bench_env.missing_assets(tree)
    assert sorted(p.name for p in missing) == ["a.STL", "b.STL"]
    with pytest.raises(bench_env.BenchSetupError, match="2 G1 asset file"):
        bench_env.ensure_assets(tree, None)
    src = tmp_path / "seed/robots/g1/assets"
    src.mkdir(parents=True)
    for name in ("a.STL", "b.STL"):
        (src / name).write_bytes(b"solid x\n")
    archive = tmp_path / "assets.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(tmp_path / "seed/robots", arcname="robots")
    assert bench_env.ensure_assets(tree, archive)["seeded_files"] == 2
    assert bench_env.missing_assets(tree) == []


def test_version_drift_and_applied_state() -> None:
    pins = {"TORCH_VERSION": "2.8.0+cu128", "UNILAB_VERSION": "1.3.2"}
    assert bench_env.version_drift({"torch": "2.11.0", "unilab": "1.3.2"}, pins) == {
        "torch": {"pinned": "2.8.0+cu128", "found": "2.11.0"}}
    with pytest.raises(bench_env.BenchSetupError, match="not applied"):
        bench_env.require_applied({"phase": "not applied", "series_sha256": "ab", "patches": []})
    with pytest.raises(bench_env.BenchSetupError, match="0001"):
        bench_env.require_applied({"phase": "applied", "series_sha256": "ab",
                                   "patches": [{"name": "0001", "status": "edited"}]})
    assert bench_env.require_applied({"phase": "applied", "series_sha256": "ab",
                                      "patches": [{"name": "0001", "status": "applied"}]}) == "ab"


def test_matrix_alternates_configurations_and_reverses_odd_rounds() -> None:
    import bench_matrix

    specs = bench_matrix.plan(["a", "b", "c"], ["report"], repeats=2)
    assert [(s.config, s.updates_per_step) for s in specs] == [
        ("a", 2), ("b", 2), ("c", 2), ("a", 8), ("b", 8), ("c", 8),
        ("c", 2), ("b", 2), ("a", 2), ("c", 8), ("b", 8), ("a", 8),
    ]
    # Both settings in one invocation: UniLab's defaults keep the tree's schedule (no override),
    # and SCHEDULES narrows only the report's.
    specs = bench_matrix.plan(["a", "b"], ["report", "unilab-default"], repeats=1, schedules=[2])
    assert [(s.setting, s.config, s.updates_per_step) for s in specs] == [
        ("report", "a", 2), ("report", "b", 2), ("unilab-default", "a", None), ("unilab-default", "b", None),
    ]


def test_a_run_folder_is_named_date_machine_study_as_the_index_accepts_it(tmp_path: Path) -> None:
    """`make bench` writes results/<date>-<machine>-<study>/, a name results/README.md indexes as it is;
    controls: a vendor-prefixed or dashed machine, and a study with a capital, are usage errors."""
    import bench_matrix
    import bench_parity
    import results_index

    assert bench_driver.machine_token("NVIDIA H200", 1) == "h200"
    assert bench_driver.machine_token("NVIDIA H200", 2) == "h200x2"
    first = bench_driver.results_dir(tmp_path, "h200", "bench")
    second = bench_driver.results_dir(tmp_path, "h200", "bench")
    date = first.name.removesuffix("-h200-bench")
    assert results_index.NAME.fullmatch(first.name)["date"] == date and (first / "runs").is_dir()
    assert second.name == f"{date}-h200-bench-2" and results_index.NAME.fullmatch(second.name)["study"] == "bench-2"
    assert results_index._where(first.name)[1] == results_index.MACHINES["h200"]
    assert bench_matrix.build_parser().parse_args([]).study == "bench"
    assert bench_parity.build_parser().parse_args([]).study == "parity"
    for argv in (["--machine", "nvidia-h200"], ["--machine", "H200"], ["--study", "Mjwarp"], ["--study", "-x"]):
        with pytest.raises(SystemExit):
            bench_matrix.build_parser().parse_args(argv)


# ------------------------------------------------------------------ settings, throughput, physics floor

def test_settings_fill_the_report_values_and_unilab_default_overrides_nothing() -> None:
    args = bench_options.parse_args(["--unilab-root", "/x", "--setting", "report", "--config", "patched-default"])
    assert (args.num_envs, args.batch_size, args.replay_buffer_n, args.learning_starts) == (256, 256, 32, 8)
    assert args.updates_per_step == 2  # the report's first schedule, 2/1/1
    assert bench_options.setting_name(args) == "report"
    overrides = bench_options.hydra_overrides(args, Path("/logs"))
    assert "algo.num_envs=256" in overrides and "algo.batch_size=256" in overrides
    args = bench_options.parse_args(["--unilab-root", "/x", "--setting", "unilab-default", "--config", "patched-default"])
    assert bench_options.setting_name(args) == "unilab-default"
    assert not [o for o in bench_options.hydra_overrides(args, Path("/logs")) if o.split("=")[0] in (
        "algo.num_envs", "algo.batch_size", "algo.replay_buffer_n", "algo.learning_starts", "algo.updates_per_step")]
    # an explicit flag wins over the setting, and is then no longer the named setting
    args = bench_options.parse_args(["--unilab-root", "/x", "--setting", "report", "--num-envs", "512"])
    assert args.num_envs == 512 and bench_options.setting_name(args) == "custom"


def test_references_train_on_the_pristine_tree_and_ours_on_the_patched() -> None:
    trees = {name: config.tree for name, config in bench_configs.CONFIGS.items()}
    assert trees["baseline-1.3.2"] == trees["upstream-1.4.0"] == "pristine"
    assert {trees[n] for n in trees if n not in ("baseline-1.3.2", "upstream-1.4.0")} == {"patched"}


def test_throughput_and_floor_arithmetic() -> None:
    import physics_floor

    rate = bench_stats.throughput({"mean_ms": 16.0, "median_ms": 12.8}, envs=256, ranks=2)
    assert rate["mean"] == pytest.approx(32000.0) and rate["median"] == pytest.approx(40000.0)
    # 4096 envs × 3 substeps × 125 µs on 16 workers = 96 ms
    assert physics_floor.floor_ms(125.0, substeps=3, envs=4096, workers=16) == pytest.approx(96.0)
    assert physics_floor.physics_workers(envs=4, cpus=16) == 4  # never more workers than envs
    for bad in ({"substeps": 0, "envs": 1, "workers": 1}, {"substeps": 3, "envs": 1, "workers": 0}):
        with pytest.raises(ValueError):
            physics_floor.floor_ms(100.0, **bad)
    with pytest.raises(ValueError):
        bench_stats.throughput({"mean_ms": 1.0, "median_ms": 1.0}, envs=0)
    floor = bench_records.floor_report(
        physics_floor.StepCost("s", 10, 100.0, 100.0, "3.11.0", 16),
        {"config": {"env": {"sim_dt": 1 / 150, "ctrl_dt": 0.02}}}, {"mean_ms": 16.0}, 256)
    assert floor["substeps"] == 3 and floor["workers"] == 16
    assert floor["floor_ms"] == pytest.approx(4.8) and floor["wall_over_floor"] == pytest.approx(16.0 / 4.8)
    assert bench_records.floor_report(None, None, None, 256)["floor_ms"] is None


def test_physics_floor_measures_the_real_g1_scene(tmp_path: Path) -> None:
    """Real MuJoCo on the tree's G1 scene (assets from ../shared, as CI has them): a plausible cost."""
    import physics_floor

    assets = PROJECT.parent / "shared" / "assets" / "unilab-1.3.2-g1-assets.tar.xz"
    tree = bench_env.DEFAULT_UNILAB_ROOT
    if not (tree / bench_env.G1_SCENE_REL).is_file():
        pytest.skip("the embedded tree is made by the applier tests / make apply")
    bench_env.ensure_assets(tree, assets if assets.is_file() else None)
    cost = physics_floor.measure_step_cost(tree / bench_env.G1_SCENE_REL, steps=300)
    assert 5.0 < cost.mean_us < 5000.0 and cost.steps == 300 and cost.mujoco == "3.11.0"


def test_throughput_table_reads_wall_and_phases_per_setting() -> None:
    run = _real_run()
    run.update(bench_stats.timing_report(run["rows_all"], summary_last=run["summary_last"]))
    run["env_steps_per_s"] = bench_stats.throughput(run["wall_per_iter_ms"], envs=256)
    run["physics_floor"] = {"floor_ms": 5.0}
    baseline = _scaled(run, "baseline-1.3.2", 2.0, "b.json")
    for row in baseline["rows_all"]:
        row["wall_s"] *= 2.0  # the baseline's iterations take twice the wall time
    baseline.update(bench_stats.timing_report(baseline["rows_all"], summary_last=run["summary_last"]))
    default = copy.deepcopy(run)
    default["setting"], default["config"] = "unilab-default", "patched-default"
    lines = bench_report.throughput_table([run, baseline, default]).splitlines()
    rows = {(c[0], c[1]): c for c in ([x.strip() for x in line.split("|")[1:-1]] for line in lines[2:])}
    up = rows[("upstream unilab-rl 1.4.0 compile_full_objectives", "2/1/1")]
    wall = run["wall_per_iter_ms"]["mean_ms"]
    assert float(up[2]) == pytest.approx(wall, abs=0.005)
    assert float(up[6]) == pytest.approx(256_000 / wall, abs=1)
    physics = statistics.fmean(r["collector_timing_ms"]["env_step_backend_ms"] for r in run["rows"])
    assert float(up[7]) == pytest.approx(physics, abs=0.005)
    assert float(up[12]) == pytest.approx(wall / physics, abs=0.005)
    assert float(up[14]) == pytest.approx(wall / 5.0, abs=0.005)
    assert up[16] == "1.00×"
    assert rows[("upstream unilab-rl 1.4.0 compile_full_objectives", "2/1/1")][15] == "50.0%"  # half the baseline's wall
    assert ("patched defaults, compiled before tick 0", "unilab-default 2/1/1") in rows  # its own column, not mixed with report's
    assert rows[("patched defaults, compiled before tick 0", "unilab-default 2/1/1")][15] == "–"  # no 1.3.2 run at that setting


def test_a_compiled_behind_run_that_swapped_inside_its_summary_window_is_marked() -> None:
    """A compiled-behind run's figures are the compiled steady state only when its swap came before the summary
    window; the tables mark its configuration otherwise (a swap inside the window, or none), and only then."""
    run = _real_run()
    run.update(bench_stats.timing_report(run["rows_all"], summary_last=run["summary_last"]))
    run["config"] = "compile-behind"
    first = int(run["rows"][0]["step"])

    def label(record: dict | None) -> str:
        marked = copy.deepcopy(run)
        marked["run_summary"] = {"compile_behind": record} if record is not None else {}
        lines = bench_report.throughput_table([marked]).splitlines()
        return lines[2].split("|")[1].strip()

    plain = "patched defaults, compiled behind"
    assert label(None) == plain  # not compiled behind
    assert label({"swap_iteration": first - 100}) == plain  # swapped before the window
    assert label({"swap_iteration": first}) == plain  # the window's first iteration is already compiled
    late = plain + " (swap not before the summary window: 1 of 1 runs)"
    assert label({"swap_iteration": first + 1}) == late  # control: inside the window
    assert label({"helper_exit_code": -9}) == late  # control: never swapped


# ------------------------------------------------------------------ README and docs tables come from results/

#: Pages whose tables are generated: the front page's headline and whole-run pair, and the collector's page.
TABLE_PAGES = ("README.md", "docs/collector.md")


def test_readme_tables_are_generated_from_the_committed_runs() -> None:
    import readme_tables

    documents = readme_tables.documents()
    assert {PROJECT / page for page in TABLE_PAGES} <= set(documents)
    for doc in documents:
        assert readme_tables.stale_blocks(doc.read_text(encoding="utf-8")) == [], doc


@pytest.mark.parametrize("page", TABLE_PAGES)
def test_a_changed_figure_in_a_page_is_caught(page: str) -> None:
    """Negative control per page: one changed figure in its first block is caught, and regenerating restores it."""
    import readme_tables

    text = (PROJECT / page).read_text(encoding="utf-8")
    blocks = list(readme_tables.BLOCK.finditer(text))
    assert blocks, f"{page} has no generated table block"
    body = blocks[0]["body"]
    digit = next(i for i, ch in enumerate(body) if ch.isdigit())
    changed = text.replace(body, body[:digit] + str((int(body[digit]) + 1) % 10) + body[digit + 1:], 1)
    assert readme_tables.stale_blocks(changed) == [f"{blocks[0]['kind']}:{blocks[0]['folder']}"]
    assert readme_tables.regenerate(changed) == text


def test_headline_keeps_the_builds_a_user_picks_and_marks_mps() -> None:
    """The front page's rows: 1.3.2, 1.4.0 and the patched default only; MPS runs are their own row; each row names
    its evidence folder. Control: a run that did not complete is left out."""
    import headline_table

    folder = "results/2026-12-01-h200-mjwarp-mps-sim2sim/bench-mps"
    runs = [{**run, "_folder": folder} for run in bench_report.load_runs(PROJECT / folder)]
    behind = {**runs[0], "config": "compile-behind", "status": "completed"}
    table = headline_table.headline_table([*runs, behind])
    assert "compiled behind" not in table and len(table.split("\n\n")[0].splitlines()) == 2 + 2
    assert "| MuJoCo Warp (GPU), CUDA MPS | 1 | 38.0 | 107662 |" in table
    assert "| MuJoCo Warp (GPU) | 1 | " in table and "| 91133 |" in table
    assert "| 2026-12-01-h200-mjwarp-mps-sim2sim |" in table
    failed = [{**run, "status": "failed"} if bench_report.mps_suffix(run) else run for run in runs]
    assert "CUDA MPS" not in headline_table.headline_table(failed)


def test_headline_keeps_the_collectors_apart() -> None:
    """The device-resident collector's run and the host-env run of one invocation are two rows. Control: the
    same runs without the collector field pool into one."""
    import headline_table

    folder = "results/2026-12-01-h200-device-env/bench-report-2-1-1"
    runs = [{**run, "_folder": folder} for run in bench_report.load_runs(PROJECT / folder)]
    table = headline_table.headline_table(runs)
    assert "| MuJoCo Warp (GPU), device-resident collector | 1 | 14.5 | 17693 |" in table
    assert "| MuJoCo Warp (GPU) | 1 | 22.4 | 11449 |" in table
    pooled = headline_table.headline_table([{k: v for k, v in run.items() if k != "collector"} for run in runs])
    assert "device-resident" not in pooled and "| MuJoCo Warp (GPU) | 2 | " in pooled


def test_headline_shows_the_newest_series_of_each_row() -> None:
    """A row measured with several series shows the runs of the one measured last; another row keeps its own.
    Control: the same older run dated later takes the row back."""
    import headline_table

    folder = "results/2026-12-01-h200-device-env/bench-report-2-1-1"
    runs = [{**run, "_folder": folder} for run in bench_report.load_runs(PROJECT / folder)]
    device = next(run for run in runs if run.get("collector") == "device-resident")
    older = {**device, "series_sha256": "0" * 64, "started_utc": "2000-01-01T00:00:00Z",
             "wall_per_iter_ms": {**device["wall_per_iter_ms"]}, "rows": [
                 {**row, "wall_per_iter_ms": row["wall_per_iter_ms"] * 2} for row in device["rows"]]}
    table = headline_table.headline_table([*runs, older])
    assert "| MuJoCo Warp (GPU), device-resident collector | 1 | 14.5 | 17693 |" in table and "`000000000000`" not in table
    assert "| MuJoCo Warp (GPU) | 1 | 22.4 | 11449 |" in table
    later = headline_table.headline_table([*runs, {**older, "started_utc": "2999-01-01T00:00:00Z"}])
    assert "`000000000000`" in later and "| 14.5 | 17693 |" not in later


def test_committed_runs_with_legacy_names_read_as_the_table_names_them(tmp_path: Path) -> None:
    """Runs recorded before the whole-cycle graph had one name say ``iteration-graph``: they group and sort
    under the table's name; the command lines take the legacy name too. Control: an unknown name stays unknown."""
    legacy = _scaled(_real_run(), "iteration-graph-inference", 0.5, "legacy.json")
    (tmp_path / "legacy.json").write_text(json.dumps(legacy))
    (run,) = bench_report.load_runs(tmp_path)
    assert run["config"] == "whole-cycle-graph-inference"
    table = bench_report.summary_table([run])
    assert table.splitlines()[2].split("|")[1].strip() == "whole-cycle graph + graphed inference"
    args = bench_options.parse_args(["--unilab-root", "/x", "--config", "iteration-graph"])
    assert bench_options.selected_config(args) is bench_configs.CONFIGS["whole-cycle-graph"]
    with pytest.raises(SystemExit):
        bench_options.parse_args(["--unilab-root", "/x", "--config", "iteration-graf"])


def test_device_scripts_read_their_lists_from_the_table() -> None:
    script = BENCH / "bench_configs.py"
    proc = subprocess.run([sys.executable, str(script), "list", "evidence"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip().split(",") == list(bench_configs.EVIDENCE_CONFIGS)
    assert set(bench_configs.EVIDENCE_CONFIGS) == set(bench_configs.MATRIX_CONFIGS)
    proc = subprocess.run([sys.executable, str(script), "list", "replay-paths"], capture_output=True, text=True)
    assert proc.stdout.strip() == "inductor_cudagraphs,manual_cudagraphs,whole_cycle_graph"
    bad = subprocess.run([sys.executable, str(script), "list", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and not bad.stdout


def test_the_bench_reads_the_applier_status_in_process_as_the_cli_prints_it(
    applied_session: tuple[Path, Path], checkout: Path, tmp_path: Path
) -> None:
    """experiments/ asks the applier's public API (patchset.api.status), no subprocess: the same answer as
    `python -m patchset status --json`. Controls: a pristine checkout is refused as not applied; a folder
    that is no checkout gives one clear line."""
    from conftest import patchset

    tree, overlay = applied_session
    status = bench_env.patchset_status(tree, overlay)
    cli = patchset(overlay, "status", "--unilab", str(tree), "--json")
    assert cli.returncode == 0 and status == json.loads(cli.stdout)
    assert bench_env.require_applied(status) == status["series_sha256"]
    with pytest.raises(bench_env.BenchSetupError, match="not applied"):
        bench_env.require_applied(bench_env.patchset_status(checkout, tmp_path / "no-overlay"))
    with pytest.raises(bench_env.BenchSetupError, match="is not a UniLab checkout") as refused:
        bench_env.patchset_status(tmp_path, None)
    assert "\n" not in str(refused.value)


def test_default_paths_follow_the_pins() -> None:
    pins = bench_env.PINS
    assert bench_env.DEFAULT_UNILAB_ROOT == PROJECT / "work" / f"unilab-{pins['UNILAB_VERSION']}"
    assert bench_env.BASELINE_UNI_RL_DIR.name == f"unilab-rl-{pins['UNILAB_RL_BASE_VERSION']}"
    proc = subprocess.run([sys.executable, str(BENCH / "bench_env.py"), "path", "baseline-uni-rl"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and PROJECT / proc.stdout.strip() == bench_env.BASELINE_UNI_RL_DIR
    bad = subprocess.run([sys.executable, str(BENCH / "bench_env.py"), "path", "nope"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ GPU physics (MuJoCo Warp) in the bench

def test_physics_alternate_with_the_configurations_and_references_stay_on_cpu_mujoco() -> None:
    import bench_matrix

    specs = bench_matrix.plan(["upstream-1.4.0", "patched-default"], ["report"], repeats=2, schedules=[2],
                              sims=["mujoco", "mjwarp"])
    assert [(s.config, s.sim) for s in specs] == [
        ("upstream-1.4.0", "mujoco"), ("patched-default", "mujoco"), ("patched-default", "mjwarp"),
        ("patched-default", "mjwarp"), ("patched-default", "mujoco"), ("upstream-1.4.0", "mujoco"),
    ]
    argv = bench_driver.single_run_argv(specs[2], common=[], output=Path("/o.json"), run_dir=Path("/r"))
    assert argv[argv.index("--backend") + 1] == "mjwarp"
    args = bench_options.parse_args(["--unilab-root", "/x", "--backend", "mjwarp", "--config", "patched-default"])
    assert f"task={args.task}/mjwarp" in bench_options.hydra_overrides(args, Path("/logs"))
    with pytest.raises(SystemExit):
        bench_options.parse_args(["--unilab-root", "/x", "--backend", "mjwarpp"])


def test_mjwarp_runs_get_their_own_rows_and_the_physics_table_sets_them_side_by_side() -> None:
    import mjwarp_report

    runs = bench_report.load_runs(PROJECT / "results" / "2026-12-01-h200-mjwarp" / "bench")
    rows = {bench_report.run_key(r) for r in runs}
    assert {"patched-default", "patched-default @mjwarp"} <= rows
    table = mjwarp_report.physics_table(runs)
    mjwarp_rows = [line for line in table.splitlines() if "MuJoCo Warp (GPU)" in line]
    assert len(mjwarp_rows) == 2  # report 2/1/1 and UniLab's defaults
    # the ratio is CPU MuJoCo's mean wall over MJWarp's, from the same setting's two runs
    wall = {r["backend"]: r["wall_per_iter_ms"]["mean_ms"] for r in runs
            if r["config"] == "patched-default" and r["setting"] == "unilab-default"}
    ratio = next(line for line in mjwarp_rows if "unilab-default" in line).rstrip(" |").split("|")[-1].strip()
    assert ratio == f"{wall['mujoco'] / wall['mjwarp']:.2f}×"
    # Negative control: without the CPU MuJoCo run of a setting there is no pair, so no row for it.
    alone = [r for r in runs if not (r["setting"] == "unilab-default" and r["backend"] == "mujoco")]
    assert sum("MuJoCo Warp (GPU)" in line for line in mjwarp_report.physics_table(alone).splitlines()) == 1


def test_runs_under_cuda_mps_get_their_own_row() -> None:
    runs = bench_report.load_runs(PROJECT / "results" / "2026-12-01-h200-mjwarp-mps-sim2sim" / "bench-mps")
    assert sorted(r["device"]["cuda_mps"] for r in runs) == ["off", "on"]
    table = bench_report.throughput_table(runs)
    rows = [line for line in table.splitlines() if "MuJoCo Warp GPU physics" in line]
    assert len(rows) == 2 and sum(", CUDA MPS |" in line for line in rows) == 1
    on = next(r for r in runs if r["device"]["cuda_mps"] == "on")
    mps_row = next(line for line in rows if "CUDA MPS" in line)
    assert mps_row.split("|")[3].strip() == f"{on['wall_per_iter_ms']['mean_ms']:.2f}"
    # Negative control: the same runs without the MPS record fall into one row (the split comes from the record).
    for run in runs:
        run["device"].pop("cuda_mps")
    assert sum("MuJoCo Warp GPU physics" in line for line in bench_report.throughput_table(runs).splitlines()) == 1


def test_mjwarp_runs_compare_the_gpu_physics_pins_and_cpu_runs_do_not() -> None:
    pins = {"TORCH_VERSION": "2.11.0", "MUJOCO_WARP_VERSION": "3.11.0", "WARP_LANG_VERSION": "1.16.0"}
    found = {"torch": "2.11.0", "mujoco-warp": "3.11.0", "warp-lang": "1.15.0"}
    assert bench_env.version_drift(found, pins, sim="mjwarp") == {"warp-lang": {"pinned": "1.16.0", "found": "1.15.0"}}
    assert bench_env.version_drift({**found, "warp-lang": None}, pins) == {}


@pytest.mark.parametrize(("exit_code", "expected"), [(0, "on"), (1, "off")])
def test_cuda_mps_state_follows_the_control_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 exit_code: int, expected: str) -> None:
    """Runs record whether an MPS daemon served the host: the control tool's answer to get_server_list decides."""
    tool = tmp_path / "nvidia-cuda-mps-control"
    tool.write_text(f"#!/bin/sh\nread line\n[ \"$line\" = get_server_list ] || exit 3\nexit {exit_code}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bench_env.cuda_mps_state() == expected


def test_cuda_mps_state_is_none_without_the_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bench_env.cuda_mps_state() is None
