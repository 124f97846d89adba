"""Run files' compact form (experiments/bench/run_files.py): written by the bench, read back exactly as written.

The compact form leaves out what a run repeats (the summary window ``rows``, the ``reward`` column, each row's
``wall_per_iter_ms``) and stores ``rows_all`` by column; ``read_json`` must give every key and value back in its
order. Controls: a run whose ``rows`` is not the derived window keeps it; a damaged column is an error, not a
shorter run; a truncated file is an error.
"""

from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "experiments" / "bench"))

import bench_stats  # noqa: E402
import run_files  # noqa: E402

HEADLINE = PROJECT / "results" / "2026-12-06-h100-headline" / "runs"


def _run(n: int = 40) -> dict:
    rows = [{"step": i + 1, "learner_train_ms": 1.0 + i / 7, "iter_ms": 3.0 + i / 3, "collector_cycle_ms": 2.5 + i / 13, "reward": None if i < 3 else i / 9,
             "collector_timing_ms": {"env_step_ms": 2.0 + i / 11, "replay_write_ms": 0.1 * i},
             "wall_s": 10.0 + 0.0371 * i} for i in range(n)]
    rows[5].pop("collector_timing_ms")  # a row without a key the others have
    run = {"status": "completed", "summary_last": 10, "training_config": {"num_envs": 4}, "rows_all": rows}
    run.update(bench_stats.timing_report(rows, summary_last=10, skip_first=2))
    run["reward"] = [row.get("reward") for row in run["rows_all"]]
    return run


@pytest.mark.parametrize("suffix", run_files.SUFFIXES)
def test_round_trip_exact(tmp_path: Path, suffix: str) -> None:
    run = _run()
    path = run_files.write_run(tmp_path / f"r{suffix}", run)
    stored = path.read_bytes()
    text = (lzma.decompress(stored) if suffix.endswith(".xz") else
            __import__("gzip").decompress(stored) if suffix.endswith(".gz") else stored).decode()
    record = json.loads(text)
    assert "rows" not in record and "reward" not in record and record[run_files.MARKER]["left_out"] == [
        "rows", "reward", "wall_per_iter_ms"]
    back = run_files.read_json(path)
    assert json.dumps(back) == json.dumps(run)  # every key, value and order
    # a recorded path under another suffix still finds the run
    assert json.dumps(run_files.read_json(tmp_path / "r.json.gz" if suffix != ".json.gz" else tmp_path / "r.json")) \
        == json.dumps(run)


def test_rows_not_derived_are_kept(tmp_path: Path) -> None:
    """Control: a run whose window is not what select_summary_rows gives keeps its rows as written."""
    run = _run()
    run["rows"] = run["rows"][:-1]
    back = run_files.read_json(run_files.write_run(tmp_path / "r.json", run))
    assert "rows" not in json.loads((tmp_path / "r.json").read_text())[run_files.MARKER]["left_out"]
    assert json.dumps(back) == json.dumps(run)


def test_damaged_files_are_errors(tmp_path: Path) -> None:
    """Controls: a column one value short and a truncated file fail to read instead of giving another run."""
    path = run_files.write_run(tmp_path / "r.json", _run())
    record = json.loads(path.read_text())
    record["rows_all"]["columns"]["iter_ms"]["values"].pop()
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError):
        run_files.read_json(path)
    stored = run_files.write_run(tmp_path / "s.json.xz", _run())
    stored.write_bytes(stored.read_bytes()[:-40])
    with pytest.raises(lzma.LZMAError):
        run_files.read_json(stored)


def test_store_checks_and_replaces(tmp_path: Path) -> None:
    """``store`` converts a plain run JSON to .json.xz that reads back equal, and leaves a non-run JSON alone."""
    run = _run()
    (tmp_path / "a.json").write_text(json.dumps(run, indent=2))
    (tmp_path / "other.json").write_text(json.dumps({"mode": "ops"}))
    done = run_files.store(run_files.json_files(tmp_path))
    assert [(a.name, b.name) for a, b in done] == [("a.json", "a.json.xz")]
    assert not (tmp_path / "a.json").exists() and (tmp_path / "other.json").is_file()
    assert json.dumps(run_files.read_json(tmp_path / "a.json.xz")) == json.dumps(run)


def test_committed_runs_are_compact() -> None:
    """The committed headline runs are .json.xz in the compact form, their window the derived one."""
    paths = run_files.json_files(HEADLINE)
    assert paths and all(p.name.endswith(".json.xz") for p in paths)
    for path in paths:
        assert run_files.MARKER in json.loads(lzma.decompress(path.read_bytes()))
        run = run_files.read_json(path)
        assert run["rows"] == bench_stats.select_summary_rows(run["rows_all"], summary_last=run["summary_last"],
                                                              skip_first=run.get("skip_first", 0))
