"""The named, timed steps of `make setup` / `make apply` (scripts/make_steps.py): each step says what it does and
how long it took, a failing step keeps its exit code, and `make apply` ends with the list of its steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT, make


def steps(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROJECT / "scripts" / "make_steps.py"), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def steps_into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """As `make status | head -1` runs a step once head has exited: stdout is a pipe nobody reads any more."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, str(PROJECT / "scripts" / "make_steps.py"), *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(write_end)


def test_steps_are_named_timed_and_summarized(tmp_path: Path) -> None:
    log = tmp_path / "steps.jsonl"
    ok = steps("run", "--log", str(log), "say hello", "--", sys.executable, "-c", "print('hello')")
    assert ok.returncode == 0
    assert ok.stdout.splitlines()[:2] == ["==> say hello", "hello"]
    assert ok.stdout.splitlines()[2].startswith("<== say hello: done in ")
    summary = steps("summary", "--log", str(log), "make apply")
    assert summary.stdout.startswith("make apply: done in ") and "say hello" in summary.stdout
    assert not log.exists()
    # negative control: a failing step keeps its exit code and reports what ran so far
    steps("run", "--log", str(log), "first", "--", sys.executable, "-c", "pass")
    bad = steps("run", "--log", str(log), "second", "--", sys.executable, "-c", "raise SystemExit(7)")
    assert bad.returncode == 7 and "<== second: FAILED (exit 7)" in bad.stdout
    assert "steps so far: FAILED" in bad.stdout and "(exit 7)" in bad.stdout.splitlines()[-1]


def test_make_apply_ends_with_its_steps(checkout: Path, overlay: Path) -> None:
    proc = make("apply", f"UNILAB={checkout}", f"OVERLAY={overlay}")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "==> apply the series" in out
    assert any(line.startswith("applied ") for line in out)
    tail = out[out.index(next(line for line in out if line.startswith("make apply: done in "))):]
    assert any(line.strip().startswith("apply the series") for line in tail[1:])
    assert not list((PROJECT / "work").glob(".make-steps-*.jsonl"))


def test_a_closed_output_pipe_neither_stops_a_step_nor_prints_an_error(tmp_path: Path) -> None:
    """The step still runs, is recorded and keeps its exit code; its lost frame lines are no error of make's."""
    log = tmp_path / "steps.jsonl"
    ok = steps_into_a_closed_pipe("run", "--log", str(log), "first", "--", sys.executable, "-c", "pass")
    assert (ok.returncode, ok.stderr) == (0, "")
    assert json.loads(log.read_text())["step"] == "first"
    summary = steps_into_a_closed_pipe("summary", "--log", str(log), "make apply")
    assert (summary.returncode, summary.stderr) == (0, "") and not log.exists()
    bad = steps_into_a_closed_pipe("run", "--log", str(log), "second", "--", sys.executable, "-c",
                                   "raise SystemExit(5)")
    assert (bad.returncode, bad.stderr) == (5, "")
