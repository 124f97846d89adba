"""Apply and revert under faults, enumerated rather than sampled, on the real pinned trees.

A clean apply and a clean revert are traced first (PATCHSET_FAULT_TRACE): that gives N, the number of filesystem
mutations each makes through the one write layer (patchset/fsops.py). Then, for every mutation 1..N of each, the
process is stopped just before it by SIGTERM (orderly rollback), by an injected ENOSPC, and by kill -9 followed by
each recovery path (status then revert; apply). After every step the checkout and the overlay must be byte- and
mode-exact to pristine or to applied, hold no temporary of ours, carry a consistent state, and every failure must
be one line on stderr. Points run in parallel threads (each its own tree copy); the subprocesses do the work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import make_overlay, patchset
from faultcheck import differences, json_problems, output_problems, snapshot

WORKERS = max(2, os.cpu_count() or 2)


@dataclass(frozen=True)
class Reference:
    """What pristine and applied look like (relative snapshots), and how many mutations apply and revert make."""

    template: Path
    pristine: tuple[dict[str, str], dict[str, str]]
    applied: tuple[dict[str, str], dict[str, str]]
    apply_trace: list[str]
    revert_trace: list[str]


class Point:
    """One tree copy (checkout + overlay) on which one mutation point is exercised."""

    def __init__(self, base: Path, ref: Reference) -> None:
        base.mkdir()
        self.checkout, self.ref = base / "unilab", ref
        shutil.copytree(ref.template, self.checkout, symlinks=True)
        self.overlay = make_overlay(base / "overlay")
        self.problems: list[str] = []

    def run(self, command: str, codes: set[int], fault: str | None = None, needle: str = "",
            ) -> subprocess.CompletedProcess:
        env = {"PATCHSET_FAULT_AT": fault} if fault else None
        proc = patchset(self.overlay, command, "--unilab", str(self.checkout), env=env)
        self.problems += [f"{command} ({fault or 'no fault'}): {p}" for p in output_problems(proc, codes, needle)]
        return proc

    def expect(self, which: str, after: str) -> None:
        """The trees are exactly pristine or exactly applied (state and overlay manifest consistent)."""
        want = self.ref.pristine if which == "pristine" else self.ref.applied
        got = (snapshot(self.checkout), snapshot(self.overlay))
        found = differences(got[0], want[0], "checkout") + differences(got[1], want[1], "overlay")
        if which == "applied" and not found:
            found = json_problems(self.checkout, self.overlay)
        self.problems += [f"{which} after {after}: {p}" for p in found]


def _traced(point: Point, command: str, trace: Path) -> list[str]:
    proc = patchset(point.overlay, command, "--unilab", str(point.checkout), env={"PATCHSET_FAULT_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stderr
    return trace.read_text().splitlines()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, pristine_template: Path) -> Reference:
    base = tmp_path_factory.mktemp("faults")
    point = Point(base / "reference", Reference(pristine_template, ({}, {}), ({}, {}), [], []))
    pristine = (snapshot(point.checkout), snapshot(point.overlay))
    apply_trace = _traced(point, "apply", base / "apply.trace")
    applied = (snapshot(point.checkout), snapshot(point.overlay))
    revert_trace = _traced(point, "revert", base / "revert.trace")
    assert (snapshot(point.checkout), snapshot(point.overlay)) == pristine
    return Reference(pristine_template, pristine, applied, apply_trace, revert_trace)


def _apply_point(point: Point, k: int) -> None:
    point.run("apply", {143}, f"{k}:term", "interrupted by SIGTERM; rolled back, nothing changed")
    point.expect("pristine", "SIGTERM")
    point.run("apply", {1}, f"{k}:errno=ENOSPC", "No space left on device")
    point.expect("pristine", "ENOSPC")
    point.run("apply", {-9}, f"{k}:kill")
    point.run("status", {0})
    point.run("revert", {0, 1}, needle="nothing to revert")
    point.expect("pristine", "kill -9, status, revert")
    point.run("apply", {-9}, f"{k}:kill")
    point.run("apply", {0})
    point.expect("applied", "kill -9, apply")
    point.run("revert", {0})
    point.expect("pristine", "kill -9, apply, revert")


def _revert_point(point: Point, k: int) -> None:
    point.run("apply", {0})
    point.run("revert", {143}, f"{k}:term", "interrupted by SIGTERM")
    point.expect("pristine", "SIGTERM (the revert completes first)")
    point.run("apply", {0})
    point.run("revert", {1}, f"{k}:errno=ENOSPC", "No space left on device")
    point.run("status", {0})
    point.run("revert", {0})
    point.expect("pristine", "ENOSPC, status, revert")
    point.run("apply", {0})
    point.run("revert", {-9}, f"{k}:kill")
    point.run("status", {0})
    point.run("revert", {0})
    point.expect("pristine", "kill -9, status, revert")
    point.run("apply", {0})
    point.run("revert", {-9}, f"{k}:kill")
    point.run("apply", {0})
    point.expect("applied", "kill -9, apply")
    point.run("revert", {0})
    point.expect("pristine", "kill -9, apply, revert")


def _enumerate(base: Path, ref: Reference, n: int, scenario: Callable[[Point, int], None]) -> list[str]:
    def one(k: int) -> list[str]:
        point = Point(base / f"point-{k}", ref)
        scenario(point, k)
        if not point.problems:
            shutil.rmtree(base / f"point-{k}")
        return [f"mutation {k} ({(ref.apply_trace if scenario is _apply_point else ref.revert_trace)[k - 1]}): {p}"
                for p in point.problems]
    with ThreadPoolExecutor(WORKERS) as pool:
        return [p for found in pool.map(one, range(1, n + 1)) for p in found]


def test_traces_name_every_kind_of_mutation(reference: Reference) -> None:
    """The enumeration is only as good as the trace: apply writes the journal, the checkout file (temporary,
    fsync, rename), the staged overlay and its manifest; revert rewrites, discards and unlinks."""
    ops = {line.split()[1] for line in reference.apply_trace}
    assert {"mkdir", "fill", "write", "fsync", "rename", "rmdir"} <= ops
    assert any(line.endswith("src/unilab/conf/flashsac/config.yaml") for line in reference.apply_trace)
    assert {"write", "fsync", "rename", "rmtree", "unlink"} <= {line.split()[1] for line in reference.revert_trace}
    print(f"mutation points: apply {len(reference.apply_trace)}, revert {len(reference.revert_trace)}")


def test_kill_at_every_mutation_of_apply(tmp_path: Path, reference: Reference) -> None:
    start = time.monotonic()
    problems = _enumerate(tmp_path, reference, len(reference.apply_trace), _apply_point)
    print(f"apply: {len(reference.apply_trace)} mutation points in {time.monotonic() - start:.0f} s")
    assert not problems, "\n".join(problems)


def test_kill_at_every_mutation_of_revert(tmp_path: Path, reference: Reference) -> None:
    start = time.monotonic()
    problems = _enumerate(tmp_path, reference, len(reference.revert_trace), _revert_point)
    print(f"revert: {len(reference.revert_trace)} mutation points in {time.monotonic() - start:.0f} s")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("command", ["apply", "revert"])
def test_sigint_rolls_back_in_order(tmp_path: Path, reference: Reference, command: str) -> None:
    """SIGINT takes the SIGTERM path: exit 130, one line, the trees exact (apply at its middle mutation)."""
    point = Point(tmp_path / "point", reference)
    if command == "revert":
        point.run("apply", {0})
    middle = len(reference.apply_trace if command == "apply" else reference.revert_trace) // 2
    point.run(command, {130}, f"{middle}:int", "interrupted by SIGINT")
    point.expect("pristine", "SIGINT")
    assert not point.problems, "\n".join(point.problems)


def test_checks_catch_litter_modes_and_bytes(tmp_path: Path, reference: Reference) -> None:
    """Negative controls: a stray temporary, a changed mode, a changed byte, a wrong owner all fail the checks."""
    point = Point(tmp_path / "point", reference)
    point.expect("pristine", "nothing")
    assert point.problems == []
    config = point.checkout / "src/unilab/conf/flashsac/config.yaml"
    for damage, undo in (
        (lambda: (config.parent / ".flashsac-tmp-config.yaml-1-1").write_bytes(b""),
         lambda: (config.parent / ".flashsac-tmp-config.yaml-1-1").unlink()),
        (lambda: config.chmod(0o600), lambda: config.chmod(0o644)),
        (lambda: config.write_bytes(config.read_bytes() + b" "), lambda: config.write_bytes(config.read_bytes()[:-1])),
        (lambda: (point.overlay / ".flashsac-tmp-staging-1-1").mkdir(),
         lambda: (point.overlay / ".flashsac-tmp-staging-1-1").rmdir()),
    ):
        damage()
        point.expect("pristine", "damage")
        assert len(point.problems) == 1, point.problems
        point.problems.clear()
        undo()
    point.run("apply", {0})
    point.expect("applied", "apply")
    assert point.problems == []
    (point.checkout / ".flashsac-overlay" / "state.json").write_text(
        (point.checkout / ".flashsac-overlay" / "state.json").read_text().replace('"applied"', '"applying"'))
    point.expect("applied", "state damage")
    assert len(point.problems) == 1 and "phase applying" in point.problems[0]
